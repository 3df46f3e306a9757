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



def test_reader_slots_count_this_processs_transactions_and_a_table_full_of_live_ones_is_logged_by_thread(
    index: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """The gauge's figures (``bookie_index_reader_slots``): this process's slots in a read transaction and idle ones
    (py-lmdb keeps an ended transaction reset, holding its slot, for reuse); another process's are not counted.  A
    table full of live readers cannot be freed: the read raises ``ReadersFullError`` after logging the table with
    the thread that began each transaction, which is how a leak is traced."""
    directory = LedgerDirectory(index.parent.parent, map_size=1 << 20, entry_log_size_limit=1 << 20)
    other = _start(_HOLD_A_READ, index, "reading")  # another process's live reader: not ours
    try:
        assert directory.reader_slots() == (0, 0)
        held = [directory.begin_read() for _ in range(2)]
        assert directory.reader_slots() == (2, 0)
        held.pop().abort()
        active, idle = directory.reader_slots()
        assert active == 1 and active + idle <= 2
        import threading

        began, finish = threading.Event(), threading.Event()

        def begin_on_a_named_thread() -> None:  # a read thread that keeps running, as the bookie's pool's do
            held.append(directory.begin_read())
            began.set()
            finish.wait(60)

        thread = threading.Thread(target=begin_on_a_named_thread, name="leaky-reader")
        thread.start()
        try:
            assert began.wait(60)
            assert directory.reader_slots()[0] == 2
            with caplog.at_level("ERROR", logger="bookie_server.storage"), pytest.raises(lmdb.ReadersFullError):
                while True:  # the table has READERS slots: fill the rest with live transactions of this process
                    held.append(directory.begin_read())
        finally:
            finish.set()
            thread.join()
        table = next(r.getMessage() for r in caplog.records if "no free reader slot" in r.getMessage())
        assert "leaky-reader" in table and str(other.pid) in table
        assert directory.reader_slots()[0] == READERS - 1  # every slot but the other process's
        for txn in held:
            txn.abort()
        assert directory.reader_slots()[0] == 0
    finally:
        _kill(other)
        directory.refresh()
        directory.env.close()


def test_a_read_that_finds_the_table_full_of_live_readers_is_eio_logged_and_the_next_one_reads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """What the soak met (docs/reliability.md, "The soak"): a bookie's index reads failing on a full reader table.
    The read is answered EIO (``BookieIOError``) with an error line (the client sees only the EIO), and once the
    transactions end the same read gives the entry: nothing stored is lost."""
    from bkspark.errors import BookieIOError
    from bookie_server.storage import LedgerStorage
    from bookie_server.journal import JournalPosition
    from tests.unit.test_bookie_storage import KEY, entry

    storage = LedgerStorage([tmp_path])
    storage.open()
    try:
        storage.set_master_key(0, 1, KEY)
        for i in range(5):
            storage.put_entry(0, 1, i, i - 1, entry(1, i, i - 1, b"e%d" % i))
        storage.checkpoint(JournalPosition(1, 1))  # on disk now: a read needs the index
        (directory,) = storage._dirs
        held = []
        with pytest.raises(lmdb.ReadersFullError):
            while True:
                held.append(directory.begin_read())
        with caplog.at_level("ERROR", logger="bookie_server.storage"), pytest.raises(BookieIOError):
            storage.get_entry(0, 1, 3)
        assert any("entry index read failed" in r.getMessage() for r in caplog.records)
        for txn in held:
            txn.abort()
        assert storage.get_entry(0, 1, 3).endswith(b"e3")
    finally:
        storage.close()


def test_reads_whose_errors_are_kept_hold_no_reader_slot(tmp_path: Path) -> None:
    """The leak the soak met (docs/bookie.md, "The entry index's reader slots"): py-lmdb keeps an ended read
    transaction's slot until the Python object is freed, and the traceback of an ENOENTRY read referenced it, so
    each error a future still held kept a slot; after 126 the bookie's reads all failed with EIO.  Now 300 such
    errors, all kept, hold none, and every read still says ENOENTRY, through a read thread's own transaction, the
    loop thread's reused one and a run of single reads."""
    from bookie_server.journal import JournalPosition
    from bookie_server.storage import LedgerStorage
    from bkspark.errors import NoSuchEntryError
    from tests.unit.test_bookie_storage import KEY, entry

    storage = LedgerStorage([tmp_path])
    storage.open()
    try:
        storage.set_master_key(0, 1, KEY)
        storage.put_entry(0, 1, 0, -1, entry(1, 0, -1, b"e0"))
        storage.checkpoint(JournalPosition(1, 1))
        (directory,) = storage._dirs
        kept: list[BaseException] = []
        for entry_id in range(1, 301):
            with pytest.raises(NoSuchEntryError) as caught:
                if entry_id % 2:
                    storage.read_cold((0, 1, entry_id))  # a read thread's own transaction
                else:
                    storage.get_entry(0, 1, entry_id)  # the loop thread's reused one
            kept.append(caught.value)
            directory.refresh()  # as a checkpoint does: the reused transaction ends
        run = storage.read_run_cold(0, [(1, e) for e in range(301, 331)], 1 << 20)
        assert all(isinstance(answer, NoSuchEntryError) for answer in run)
        active, idle = directory.reader_slots()
        assert active == 0 and idle <= 1, (active, idle)  # at most py-lmdb's one spare
        assert storage.get_entry(0, 1, 0).endswith(b"e0")
    finally:
        storage.close()
