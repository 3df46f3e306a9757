"""The bookie's entry index frees the LMDB reader slots that dead processes left taken (docs/bookie.md, "The
entry index's reader slots"): a process killed while it held a read transaction keeps its slot for as long as any
other process has the environment open, and a full reader table makes every index read answer EIO."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest

from bookie_server.entry_logs import LedgerDirectory

READERS = 4

_HOLD_A_READ = """
import sys, time, lmdb
env = lmdb.open(sys.argv[1], max_dbs=4, subdir=True, max_readers={readers})
txn = env.begin(db=env.open_db(b"index"))
txn.get(b"k")
print("reading", flush=True)
time.sleep(120)
"""

_HOLD_OPEN = """
import sys, time, lmdb
env = lmdb.open(sys.argv[1], max_dbs=4, subdir=True, max_readers={readers})
env.open_db(b"index")
print("open", flush=True)
time.sleep(300)
"""


def _start(code: str, index: Path, said: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", code.format(readers=READERS), str(index)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == said
    return child


def _kill(child: subprocess.Popen[str]) -> None:
    os.kill(child.pid, signal.SIGKILL)
    child.wait(30)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Path]:
    """A ledger directory's index held open by another process (the one that keeps dead readers' slots taken),
    whose reader table it made small (the first process to open an environment sets its size)."""
    path = tmp_path / "current" / "index"
    path.mkdir(parents=True)
    holder = _start(_HOLD_OPEN, path, "open")
    try:
        yield path
    finally:
        _kill(holder)


def _kill_readers(index: Path, count: int) -> None:
    """``count`` processes that each begin a read transaction on ``index`` and are killed with -9 holding it."""
    for _ in range(count):
        _kill(_start(_HOLD_A_READ, index, "reading"))


def test_reads_go_on_when_dead_processes_filled_the_reader_table(index: Path) -> None:
    directory = LedgerDirectory(index.parent.parent, map_size=1 << 20, entry_log_size_limit=1 << 20)
    with directory.env.begin(write=True, db=directory.index_db) as txn:
        txn.put(b"k", b"v")
    _kill_readers(index, READERS)
    with pytest.raises(lmdb.ReadersFullError):
        directory.env.begin(db=directory.index_db)
    assert directory.index_get(b"k") == b"v"  # the dead readers' slots freed, the read begun again
    with directory.begin_read() as txn:
        assert txn.get(b"k") == b"v"
    directory.refresh()
    directory.env.close()

