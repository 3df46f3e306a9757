"""Entry-log compaction in a real Python bookie process (docs/bookie.md, "Compaction"): a log that a live ledger
shares with deleted ones is compacted and removed, so the deleted data's disk is reclaimed; a crash after the copy
or after the index commit loses nothing acknowledged, and the next round finishes the job."""

from __future__ import annotations

import urllib.error
from pathlib import Path
from typing import Any

import pytest

from bkspark.protocol import v2, zk_paths
from bookie_server.journal import CRASH_AT_ENV, CrashPoint, crash_words
from tests.harness.acked_history import a_request_it_dies_in, restart_after_its_own_crash
from tests.harness.netns import wait_until
from tests.harness.python_bookie import LedgerEntries, PythonBookieCluster, RawBookieConnection

pytestmark = [pytest.mark.integration]

ENTRIES = LedgerEntries(b"compaction", max_payload=4000)
LIVE, DOOMED = [3], [1, 2]
#: Entries written to each doomed ledger (about 2 KB each: 1.2 MB in all) and to the live one.
DOOMED_ENTRIES, LIVE_ENTRIES = 300, 20
#: Only the stops' and GC's checkpoints, and GC rounds only when a test asks.
CONF = {"flushInterval": 600000, "gcWaitTime": 600000}


def gc_round(cluster: PythonBookieCluster, **force: object) -> dict[str, Any]:
    """One GC round through the admin API (``forceMajor`` / ``forceMinor`` as Java's TriggerGCService takes them)."""
    return cluster.http(0, "PUT", "/api/v1/bookie/gc", body=force, timeout=120)  # type: ignore[no-any-return]


def write(port: int, adds: list[tuple[int, int]]) -> None:
    with RawBookieConnection(port) as conn:
        for ledger, eid in adds:
            assert conn.call_v2(ENTRIES.add_request(ledger, eid)).rc == v2.EOK


def assert_readable(port: int, adds: list[tuple[int, int]]) -> None:
    with RawBookieConnection(port) as conn:
        for ledger, eid in adds:
            resp = conn.call_v2(v2.encode_read_request(ledger, eid))
            assert resp.rc == v2.EOK and bytes(resp.entry) == ENTRIES.entry(ledger, eid), (ledger, eid)


def shared_log_cluster(
    zk_root: Any, tmp_path: Path, restart_conf: dict[str, object] | None = None
) -> tuple[PythonBookieCluster, list[tuple[int, int]]]:
    """A started bookie whose one closed entry log holds ledgers 1-2 (no metadata: GC deletes them) and 3 (has
    metadata), restarted with ``restart_conf`` over :data:`CONF`; returns it and ledger 3's acknowledged adds."""
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides=CONF)
    for ledger in LIVE:
        zk_root.zk_client.create(zk_paths.ledger_path(zk_root.path, ledger, "hierarchical"), b"", makepath=True)
    cluster.start_all()
    live = [(ledger, eid) for ledger in LIVE for eid in range(LIVE_ENTRIES)]
    write(cluster.bookies[0].port, [(ledger, eid) for ledger in DOOMED for eid in range(DOOMED_ENTRIES)] + live)
    assert cluster.stop(0) == 0  # its checkpoint puts all three ledgers in one log; the restart opens a new one
    cluster.bookies[0].values.update(restart_conf or {})
    cluster.bookies[0].write_conf()
    cluster.start(0)
    return cluster, live


def test_compaction_reclaims_the_disk_of_deleted_ledgers_that_shared_a_log_with_a_live_one(  # type: ignore[no-untyped-def]
    zk_root, tmp_path: Path
) -> None:
    """Before compaction, GC removed only logs with no live entry: this log, with ledger 3's 20 entries in it,
    stayed whole for good (the old code's state after the first round, asserted here too)."""
    cluster, live = shared_log_cluster(zk_root, tmp_path)
    bookie = cluster.bookies[0]
    with cluster:
        before = bookie.entry_log_bytes()
        shared = set(bookie.entry_logs())
        answer = gc_round(cluster)  # deletes 1-2; no compaction is due (the start counts as one)
        assert sorted(d["ledger"] for d in answer["deleted"]) == DOOMED and answer["compactedEntryLogs"] == 0
        assert shared <= set(bookie.entry_logs())
        with pytest.raises(urllib.error.HTTPError) as refused:
            gc_round(cluster, forceMajor="yes")
        assert refused.value.code == 400
        answer = gc_round(cluster, forceMajor=True)
        after = bookie.entry_log_bytes()
        print(f"\nentry logs: {before} bytes before, {after} after the deletions and a major compaction")
        assert answer["compactedEntryLogs"] == 1
        assert not shared & set(bookie.entry_logs())
        assert after < before / 10
        assert_readable(bookie.port, live)
        assert cluster.stop(0) == 0
        cluster.start(0)
        assert_readable(bookie.port, live)


def test_a_minor_compaction_runs_by_itself_at_its_interval(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``gcWaitTime`` 1 s and ``minorCompactionInterval`` 1 s, major compactions off: no one asks, the disk use falls."""
    cluster, live = shared_log_cluster(
        zk_root, tmp_path, {"gcWaitTime": 1000, "minorCompactionInterval": 1, "majorCompactionInterval": 0}
    )
    bookie = cluster.bookies[0]
    with cluster:
        before = bookie.entry_log_bytes()
        wait_until(lambda: bookie.entry_log_bytes() < before / 10, timeout=120, what="a minor compaction")
        assert "minor compaction" in bookie.log_tail(400)
        assert_readable(bookie.port, live)


@pytest.mark.fault
@pytest.mark.parametrize("point", [CrashPoint.COMPACTION_COPIED, CrashPoint.COMPACTION_INDEXED])
def test_a_crash_between_the_steps_of_a_compaction_loses_nothing_and_the_next_round_finishes_it(  # type: ignore[no-untyped-def]
    zk_root, tmp_path: Path, point: CrashPoint
) -> None:
    """SIGKILLed after the copies are synced (rows still on the old log), or after the rows are committed (the old
    log not removed): every acknowledged add, those still in the journal included, is read back after the restart,
    and the next round removes the old log."""
    cluster, live = shared_log_cluster(zk_root, tmp_path)
    bookie = cluster.bookies[0]
    with cluster:
        shared = set(bookie.entry_logs())
        gc_round(cluster)  # the deletions, checkpointed
        more = [(ledger, eid) for ledger in LIVE for eid in range(LIVE_ENTRIES, 2 * LIVE_ENTRIES)]
        write(bookie.port, more)  # acknowledged, in the journal and the write cache only
        assert cluster.stop(0) == 0
        bookie.fault_env = {CRASH_AT_ENV: f"{point.value}:1"}
        cluster.start(0)
        a_request_it_dies_in(lambda: gc_round(cluster, forceMajor=True))  # the bookie dies in the round
        restart_after_its_own_crash(cluster, 0, crash_words(point))
        assert shared <= set(bookie.entry_logs())  # the crash came before the old log's removal
        assert_readable(bookie.port, live + more)
        gc_round(cluster, forceMajor=True)
        assert not shared & set(bookie.entry_logs())
        assert_readable(bookie.port, live + more)
