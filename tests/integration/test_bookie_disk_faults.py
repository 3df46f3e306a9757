"""A real Python bookie whose disk starts refusing writes between the steps of its multi-step operations
(docs/bookie.md, "Failures between the steps"): nothing it acknowledged is lost or changed, every refused
operation gets a typed error and the server stays up, and after a SIGKILL it restarts and serves what it
acknowledged.

The fault is the kernel's own: :meth:`PythonBookie.limit_file_size` sets the running bookie's RLIMIT_FSIZE, so
its next write past that many bytes of a file fails with EFBIG, as on a full disk -- no hook inside the bookie.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from bkspark.protocol import v2
from bookie_server.app import STOPPED_WITHOUT_CHECKPOINT
from tests.harness.python_bookie import LedgerEntries, PythonBookieCluster, RawBookieConnection

pytestmark = [pytest.mark.integration, pytest.mark.fault]

ENTRIES = LedgerEntries(b"disk-faults")
#: The bookie's own log file is smaller: under this limit it still says what fails.
SMALL_DISK = 64 * 1024
#: No periodic checkpoint during a test: what is durable is what the journal synced.
NO_PERIODIC_CHECKPOINT = {"flushInterval": 600000}


def add_300(conn: RawBookieConnection, ledger: int) -> list[tuple[int, int]]:
    """300 pipelined adds (about 300 KiB), all acknowledged."""
    acked = [(ledger, eid) for eid in range(300)]
    conn.send(b"".join(ENTRIES.add_request(ledger, eid) for ledger, eid in acked))
    assert [v2.decode_response(conn.recv()).rc for _ in acked] == [v2.EOK] * len(acked)
    return acked


def add(conn: RawBookieConnection, ledger: int, eid: int) -> int:
    """A normal add's return code."""
    return conn.call_v2(ENTRIES.add_request(ledger, eid)).rc


def fence(conn: RawBookieConnection, ledger: int) -> int:
    """A fencing read's return code (EOK only once the fence is durable)."""
    return conn.call_v2(v2.encode_read_request(ledger, -1, v2.FLAG_DO_FENCING, ENTRIES.master_key)).rc


def assert_served(conn: RawBookieConnection, acked: list[tuple[int, int]]) -> None:
    """Every acknowledged add reads back with its bytes."""
    for ledger, eid in acked:
        resp = conn.call_v2(v2.encode_read_request(ledger, eid))
        assert resp.rc == v2.EOK and bytes(resp.entry) == ENTRIES.entry(ledger, eid), (ledger, eid, resp.rc)


def assert_served_after_a_crash(cluster: PythonBookieCluster, acked: list[tuple[int, int]]) -> None:
    """SIGKILL the cluster's one bookie, start it again (a new process: a new journal file, no file-size limit),
    and check every acknowledged add reads back with its bytes."""
    cluster.crash(0)
    cluster.start(0, timeout=90)
    with RawBookieConnection(cluster.bookies[0].port) as conn:
        assert_served(conn, acked)


@contextmanager
def one_bookie_after_300_adds(zk_root, tmp_path: Path, conf: dict[str, object]):  # type: ignore[no-untyped-def]
    """One Python bookie of ``conf`` with 300 acknowledged adds to ledger 1: ``(cluster, bookie, conn, acked)``."""
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides=conf)
    with cluster:
        bookie = cluster.bookies[0]
        assert bookie.process is not None
        with RawBookieConnection(bookie.port) as conn:
            yield cluster, bookie, conn, add_300(conn, 1)


def fill_only_the_ledger_disk(bookie) -> None:  # type: ignore[no-untyped-def]
    """After a first checkpoint, limit the bookie's files above any journal file (1 MiB with journalMaxSizeMB 1, then
    it rolls) and below where the entry log grows to: only the ledger disk fills."""
    bookie.process.wait_until(lambda: bookie.entry_log_bytes() > 250 * 1024, timeout=20, what="a checkpoint")
    bookie.limit_file_size(max(bookie.entry_log_bytes(), 1024 * 1024) + 600 * 1024)


def assert_stopped_as_read_only_mode_is_disabled(cluster: PythonBookieCluster, bookie) -> str:  # type: ignore[no-untyped-def]
    """Exit status 5 (Java's ``ExitCode.BOOKIE_EXCEPTION``), the reason logged, no registration left; the log."""
    assert bookie.process.wait_exit(60) == 5
    said = bookie.log_tail(200)
    assert "read-only mode is not enabled (readOnlyModeEnabled=false): shutting down the bookie" in said
    assert cluster.registered() == [] and cluster.registered(readonly=True) == []
    return said


def test_a_journal_that_cannot_write_acknowledges_no_add_and_no_fence_and_keeps_serving(  # type: ignore[no-untyped-def]
    zk_root, tmp_path: Path
) -> None:
    """The journal's write fails: the add and the fence of that batch get EIO, and so does every later fence of
    that ledger (its fence is in memory but never became durable: an EOK would be lost by a crash); the bookie
    turns read-only and goes on serving reads; restarted, it serves what it acknowledged and is writable."""
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides=NO_PERIODIC_CHECKPOINT)
    with cluster:
        bookie = cluster.bookies[0]
        acked: list[tuple[int, int]] = []
        fences_acked: list[int] = []
        with RawBookieConnection(bookie.port) as conn:
            for ledger in (1, 2):
                for eid in range(5):
                    assert add(conn, ledger, eid) == v2.EOK
                    acked.append((ledger, eid))
            bookie.limit_file_size(1)  # every file of the bookie is past 1 byte: no write succeeds
            assert add(conn, 1, 5) == v2.EIO
            for _ in range(2):  # the first fence's record fails; the second must not be answered from memory
                rc = fence(conn, 2)
                assert rc in (v2.EOK, v2.EIO), rc
                if rc == v2.EOK:
                    fences_acked.append(2)
            # The journal refuses every record now: the bookie says so by turning read-only, and serves reads.
            assert bookie.process is not None
            bookie.process.wait_until(
                lambda: cluster.registered(readonly=True) == [bookie.bookie_id], timeout=20, what="read-only registration"
            )
            assert cluster.http_get(0, "/api/v1/bookie/state")["readOnly"] is True
            assert add(conn, 1, 6) == v2.EREADONLY
            assert_served(conn, acked)
        cluster.crash(0)
        cluster.start(0, timeout=90)  # writable again: the new process has a new journal file
        with RawBookieConnection(bookie.port) as conn:
            assert_served(conn, acked)
            assert add(conn, 1, 5) == v2.EOK
            for ledger in fences_acked:
                assert add(conn, ledger, 10_000) == v2.EFENCED, f"acknowledged fence of ledger {ledger} lost"
        assert not fences_acked, "a fence that never became durable was acknowledged"


def test_a_checkpoint_the_disk_refuses_keeps_its_entries_and_is_retried_in_the_same_log(  # type: ignore[no-untyped-def]
    zk_root, tmp_path: Path
) -> None:
    """Checkpoints fail halfway into the entry log while the disk refuses writes past 64 KiB: the acknowledged
    entries stay readable from the write cache (which gets a failed checkpoint's entries back), each retry cuts the
    log back and tries again in it (not one new file per retry), and once the disk takes writes again they reach
    the entry log and the index and survive a SIGKILL.  The log has the first failure's traceback only, and one
    line with the count once a checkpoint succeeds again."""
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides={"flushInterval": 300})
    with cluster:
        bookie = cluster.bookies[0]
        assert bookie.process is not None
        with RawBookieConnection(bookie.port) as conn:
            acked = add_300(conn, 1)
            bookie.limit_file_size(SMALL_DISK)
            bookie.process.wait_until(
                lambda: "a checkpoint failed" in bookie.log_tail(400), timeout=20, what="a failed checkpoint"
            )
            time.sleep(1.5)  # retried after 0.1 s, 0.2 s, then every 0.3 s (flushInterval)
            assert len(bookie.entry_logs()) == 1
            assert_served(conn, acked)
            bookie.limit_file_size(None)
            bookie.process.wait_until(
                lambda: "succeeded again" in bookie.log_tail(400), timeout=20, what="a checkpoint after the fault"
            )
            assert bookie.entry_log_bytes() > 250 * 1024
            assert_served(conn, acked)
        logged = [json.loads(line) for line in bookie.log_tail(400).splitlines() if line.startswith("{")]
        back = [line for line in logged if "succeeded again" in line["msg"]]
        assert len(back) == 1 and back[0]["failed_checkpoints"] >= 4  # retried, all in the one entry log
        tracebacks = [line for line in logged if "exc" in line]
        assert len(tracebacks) == 1, tracebacks
        assert tracebacks[0]["msg"].startswith("a checkpoint failed: read-only until one succeeds")
        assert_served_after_a_crash(cluster, acked)


def test_checkpoints_a_full_ledger_disk_refuses_turn_the_bookie_read_only_until_one_succeeds(  # type: ignore[no-untyped-def]
    zk_root, tmp_path: Path
) -> None:
    """Only the ledger disk fills: the journal, whose files roll at 1 MiB, stays under the limit while the entry log
    grows past it.  The first failed checkpoint turns the bookie read-only (adds get EREADONLY instead of piling up
    in the write cache) while it serves every acknowledged entry; once the disk takes writes again the next
    checkpoint makes it writable, and what it acknowledged survives a SIGKILL."""
    conf = {"flushInterval": 200, "journalMaxSizeMB": 1}
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides=conf)
    with cluster:
        bookie = cluster.bookies[0]
        assert bookie.process is not None

        def readonly() -> bool:
            return bool(cluster.http(0, "GET", "/api/v1/bookie/state")["readOnly"])

        with RawBookieConnection(bookie.port) as conn:
            acked = add_300(conn, 1)
            fill_only_the_ledger_disk(bookie)
            refused = 0
            for eid in range(300, 3000):  # about 2.6 MiB more: past the entry log's limit, never a journal file's
                rc = add(conn, 1, eid)
                if rc == v2.EOK:
                    acked.append((1, eid))
                    continue
                assert rc == v2.EREADONLY, rc
                refused += 1
                break
            assert refused == 1 and readonly()
            assert (cluster.metric(0, "bookie_flush_count", success="false") or 0.0) >= 1  # the failures are counted
            bookie.process.wait_until(
                lambda: cluster.registered(readonly=True) == [bookie.bookie_id], timeout=20, what="read-only registration"
            )
            assert_served(conn, acked)
            bookie.limit_file_size(None)
            bookie.process.wait_until(lambda: not readonly(), timeout=20, what="writable after a checkpoint succeeds")
            bookie.process.wait_until(
                lambda: cluster.registered(readonly=False) == [bookie.bookie_id], timeout=20, what="writable registration"
            )
            assert add(conn, 1, acked[-1][1] + 1) == v2.EOK
            acked.append((1, acked[-1][1] + 1))
        assert_served_after_a_crash(cluster, acked)


def test_a_stop_whose_final_checkpoint_the_disk_refuses_says_so_and_the_restart_replays(  # type: ignore[no-untyped-def]
    zk_root, tmp_path: Path
) -> None:
    """SIGTERM while the disk refuses writes: the final checkpoint fails, the bookie still closes its files and
    ZooKeeper session and exits 1 saying it stopped without that checkpoint (not that it "cannot start"), and the
    next start replays the journal and serves every acknowledged entry."""
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides=NO_PERIODIC_CHECKPOINT)
    with cluster:
        bookie = cluster.bookies[0]
        with RawBookieConnection(bookie.port) as conn:
            acked = add_300(conn, 1)
        bookie.limit_file_size(SMALL_DISK)
        assert cluster.stop(0) == 1
        said = bookie.log_tail(100)
        assert STOPPED_WITHOUT_CHECKPOINT in said and "cannot start" not in said
        assert cluster.registered() == [] and cluster.registered(readonly=True) == []
        assert bookie.entry_log_bytes() <= SMALL_DISK
        cluster.start(0)
        with RawBookieConnection(bookie.port) as conn:
            assert_served(conn, acked)


def test_a_journal_roll_over_the_disk_refuses_halfway_leaves_a_journal_the_restart_accepts(  # type: ignore[no-untyped-def]
    zk_root, tmp_path: Path
) -> None:
    """After a checkpoint the journal's next batch starts a new file; the disk takes only half of its header: the
    batch gets EIO, and the restart treats the half header as the torn end of the newest file (nothing in it was
    acknowledged), not as damage that stops the bookie, and serves every acknowledged entry."""
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides={"flushInterval": 300})
    with cluster:
        bookie = cluster.bookies[0]
        assert bookie.process is not None
        journal_dir = bookie.dir / "journal" / "current"
        with RawBookieConnection(bookie.port) as conn:
            acked = add_300(conn, 1)
            bookie.process.wait_until(lambda: bookie.entry_log_bytes() > 0, timeout=20, what="a checkpoint")
            # The entry log is written before that checkpoint asks the journal to roll: wait for a checkpoint that
            # ended after it (each one asks for a roll), or the next add could still go to the current file.
            done = cluster.metric(0, "bookie_flush_count", success="true") or 0.0
            bookie.process.wait_until(
                lambda: (cluster.metric(0, "bookie_flush_count", success="true") or 0.0) > done,
                timeout=20, what="a checkpoint's end",
            )
            files_before = sorted(journal_dir.glob("*.txn"))
            bookie.limit_file_size(8)  # half the 16-byte header of the next journal file
            assert add(conn, 1, len(acked)) == v2.EIO
        half_made = sorted(journal_dir.glob("*.txn"))[-1]
        assert half_made not in files_before and half_made.stat().st_size == 8
        cluster.crash(0)
        cluster.start(0, timeout=90)
        with RawBookieConnection(bookie.port) as conn:
            assert_served(conn, acked)
            assert add(conn, 1, len(acked)) == v2.EOK


def test_with_read_only_mode_disabled_a_failed_journal_stops_the_bookie_with_status_5(  # type: ignore[no-untyped-def]
    zk_root, tmp_path: Path
) -> None:
    """``readOnlyModeEnabled=false``: the journal's write fails, and where the bookie would turn read-only it stops
    instead, as Java's does (exit status 5, ``ExitCode.BOOKIE_EXCEPTION``): its registration is removed, not moved to
    ``available/readonly``, the log says why, and the restart serves every acknowledged add."""
    conf = {**NO_PERIODIC_CHECKPOINT, "readOnlyModeEnabled": "false"}
    with one_bookie_after_300_adds(zk_root, tmp_path, conf) as (cluster, bookie, conn, acked):
        journal = max((bookie.dir / "journal" / "current").glob("*.txn"), key=lambda p: p.stat().st_size)
        # The journal's next record (about 1 KiB) goes past the limit; the log, far smaller, has room to say why.
        bookie.limit_file_size(journal.stat().st_size + 100)
        assert add(conn, 1, 300) == v2.EIO
        assert_stopped_as_read_only_mode_is_disabled(cluster, bookie)
        cluster.start(0, timeout=90)
        with RawBookieConnection(bookie.port) as conn:
            assert_served(conn, acked)
            assert add(conn, 1, 300) == v2.EOK


def test_with_read_only_mode_disabled_a_full_ledger_disk_stops_the_bookie_with_status_5_and_the_restart_replays(  # type: ignore[no-untyped-def]
    zk_root, tmp_path: Path
) -> None:
    """``readOnlyModeEnabled=false`` and only the ledger disk full: the failed checkpoint stops the bookie, whose final
    checkpoint then fails on the same disk.  It still exits with status 5 (why it stopped), logs that it stopped
    without the final checkpoint, leaves no registration, and the next start replays the journal: every
    acknowledged add is served."""
    conf = {"flushInterval": 200, "journalMaxSizeMB": 1, "readOnlyModeEnabled": "false"}
    with one_bookie_after_300_adds(zk_root, tmp_path, conf) as (cluster, bookie, conn, acked):
        fill_only_the_ledger_disk(bookie)
        for eid in range(300, 3000):  # about 2.6 MiB more: past the entry log's limit, never a journal file's
            try:
                rc = add(conn, 1, eid)
            except (ConnectionError, EOFError, OSError):
                break  # the bookie is on its way out
            if rc != v2.EOK:
                assert rc == v2.EREADONLY, rc
                break
            acked.append((1, eid))
        said = assert_stopped_as_read_only_mode_is_disabled(cluster, bookie)
        assert STOPPED_WITHOUT_CHECKPOINT in said and "cannot start" not in said
        cluster.start(0, timeout=90)
        with RawBookieConnection(bookie.port) as conn:
            assert_served(conn, acked)
