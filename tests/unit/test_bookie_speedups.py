"""The bookie's compiled loops (bookie_server/_speedups.c) against the pure-Python references they stand in for.

Every case runs both ways, the compiled module on and off (``_speedups`` of ``journal`` and ``storage`` set to
None, what ``BKSPARK_NO_EXTENSIONS=1`` does at import): the same bytes, the same errors (docs/architecture.md,
"Compiled fast path").
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from bkspark.protocol import v2
from bkspark.protocol.digest import entry_header, master_key
from bookie_server import journal as journal_module
from bookie_server import v2_handlers as v2_handlers_module
from bookie_server import entry_logs as entry_logs_module
from bookie_server.journal import JournalPosition, RecordType, add_records, add_records_reference, iter_records
from bookie_server.entry_logs import cache_key, key_address, log_records, log_records_reference
from bookie_server.storage import LedgerStorage

COMPILED = journal_module._speedups
USERS = (journal_module, entry_logs_module, v2_handlers_module)


@pytest.fixture(params=["compiled", "reference"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "reference":
        for module in USERS:
            monkeypatch.setattr(module, "_speedups", None)
    return str(request.param)


def test_the_compiled_loops_are_built_and_on() -> None:
    """make builds them (pip install runs the C compiler); CI must run the compiled path, not only the reference."""
    assert COMPILED is not None, "bookie_server._speedups was not built: run `make venv` (needs a C compiler)"
    assert all(module._speedups is COMPILED for module in USERS)  # the switch: tests/unit/test_speedups.py


def _adds(rng: random.Random, n: int) -> list[tuple]:
    adds: list[tuple] = []
    for i in range(n):
        payload = rng.randbytes(rng.choice([0, 1, 33, 1024, rng.randrange(5000)]))
        entry = payload if i % 3 == 0 else memoryview(b"xx" + payload)[2:]  # bytes, or a view as the splitter gives
        ledger = rng.choice([1, 2**40 + 7, 2**63 - 1])
        adds.append((ledger, rng.randrange(-1, 2**62), rng.randrange(-1, 2**62), entry, b"k" * 20, False, i % 5 == 0))
    return adds


def test_add_records_are_the_reference_records(path: str, tmp_path: Path) -> None:
    rng = random.Random(14)
    for scope_id in (0, 1, 2**62):
        adds = _adds(rng, 300)
        blob, entries = add_records(scope_id, adds)
        assert (blob, entries) == add_records_reference(scope_id, adds)
        assert all(type(e) is bytes for e in entries)
        assert all(e is a[3] for e, a in zip(entries, adds) if type(a[3]) is bytes)  # no copy of what is bytes
        # What the journal's reader makes of them: one ADD_ENTRY record per add, in order.
        journal_file = tmp_path / f"{scope_id}.txn"
        header = journal_module._FILE_HEADER.pack(journal_module._FILE_MAGIC, journal_module._FILE_VERSION, 1)
        journal_file.write_bytes(header + blob)
        records = [record for _end, record in iter_records(journal_file)]
        assert [(r.type, r.scope_id, r.ledger_id) for r in records] == [(RecordType.ADD_ENTRY, scope_id, a[0]) for a in adds]
        assert [journal_module.decode_add_payload(r.payload) for r in records] == [
            (a[1], a[2], bytes(a[3])) for a in adds
        ]
    assert add_records(0, []) == (b"", [])


def test_add_records_hand_what_they_cannot_do_to_the_reference(path: str) -> None:
    with pytest.raises(struct.error):
        add_records(0, [(1, 2**63, 0, b"x")])  # an id over int64: the reference's error
    assert COMPILED is None or COMPILED.add_records(0, [(1, 2**63, 0, b"x")]) is None


def _add_group(rng: random.Random, n: int, refused: bool) -> list[v2.AddRequest]:
    """v2 adds as a connection decodes them: entry headers V1 and V2 (scope 0), every flag; with ``refused``,
    also adds the bookie refuses (a short or unknown header, a scope, a bad version)."""
    key = master_key(b"pw")
    group = []
    for i in range(n):
        ledger, entry_id, lac = rng.choice([1, 2**62]), rng.randrange(0, 2**40), rng.randrange(-1, 2**40)
        if rng.random() < 0.5:  # format V1, as Java's DigestManager writes it
            data = struct.pack(">qqqq", ledger, entry_id, lac, i) + b"p" * i
        else:  # format V2 (its format byte: high bit, V2, the digest type) in scope 0
            data = bytes([0xA0 | rng.choice([1, 3])]) + struct.pack(">qqqqq", 0, ledger, entry_id, lac, i) + b"p" * i
        flags = rng.choice([0, v2.FLAG_RECOVERY_ADD, v2.FLAG_HIGH_PRIORITY, v2.FLAG_RECOVERY_ADD | v2.FLAG_HIGH_PRIORITY])
        version = rng.choice([v2.LOWEST_COMPAT_PROTOCOL_VERSION, v2.PROTOCOL_VERSION])
        if refused and rng.random() < 0.2:
            kind = rng.randrange(4)
            if kind == 0:
                data = data[:rng.choice([16, 20, 31])]  # shorter than its header (the decoder guaranteed 16)
            elif kind == 1:
                data = bytes([0xB0]) + bytes(40)  # the high bit and an unknown format
            elif kind == 2:
                data = bytes([0xA1]) + struct.pack(">qqqqq", 5, ledger, entry_id, lac, 0)  # scope 5
            else:
                version = rng.choice([-1, v2.PROTOCOL_VERSION + 1])
        entry = memoryview(b"....." + data)[5:] if i % 2 else data
        group.append(v2.AddRequest(flags, key, entry, version))
    return group


@pytest.mark.parametrize("refused", [False, True])
def test_add_rows_are_the_reference_rows(monkeypatch: pytest.MonkeyPatch, refused: bool) -> None:
    """The rows of a group of v2 adds, compiled and reference: the same rows, ids and refusals (a group with a
    refusal is handed to the reference whole)."""
    rng = random.Random(7 if refused else 8)
    for _round in range(40):
        group = _add_group(rng, rng.randrange(0, 60), refused)
        reference = v2_handlers_module.add_rows_reference(group)
        assert v2_handlers_module.add_rows(group) == reference
        if COMPILED is not None:  # compiled exactly when no add is refused
            compiled = COMPILED.add_rows(group, 0, v2.PROTOCOL_VERSION, v2.FLAG_RECOVERY_ADD, v2.FLAG_HIGH_PRIORITY)
            assert (compiled is None) == bool(reference[2])
        rows, ids, refusals = reference
        assert len(rows) + len(refusals) == len(group)
        for row, (ledger_id, entry_id, _version) in zip(rows, ids):
            assert entry_header(row[3])[1:] == (ledger_id, entry_id, row[2]) and row[:2] == (ledger_id, entry_id)
        monkeypatch.setattr(v2_handlers_module, "_speedups", None)
        assert v2_handlers_module.add_rows(group) == reference
        monkeypatch.undo()


def _snapshot(rng: random.Random) -> dict[int, bytes]:
    entries = {}
    for ledger in (3, 1, 2**40, -2):
        for entry_id in rng.sample(range(-1, 5000), 200):
            entries[cache_key(rng.choice([0, 0, 7]), ledger, entry_id)] = rng.randbytes(rng.randrange(0, 3000))
    return entries


def test_log_records_are_the_reference_records(path: str) -> None:
    rng = random.Random(15)
    entries = _snapshot(rng)
    keys = list(entries)
    rng.shuffle(keys)
    asked: list[int] = []

    def place(size: int) -> tuple[int, int]:
        asked.append(size)
        return 9, 4096

    blob, rows = log_records(keys, entries, place)
    assert (blob, rows) == log_records_reference(keys, entries, place)
    assert asked == [len(blob)] * 2  # once per call, with the blob's size
    # Sorted by key; each row's key is the entry's (scope, ledger, entry) and its location points at the entry's
    # bytes inside the blob placed at 4096, after a record header with the same key.
    assert [int.from_bytes(k, "big") for k, _ in rows] == sorted(keys)
    for key_bytes, location in rows:
        log_id, offset, length = struct.unpack(">QQI", location)
        key = int.from_bytes(key_bytes, "big")
        assert struct.unpack(">qqq", key_bytes) == key_address(key)
        assert log_id == 9 and blob[offset - 4096 : offset - 4096 + length] == entries[key]
        assert struct.unpack(">Iqqq", blob[offset - 4096 - 28 : offset - 4096]) == (length, *key_address(key))


@pytest.mark.parametrize(
    "order",
    ["writers-runs", "one-writer", "runs-that-interleave", "short-runs"],
)
def test_log_records_sort_a_write_caches_runs_as_the_reference_sorts_every_key(path: str, order: str) -> None:
    """Key orders a write cache has (writers' runs of adds in arrival order, one writer's ascending keys, two
    writers' runs that interleave in one ledger, short runs): the compiled loop's blob and rows are the reference's."""
    rng = random.Random(16)
    keys: list[int] = []
    if order in ("writers-runs", "runs-that-interleave"):
        step = 2 if order == "runs-that-interleave" else 1  # two writers' runs share one ledger's ids
        next_id = {(0, 5): 0, (0, 9): 1 if step == 2 else 0, (7, 5): 0}
        writers = [(0, 5), (0, 9), (7, 5)] if step == 1 else [(0, 5), (0, 9)]
        for _ in range(60):
            scope_id, ledger_id = rng.choice(writers)
            target = 5 if step == 2 else ledger_id
            run = rng.randrange(1, 40)
            first = next_id[(scope_id, ledger_id)]
            keys += [cache_key(scope_id, target, first + step * i) for i in range(run)]
            next_id[(scope_id, ledger_id)] = first + step * run
    elif order == "one-writer":
        keys = [cache_key(0, 3, i) for i in range(500)]
    else:
        keys = [cache_key(0, rng.randrange(4), rng.randrange(10_000)) for _ in range(400)]
        keys = list(dict.fromkeys(keys))
    entries = {key: rng.randbytes(rng.randrange(0, 200)) for key in keys}

    def place(size: int) -> tuple[int, int]:
        return 3, 128

    blob, rows = log_records(keys, entries, place)
    assert (blob, rows) == log_records_reference(keys, entries, place)
    assert [int.from_bytes(k, "big") for k, _ in rows] == sorted(keys)


def test_log_records_hand_what_they_cannot_do_to_the_reference(path: str) -> None:
    def place(size: int) -> tuple[int, int]:
        return 1, 8

    key = cache_key(0, 1, 2)
    with pytest.raises(KeyError):
        log_records([key], {}, place)  # a key without its entry
    odd = {key: bytearray(b"not bytes")}
    assert log_records([key], odd, place) == log_records_reference([key], odd, place)
    for not_a_key in (-1, 1 << 192):  # no entry's key: no 24 bytes
        with pytest.raises(OverflowError):
            log_records([not_a_key], {not_a_key: b""}, place)
    if COMPILED is not None:
        assert COMPILED.log_records([key], {}, place) is None
        assert COMPILED.log_records([key], odd, place) is None
        assert COMPILED.log_records([(0, 1, 2)], {(0, 1, 2): b""}, place) is None  # a tuple, as keys were
        assert COMPILED.log_records([-1], {-1: b""}, place) is None
        assert COMPILED.log_records([1 << 192], {1 << 192: b""}, place) is None


def test_a_checkpoint_writes_the_same_files_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry logs and the index a checkpoint writes are byte for byte those of the reference path."""
    rng = random.Random(16)
    entries = _snapshot(rng)
    logs = {}
    for name in ("compiled", "reference"):
        if name == "reference":
            monkeypatch.setattr(entry_logs_module, "_speedups", None)
        storage = LedgerStorage([tmp_path / name])
        storage.open()
        for key, data in entries.items():
            storage.put_entry(*key_address(key), -1, data)
        storage.checkpoint(JournalPosition(1, 1))
        assert all(storage.get_entry(*key_address(key)) == data for key, data in entries.items())
        storage.close()
        logs[name] = sorted((p.name, p.read_bytes()) for p in (tmp_path / name).rglob("*.log"))
    assert logs["compiled"] == logs["reference"] and logs["compiled"]
