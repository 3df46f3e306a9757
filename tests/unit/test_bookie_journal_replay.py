"""Strict journal replay (bookie_server.journal.replay_journals): one case per kind of damage, every directory;
each case with the default read size and with reads of 7 bytes, which split every record across reads (the bounded
reads themselves: tests/unit/test_bookie_journal_stream.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterator

import pytest

from bkspark.errors import CorruptJournalError
from bookie_server import journal as journal_module
from bookie_server.journal import (
    Journal,
    JournalPosition,
    JournalRecord,
    RecordType,
    all_journal_files,
    encode_record,
    replay_journals,
)

START = JournalPosition(0, 0)


@pytest.fixture(autouse=True, params=[journal_module.REPLAY_READ_BYTES, 7], ids=["default-reads", "7-byte-reads"])
def read_size(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Every case runs with the default read size and with reads of 7 bytes (records split across reads)."""
    monkeypatch.setattr(journal_module, "REPLAY_READ_BYTES", request.param)
    yield request.param


def write_files(dirs: list[Path], files: int, per_file: int = 3) -> list[tuple[int, Path]]:
    """``files`` journal files of ``per_file`` FENCE records each (ledger ids 0, 1, 2, ... in write order)."""
    journal = Journal(dirs)
    journal.open()
    ledger = 0
    for f in range(files):
        if f:
            journal.roll()
        for _ in range(per_file):
            done = threading.Event()
            journal.submit(encode_record(RecordType.FENCE, 0, ledger), lambda e: done.set())
            assert done.wait(5)
            ledger += 1
    journal.close()
    return all_journal_files(dirs)


def replayed(dirs: list[Path], **kwargs: object) -> list[int]:
    seen: list[JournalRecord] = []
    replay_journals(dirs, START, seen.append, **kwargs)  # type: ignore[arg-type]
    return [r.ledger_id for r in seen]


def record_size() -> int:
    return len(encode_record(RecordType.FENCE, 0, 0))


def test_torn_tail_of_newest_file_is_truncated_and_replay_goes_on(tmp_path: Path) -> None:
    files = write_files([tmp_path], 2)
    newest = files[-1][1]
    intact = newest.stat().st_size
    with open(newest, "ab") as fh:
        fh.write(encode_record(RecordType.FENCE, 0, 99)[:-3])  # a crash mid-write
    assert replayed([tmp_path]) == [0, 1, 2, 3, 4, 5]
    assert newest.stat().st_size == intact  # truncated, so the next start sees a clean file
    assert replayed([tmp_path]) == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("tail", [b"\0" * 40, encode_record(RecordType.FENCE, 0, 99)[:-1] + b"\xff"])
def test_zero_fill_or_bad_last_record_of_newest_file_is_a_torn_tail(tmp_path: Path, tail: bytes) -> None:
    files = write_files([tmp_path], 1)
    with open(files[-1][1], "ab") as fh:
        fh.write(tail)
    assert replayed([tmp_path]) == [0, 1, 2]


def test_bad_crc_in_the_middle_of_newest_file_stops_with_file_and_offset(tmp_path: Path) -> None:
    files = write_files([tmp_path], 1)
    path = files[-1][1]
    data = bytearray(path.read_bytes())
    offset = 16 + record_size()  # the second record
    data[offset + 12] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptJournalError) as info:
        replayed([tmp_path])
    message = str(info.value)
    assert str(path) in message and f"offset {offset}" in message and "skipReplayJournalInvalidRecord=true" in message
    assert path.stat().st_size == len(data)  # nothing was truncated


def test_torn_looking_tail_of_an_older_file_is_not_accepted(tmp_path: Path) -> None:
    """A file is synced before the next one starts, so only the newest can be torn."""
    files = write_files([tmp_path], 2)
    older = files[0][1]
    with open(older, "ab") as fh:
        fh.write(encode_record(RecordType.FENCE, 0, 99)[:-3])
    with pytest.raises(CorruptJournalError, match="record runs past the end"):
        replayed([tmp_path])


def overwrite_newest(tmp_path: Path, files: int, offset: int, data: bytes) -> Path:
    """Write ``files`` journal files, then ``data`` over the newest one's bytes at ``offset``; its path."""
    path = write_files([tmp_path], files)[-1][1]
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)
    return path


def test_bad_header_stops_even_in_newest_file(tmp_path: Path) -> None:
    overwrite_newest(tmp_path, 2, 0, b"XXXX")
    with pytest.raises(CorruptJournalError, match="bad file header at offset 0"):
        replayed([tmp_path])


def test_truncated_header_of_newest_file_is_torn_and_empty_files_are_ignored(tmp_path: Path) -> None:
    files = write_files([tmp_path], 1)
    (tmp_path / f"{files[-1][0] + 1:016x}.txn").write_bytes(b"")
    (tmp_path / f"{files[-1][0] + 2:016x}.txn").write_bytes(b"BKSJ\0")
    assert replayed([tmp_path]) == [0, 1, 2]
    assert (tmp_path / f"{files[-1][0] + 2:016x}.txn").stat().st_size == 0


def test_skip_flag_skips_rest_of_the_damaged_file_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    files = write_files([tmp_path], 2)
    path = files[0][1]
    data = bytearray(path.read_bytes())
    data[16 + record_size() + 12] ^= 0xFF
    path.write_bytes(bytes(data))
    with caplog.at_level("ERROR", logger="bookie_server.journal"):
        assert replayed([tmp_path], skip_invalid_records=True) == [0, 3, 4, 5]
    assert any("skipReplayJournalInvalidRecord=true" in r.getMessage() for r in caplog.records)


def test_every_directory_is_written_and_replayed_in_file_order(tmp_path: Path) -> None:
    dirs = [tmp_path / "j1", tmp_path / "j2"]
    files = write_files(dirs, 4)
    assert {path.parent for _, path in files} == set(dirs)
    assert replayed(dirs) == list(range(12))
    # Damage in the second directory is found too.
    second = next(path for _, path in files if path.parent == dirs[1] and _ != files[-1][0])
    data = bytearray(second.read_bytes())
    data[16 + 12] ^= 0xFF
    second.write_bytes(bytes(data))
    with pytest.raises(CorruptJournalError, match=str(second)):
        replayed(dirs)


def test_same_file_id_in_two_directories_is_refused(tmp_path: Path) -> None:
    dirs = [tmp_path / "j1", tmp_path / "j2"]
    files = write_files(dirs, 1)
    file_id, path = files[0]
    other = dirs[1] if path.parent == dirs[0] else dirs[0]
    (other / path.name).write_bytes(path.read_bytes())
    with pytest.raises(CorruptJournalError, match="exists twice"):
        replayed(dirs)


def test_replay_starts_at_the_checkpoint_mark(tmp_path: Path) -> None:
    files = write_files([tmp_path], 2)
    seen: list[JournalRecord] = []
    mark = JournalPosition(files[1][0], 16 + record_size())
    replay_journals([tmp_path], mark, seen.append)
    assert [r.ledger_id for r in seen] == [4, 5]


def test_a_torn_tail_is_one_warning_naming_file_offset_and_bytes_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/bookie.md, "Journal replay": truncating a torn tail logs one warning naming the file, the offset and the
    bytes dropped."""
    files = write_files([tmp_path], 1)
    newest = files[-1][1]
    intact = newest.stat().st_size
    with open(newest, "ab") as fh:
        fh.write(encode_record(RecordType.FENCE, 0, 99)[:-3])
    with caplog.at_level("WARNING", logger="bookie_server.journal"):
        assert replayed([tmp_path]) == [0, 1, 2]
    [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
    dropped = record_size() - 3
    message = warning.getMessage()
    assert str(newest) in message and f"offset {intact}" in message and f"{dropped} bytes dropped" in message


def _unknown_type_record() -> bytes:
    import struct

    import crc32c

    body = struct.pack(">Bqq", 99, 0, 7)  # a well-formed record of a type no bookie writes
    return struct.pack(">II", len(body), crc32c.crc32c(body)) + body


@pytest.mark.parametrize("where", ["middle", "last"])
def test_an_unknown_record_type_refuses_the_start_even_as_the_last_record(tmp_path: Path, where: str) -> None:
    """docs/bookie.md, "Journal replay": an unknown record type is damage, never a torn tail (its checksum is good),
    wherever it lies; so is a bad length with data after it."""
    files = write_files([tmp_path], 1)
    path = files[-1][1]
    data = path.read_bytes()
    if where == "middle":
        data = data[: 16 + record_size()] + _unknown_type_record() + data[16 + record_size() :]
    else:
        data += _unknown_type_record()
    path.write_bytes(data)
    with pytest.raises(CorruptJournalError, match="unknown record type 99"):
        replayed([tmp_path])


def test_a_bad_length_with_data_after_it_refuses_the_start(tmp_path: Path) -> None:
    offset = 16 + record_size()  # the second record's length field: 3 is shorter than any record's body
    path = overwrite_newest(tmp_path, 1, offset, (3).to_bytes(4, "big"))
    size = path.stat().st_size
    with pytest.raises(CorruptJournalError, match=f"bad record length 3 at offset {offset}"):
        replayed([tmp_path])
    assert path.stat().st_size == size  # nothing truncated
