"""Ack-after-sync, proven at the server: a simulated power cut really loses unsynced journal bytes, and every
acknowledged entry, fence and master key survives it -- unless the acknowledgement is moved before the sync,
which the same checker then catches.

How the loss is made real: the bookie runs with the journal writer's test fault point
(bookie_server.journal.JournalFaults): bytes the writer has written but not yet synced stay in memory, standing for
the page cache, and at the N-th group commit -- after the write, before the sync -- the process SIGKILLs itself.
So the records of that batch never reach the file, exactly what a power cut does to unsynced data (a plain kill -9
would keep them in the page cache and prove nothing).

Jepsen's split: writer threads log each operation as invoke then ok / fail / info (no answer: the bookie died) in a
history; after the restart a checker that knows nothing of the workload's code judges the history against what the
bookie returns.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie_server.journal import JournalFaults
from tests.harness.acked_history import (
    History,
    restart_after_its_own_crash,
    run_writers_until_the_crash,
    unanswered_operations_lost,
    violations,
)
from tests.harness.python_bookie import LedgerEntries, PythonBookieCluster

pytestmark = [pytest.mark.integration, pytest.mark.fault]

ENTRIES = LedgerEntries(b"ack-after-sync")
POWER_CUT_AT_BATCH = 60
WRITERS = 4


def run_power_cut(zk_root, tmp_path: Path, ack_before_sync: bool) -> tuple[History, list[str], int]:  # type: ignore[no-untyped-def]
    cluster = PythonBookieCluster(
        zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides={"flushInterval": 600000}
    )
    bookie = cluster.bookies[0]
    bookie.fault_env = {JournalFaults.POWER_CUT_ENV: str(POWER_CUT_AT_BATCH)}
    if ack_before_sync:
        bookie.fault_env[JournalFaults.ACK_BEFORE_SYNC_ENV] = "1"
    with cluster:
        history = run_writers_until_the_crash(bookie.port, ENTRIES, WRITERS)
        restart_after_its_own_crash(cluster, 0, "journal test fault: power cut now")
        return (
            history,
            violations(bookie.port, history, ENTRIES),
            unanswered_operations_lost(bookie.port, history, ENTRIES),
        )


def test_every_acknowledged_write_survives_a_power_cut(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    history, violations, lost_unanswered = run_power_cut(zk_root, tmp_path, ack_before_sync=False)
    acked = len(history.of("add", "ok"))
    print(f"\npower cut, ack after sync: {acked} adds and {len(history.of('fence', 'ok'))} fences acknowledged, "
          f"{lost_unanswered} unanswered operations lost, violations: {violations[:5]}")
    assert acked > 100
    assert history.of("fence", "ok")
    assert lost_unanswered > 0  # the fault point really dropped unsynced records ...
    assert violations == []  # ... and none of them had been acknowledged


def test_checker_catches_acknowledgement_before_sync(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    history, violations, _ = run_power_cut(zk_root, tmp_path, ack_before_sync=True)
    print(f"\npower cut, ack BEFORE sync: {len(violations)} violations, e.g. {violations[:3]}")
    # The batch cut off holds adds, fences or both: whichever it held were acknowledged and are gone.
    assert violations and all(" lost " in v for v in violations)
