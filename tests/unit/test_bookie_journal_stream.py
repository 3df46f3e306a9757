"""Journal replay streams each file in bounded reads (docs/bookie.md, "Journal replay"): what it holds does not
grow with the file, which reached ``journalMaxSizeMB`` between two checkpoints."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from bookie_server import journal as journal_module
from bookie_server.journal import (
    Journal,
    JournalFileScan,
    JournalPosition,
    JournalRecord,
    all_journal_files,
    encode_add,
    replay_journals,
)

START = JournalPosition(0, 0)


class CountingFile:
    """A file object that notes the size of every read replay asks for."""

    def __init__(self, fh: Any, sizes: list[int]) -> None:
        self._fh, self._sizes = fh, sizes

    def read(self, n: int = -1) -> bytes:
        self._sizes.append(n)
        return self._fh.read(n)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)

    def __enter__(self) -> "CountingFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()


def test_replay_reads_a_journal_file_in_bounded_reads_not_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 3 MB journal file (one record of 300 KB among them) replayed with reads of 64 KiB: no read asks for more,
    each byte is read once, every record comes back; from a mark inside the file, the bytes before it are not read.
    The old replay read each file whole in one read."""
    limit = 64 * 1024
    monkeypatch.setattr(journal_module, "REPLAY_READ_BYTES", limit)
    journal = Journal([tmp_path])
    journal.open()
    entries = {eid: bytes([eid % 251]) * (300_000 if eid == 500 else 3000) for eid in range(1000)}
    done = threading.Event()
    for eid, data in entries.items():
        journal.submit(encode_add(0, 1, eid, eid - 1, data), (lambda e: done.set()) if eid == 999 else (lambda e: None))
    assert done.wait(30)
    journal.close()
    [(file_id, path)] = all_journal_files([tmp_path])
    sizes: list[int] = []
    real_open = open
    monkeypatch.setattr(journal_module, "open", lambda *a, **k: CountingFile(real_open(*a, **k), sizes), raising=False)
    seen: list[JournalRecord] = []
    replay_journals([tmp_path], START, seen.append)
    assert [journal_module.decode_add_payload(r.payload)[2] for r in seen] == list(entries.values())
    assert sizes and max(sizes) <= limit and -1 not in sizes
    assert sum(sizes) <= path.stat().st_size  # each byte once
    mark = JournalPosition(file_id, [end for end, _ in JournalFileScan(path)][600])  # a record's end
    sizes.clear()
    assert replay_journals([tmp_path], mark, lambda record: None) == 1000 - 601
    assert sum(sizes) <= path.stat().st_size - mark.offset + limit
