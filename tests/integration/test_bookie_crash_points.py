"""A real Python bookie SIGKILLed between two steps of a checkpoint, a journal roll-over or a GC round
(bookie_server.journal.CrashPoint; docs/bookie.md, "Failures between the steps"): it restarts, and every
acknowledged add, fence and master key is there; a GC round's deletions and the entry logs they emptied are
finished by the next round.

The bookie crashes itself at the named step (``BKSPARK_TEST_CRASH_AT``) while writer threads load it; a checker
that knows nothing of the step judges the writers' history against the restarted bookie.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bkspark.protocol import v2, zk_paths
from bookie_server.journal import CRASH_AT_ENV, CrashPoint, crash_words
from tests.harness.acked_history import a_request_it_dies_in, restart_after_its_own_crash, run_writers_until_the_crash, violations
from tests.harness.python_bookie import LedgerEntries, PythonBookieCluster, RawBookieConnection

pytestmark = [pytest.mark.integration, pytest.mark.fault]

ENTRIES = LedgerEntries(b"crash-points")
WRITERS = 3
#: A checkpoint every 200 ms, so the writers' load meets each step many times; GC only when a test asks.
CONF = {"flushInterval": 200, "gcWaitTime": 600000}
#: The crash comes at the n-th time a step is reached: past the start-up checkpoint, under load.
CRASH_AT_TIME = 4
#: Every periodic checkpoint reaches the committed step, with the writers' entries or without: the 6th comes
#: a second or more after the start, when the writers have been at it for a while even on a busy machine.
COMMITTED_CRASH_AT_TIME = 6


def crash_env(point: CrashPoint, time: int) -> dict[str, str]:
    return {CRASH_AT_ENV: f"{point.value}:{time}"}


@pytest.mark.parametrize(
    ("point", "ledger_dirs"),
    [
        (CrashPoint.CHECKPOINT_LOGS_SYNCED, 1),
        # Each checkpoint reaches the step once per directory: the 4th time is the second directory's, after the
        # first one's index and mark are committed and before the second one's are.
        (CrashPoint.CHECKPOINT_LOGS_SYNCED, 2),
        (CrashPoint.CHECKPOINT_COMMITTED, 1),
        (CrashPoint.JOURNAL_ROLLED, 1),
    ],
)
def test_a_crash_between_the_steps_of_a_checkpoint_or_a_roll_over_loses_nothing_acknowledged(  # type: ignore[no-untyped-def]
    zk_root, tmp_path: Path, point: CrashPoint, ledger_dirs: int
) -> None:
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides=CONF)
    bookie = cluster.bookies[0]
    bookie.values["ledgerDirectories"] = ",".join(str(bookie.dir / f"ledgers{i}") for i in range(ledger_dirs))
    bookie.write_conf()
    committed = point is CrashPoint.CHECKPOINT_COMMITTED
    bookie.fault_env = crash_env(point, COMMITTED_CRASH_AT_TIME if committed else CRASH_AT_TIME)
    with cluster:
        history = run_writers_until_the_crash(bookie.port, ENTRIES, WRITERS)
        restart_after_its_own_crash(cluster, 0, crash_words(point))
        found = violations(bookie.port, history, ENTRIES)
        acked = history.of("add", "ok")
        print(f"\n{point.value}: {len(acked)} adds, {len(history.of('fence', 'ok'))} fences acknowledged; {found[:5]}")
        assert len(acked) > 100 and history.of("fence", "ok")
        assert found == []
        # A clean stop and start after that: what the restart checkpointed stands on its own.
        assert cluster.stop(0) == 0
        cluster.start(0)
        assert violations(bookie.port, history, ENTRIES) == []


def entry_logs(cluster: PythonBookieCluster) -> set[str]:
    return set(p.name for p in (cluster.bookies[0].dir / "ledgers" / "current" / "entrylogs").glob("*.log"))


def gc_round(cluster: PythonBookieCluster) -> list[int]:
    """One GC round through the admin API; the ledgers it deleted."""
    return [d["ledger"] for d in cluster.http(0, "PUT", "/api/v1/bookie/gc", body={}, timeout=60)["deleted"]]


def test_a_crash_between_a_gc_rounds_checkpoint_and_its_log_removal_is_finished_by_the_next_round(  # type: ignore[no-untyped-def]
    zk_root, tmp_path: Path
) -> None:
    """Ledgers 1-2 have no metadata (GC deletes them), 3 has; the log holding only 1-2 must go, 3 stays whole."""
    conf = dict(CONF, flushInterval=600000)  # only the stops' and GC's checkpoints
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides=conf)
    bookie = cluster.bookies[0]
    live, doomed = [3], [1, 2]
    for ledger in live:
        zk_root.zk_client.create(zk_paths.ledger_path(zk_root.path, ledger, "hierarchical"), b"", makepath=True)
    with cluster:
        with RawBookieConnection(bookie.port) as conn:
            for ledger in doomed:
                for eid in range(20):
                    assert conn.call_v2(ENTRIES.add_request(ledger, eid)).rc == v2.EOK
        assert cluster.stop(0) == 0  # its checkpoint puts 1-2 alone in an entry log
        doomed_logs = entry_logs(cluster)
        assert doomed_logs
        bookie.fault_env = crash_env(CrashPoint.GC_CHECKPOINTED, 1)
        cluster.start(0)
        acked = [(3, eid) for eid in range(20)]
        with RawBookieConnection(bookie.port) as conn:
            for ledger, eid in acked:
                assert conn.call_v2(ENTRIES.add_request(ledger, eid)).rc == v2.EOK
        a_request_it_dies_in(lambda: gc_round(cluster))  # the bookie dies before the round's answer
        restart_after_its_own_crash(cluster, 0, crash_words(CrashPoint.GC_CHECKPOINTED))
        assert entry_logs(cluster) >= doomed_logs  # the crash came before their removal
        gc_round(cluster)  # finds nothing more to delete, and removes the logs the last round emptied
        assert not entry_logs(cluster) & doomed_logs
        with RawBookieConnection(bookie.port) as conn:
            for ledger in doomed:
                assert conn.call_v2(v2.encode_read_request(ledger, 0)).rc == v2.ENOLEDGER
            for ledger, eid in acked:
                resp = conn.call_v2(v2.encode_read_request(ledger, eid))
                assert resp.rc == v2.EOK and bytes(resp.entry) == ENTRIES.entry(ledger, eid)
