"""Rows packed into entries (bkspark/datasource/packing.py) against a reference written from docs/connector.md,
"Rows per entry", one row and one struct at a time: the bytes, the cuts, the way back, and every broken entry."""

from __future__ import annotations

import random
import struct

import numpy as np
import pyarrow as pa
import pytest

from bkspark.datasource import packing
from bkspark.datasource.options import parse_write_options
from bkspark.errors import CorruptEntryError, InvalidOptionError


def offsets_of(rows: list[bytes]) -> np.ndarray:
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    return offsets


def reference_pack(rows: list[bytes], rows_per_entry: int, entry_max_bytes: int) -> list[bytes]:
    """The documented format, greedily: rows join the current entry while it stays within both bounds."""
    entries, current, size = [], [], 8
    for row in rows:
        if current and (len(current) == rows_per_entry or size + 4 + len(row) > entry_max_bytes):
            entries.append(b"BKR\x01" + struct.pack(">I", len(current))
                           + b"".join(struct.pack(">I", len(r)) for r in current) + b"".join(current))
            current, size = [], 8
        current.append(row)
        size += 4 + len(row)
    if current:
        entries.append(b"BKR\x01" + struct.pack(">I", len(current))
                       + b"".join(struct.pack(">I", len(r)) for r in current) + b"".join(current))
    return entries


def reference_unpack(entry: bytes) -> list[bytes]:
    magic, count = entry[:4], struct.unpack(">I", entry[4:8])[0]
    assert magic == b"BKR\x01"
    lengths = struct.unpack(f">{count}I", entry[8 : 8 + 4 * count])
    rows, at = [], 8 + 4 * count
    for n in lengths:
        rows.append(entry[at : at + n])
        at += n
    assert at == len(entry)
    return rows


@pytest.mark.parametrize("seed", range(12))
def test_pack_matches_the_documented_format_and_unpacks_to_the_same_rows(seed: int) -> None:
    rng = random.Random(seed)
    rows = [rng.randbytes(rng.choice([0, 1, 7, 100, 1000, 5000])) for _ in range(rng.choice([1, 2, 50, 3000]))]
    rows_per_entry = rng.choice([1, 2, 10, 100, 1_000_000])
    entry_max_bytes = rng.choice([1024, 4096, packing.DEFAULT_ENTRY_MAX_BYTES])
    entries, cuts = packing.pack_rows(offsets_of(rows), b"".join(rows), rows_per_entry, entry_max_bytes)
    assert entries == reference_pack(rows, rows_per_entry, entry_max_bytes)
    assert cuts[0] == 0 and cuts[-1] == len(rows) and len(cuts) == len(entries) + 1
    for entry, a, b in zip(entries, cuts, cuts[1:]):
        assert reference_unpack(entry) == rows[a:b]
        assert b - a <= rows_per_entry
        assert len(entry) <= entry_max_bytes or b - a == 1  # a larger row goes alone
    first_id = rng.randrange(0, 1 << 40)
    ids, payloads = packing.unpack_entries(np.arange(first_id, first_id + len(entries)), pa.array(entries, pa.binary()))
    assert payloads.type == pa.binary()
    payloads.validate(full=True)
    assert payloads.to_pylist() == rows
    assert ids.tolist() == [first_id + i for i, (a, b) in enumerate(zip(cuts, cuts[1:])) for _ in range(b - a)]


def test_unpack_takes_a_sliced_or_large_binary_column() -> None:
    rows = [f"r{i}".encode() for i in range(100)]
    entries, _ = packing.pack_rows(offsets_of(rows), b"".join(rows), 7)
    column = pa.array([b"junk"] + entries, pa.large_binary()).slice(1)
    ids, payloads = packing.unpack_entries(np.arange(5, 5 + len(entries)), column)
    assert payloads.to_pylist() == rows and ids[0] == 5 and ids[-1] == 5 + len(entries) - 1
    ids, payloads = packing.unpack_entries(np.arange(0), pa.array([], pa.binary()))
    assert len(ids) == 0 and len(payloads) == 0


@pytest.mark.parametrize(
    "entry, what",
    [
        (b"", "no rows-v1 header"),
        (b"BKR\x02\x00\x00\x00\x01\x00\x00\x00\x00", "no rows-v1 header"),
        (b"BKR\x01\x00\x00\x00\x00", "row count"),
        (b"BKR\x01\x00\x00\x00\x05\x00\x00\x00\x01", "row count"),
        (b"BKR\x01\x00\x00\x00\x01\x00\x00\x00\x03ab", "do not add up"),
        (b"BKR\x01\x00\x00\x00\x01\x00\x00\x00\x01abc", "do not add up"),
        (b"plain entry of another writer", "no rows-v1 header"),
    ],
)
def test_a_broken_entry_is_a_corrupt_entry_error_naming_it(entry: bytes, what: str) -> None:
    good, _ = packing.pack_rows(offsets_of([b"x"]), b"x", 10)
    with pytest.raises(CorruptEntryError, match=what) as info:
        packing.unpack_entries(np.array([3, 4]), pa.array(good + [entry], pa.binary()))
    assert info.value.context["entry_id"] == 4
    assert not info.value.retriable


def test_the_ledger_tag_decides_and_an_unknown_format_is_refused() -> None:
    assert packing.packed_ledger({packing.ENTRY_FORMAT_KEY: packing.ROWS_V1})
    assert packing.packed_ledger(((packing.ENTRY_FORMAT_KEY, packing.ROWS_V1),))
    assert not packing.packed_ledger({"bkspark.dataset": b"x"})
    assert not packing.packed_ledger(())
    assert packing.packed_ledger({packing.ENTRY_FORMAT_KEY: packing.ROWS_V2})
    assert packing.entry_format({packing.ENTRY_FORMAT_KEY: b"rows-v2"}) == packing.ROWS_V2
    with pytest.raises(CorruptEntryError, match="rows-v3"):
        packing.packed_ledger({packing.ENTRY_FORMAT_KEY: b"rows-v3"})


def test_write_options_rows_per_entry_and_entry_max_bytes() -> None:
    base = {"metadataServiceUri": "zk+null://127.0.0.1:2181/ledgers", "dataset": "d"}
    opts = parse_write_options(base)
    assert (opts.rows_per_entry, opts.entry_max_bytes) == (1, packing.DEFAULT_ENTRY_MAX_BYTES)
    opts = parse_write_options({**base, "rowsPerEntry": "500", "entryMaxBytes": "65536"})
    assert (opts.rows_per_entry, opts.entry_max_bytes) == (500, 65536)
    for key, value in (("rowsPerEntry", "0"), ("rowsPerEntry", "many"), ("entryMaxBytes", "10"),
                       ("entryMaxBytes", str(1 << 31))):
        with pytest.raises(InvalidOptionError, match=key):
            parse_write_options({**base, key: value})
    with pytest.raises(ValueError):
        packing.pack_rows(offsets_of([b"a"]), b"a", 0)


def _rows_v2_columns(n: int, seed: int) -> tuple[pa.Table, list]:
    """A batch with payload, key and headers columns (nulls, empty values, several headers) and its rows."""
    import random

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        key = None if i % 5 == 0 else rng.randbytes(rng.choice([0, 3, 40]))
        headers = None if i % 7 == 3 else [
            {"key": f"h{j}-ключ", "value": None if j == 1 else rng.randbytes(rng.choice([0, 9]))}
            for j in range(rng.choice([0, 1, 3]))
        ]
        rows.append((rng.randbytes(rng.choice([0, 1, 100])), key, headers))
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    table = pa.table({
        "payload": pa.array([r[0] for r in rows], pa.binary()),
        "key": pa.array([r[1] for r in rows], pa.binary()),
        "headers": pa.array([r[2] for r in rows], header_type),
    })
    return table, rows


@pytest.mark.parametrize(("rows_per_entry", "entry_max_bytes", "seed"), [(1, 131072, 0), (10, 131072, 1), (1000, 1024, 2)])
def test_rows_v2_keep_each_rows_key_and_headers(rows_per_entry: int, entry_max_bytes: int, seed: int) -> None:
    """docs/connector.md, "Rows per entry": rows-v2 entries give back every row's payload, key and headers,
    nulls as nulls, whatever the packing."""
    from bkspark.datasource.writer import RowColumnIndexes, _row_columns

    table, rows = _rows_v2_columns(300, seed)
    batch = table.to_batches()[0]
    columns = _row_columns(batch, 0, False, RowColumnIndexes(key_index=1, headers_index=2))
    entries, cuts = packing.pack_row_columns(columns, rows_per_entry, entry_max_bytes)
    assert cuts[-1] == len(rows) and all(b - a <= rows_per_entry for a, b in zip(cuts, cuts[1:]))
    assert all(len(e) <= entry_max_bytes for e, (a, b) in zip(entries, zip(cuts, cuts[1:])) if b - a > 1)
    got = packing.unpack_rows(np.arange(len(entries)), pa.array(entries, pa.binary()), packing.ROWS_V2)
    assert got.payloads.to_pylist() == [r[0] for r in rows]
    assert got.keys.to_pylist() == [r[1] for r in rows]
    want_headers = [None if r[2] is None else [(h["key"], h["value"]) for h in r[2]] for r in rows]
    assert [None if h is None else [(x["key"], x["value"]) for x in h] for h in got.headers.to_pylist()] == want_headers
    assert list(got.entry_ids) == [i for i, (a, b) in enumerate(zip(cuts, cuts[1:])) for _ in range(b - a)]


def test_rows_v2_without_headers_and_corrupt_entries() -> None:
    from bkspark.datasource.writer import RowColumnIndexes, _row_columns

    table = pa.table({"payload": pa.array([b"a", b"bc"]), "key": pa.array(["k1", None])})
    columns = _row_columns(table.to_batches()[0], 0, False, RowColumnIndexes(key_index=1, key_is_string=True))
    entries, _ = packing.pack_row_columns(columns, 5)
    got = packing.unpack_rows(np.array([0]), pa.array(entries, pa.binary()), packing.ROWS_V2)
    assert (got.payloads.to_pylist(), got.keys.to_pylist(), got.headers) == ([b"a", b"bc"], [b"k1", None], None)
    for bad, what in ((entries[0][:-1], "do not add up"), (b"BKR\x01" + entries[0][4:], "no rows-v2 header"),
                      (entries[0][:8] + b"\x00\x00\x00\x08" + entries[0][12:], "bad row count or flags")):
        with pytest.raises(CorruptEntryError, match=what):
            packing.unpack_rows(np.array([0]), pa.array([bad], pa.binary()), packing.ROWS_V2)
