"""Faults with real Java bookies: a bookie dies mid-write, 4.16 bookies without batch reads, a killed writer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from bkspark.client import BookKeeper
from bkspark.protocol.ledger_metadata import LedgerState

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def payload(i: int, size: int = 200) -> bytes:
    head = f"e{i:07d}:".encode()
    return (head * (size // len(head) + 1))[:size]


@pytest.mark.fault
def test_bookie_killed_mid_write_changes_ensemble(java_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    """E=3/W=3/A=2 on 4 bookies: kill one of the ensemble mid-load; the writer replaces it and goes on."""
    cluster = java_cluster_factory("4.17.3", bookies=4)
    with BookKeeper(cluster.metadata_service_uri, addEntryTimeoutSec=3) as bk:
        lh = bk.create_ledger(3, 3, 2, password=b"pw")
        first = lh.metadata.last_ensemble
        victim = cluster.bookie_ids.index(first[1])
        acked: list[int] = []
        futures = []
        for i in range(600):
            futures.append(lh.append_async(payload(i)))
            if i == 250:
                cluster.kill(victim)
            if i % 50 == 0:
                time.sleep(0.05)
        for i, f in enumerate(futures):
            assert f.result(timeout=60) == i
            acked.append(i)
        # On a loaded machine the other two bookies (ack quorum 2) may acknowledge every add before the writer
        # hears its connection to the dead one close; the next add it sends there fails at once and changes the
        # ensemble.  Keep adding until it has (an event, with a generous bound).
        deadline = time.monotonic() + 120
        while len(lh.metadata.ensembles) < 2 and time.monotonic() < deadline:
            acked.append(lh.append(payload(len(acked))))
            time.sleep(0.05)
        last_entry = acked[-1]
        lh.close()
        md = bk.get_ledger_metadata(lh.ledger_id)
        assert md.state == LedgerState.CLOSED and md.last_entry_id == last_entry
        assert len(md.ensembles) >= 2, md.ensembles
        last = md.last_ensemble
        assert first[1] not in last and len(set(last)) == 3
        rh = bk.open_ledger(lh.ledger_id, password=b"pw")
        got = rh.read(0, last_entry)
        assert [e.payload for e in got] == [payload(i) for i in acked]
        # Every entry of the new segment is on all three bookies of that segment.
        seg = max(md.ensembles)
        bk.conf.reorderReadSequenceEnabled = False
        assert [e.payload for e in rh.read(seg, last_entry)] == [payload(i) for i in range(seg, last_entry + 1)]


def test_batch_reads_fall_back_on_4_16_bookies(java_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = java_cluster_factory("4.16.6", bookies=3)
    with BookKeeper(cluster.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 3, 2)
        for i in range(120):
            lh.append_async(payload(i))
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        first = rh.batch_read(0, 50, 0)  # the bookie hangs up on opcode 7: fall back
        assert [e.payload for e in first] == [payload(i) for i in range(len(first))]
        assert len(first) >= 1
        assert bk.aio.pool.batch_unsupported["v2"]  # remembered per bookie
        everything = list(rh.read_batched(0, 119, batch_size=40))
        assert [e.payload for e in everything] == [payload(i) for i in range(120)]
        # Single reads on fresh connections still work with the same bookies.
        assert rh.read(119, 119)[0].payload == payload(119)


WRITER = textwrap.dedent(
    """
    import sys, time
    from bkspark.client import BookKeeper
    uri, out = sys.argv[1], sys.argv[2]
    bk = BookKeeper(uri)
    lh = bk.create_ledger(3, 3, 2, password=b"pw")
    with open(out, "w") as f:
        f.write(f"{lh.ledger_id}\\n"); f.flush()
        i = 0
        while True:
            lh.append(b"x%06d" % i * 20)
            f.write(f"{i}\\n"); f.flush()
            i += 1
    """
)


def test_killed_bkspark_writer_recovered_by_bkspark(java_cluster_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cluster = java_cluster_factory("4.17.3", bookies=3)
    out = tmp_path / "acked.txt"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.Popen([sys.executable, str(script), cluster.metadata_service_uri, str(out)], env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lines = out.read_text().split() if out.exists() else []
            if len(lines) > 200:
                break
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(10)
    lines = out.read_text().split()
    ledger_id, acked = int(lines[0]), [int(x) for x in lines[1:]]
    with BookKeeper(cluster.metadata_service_uri) as bk:
        assert bk.get_ledger_metadata(ledger_id).state == LedgerState.OPEN
        rh = bk.open_ledger(ledger_id, password=b"pw")
        md = bk.get_ledger_metadata(ledger_id)
        assert md.state == LedgerState.CLOSED
        assert md.last_entry_id >= acked[-1]  # every acknowledged entry survives
        entries = rh.read(0, md.last_entry_id)
        assert [e.payload for e in entries] == [b"x%06d" % i * 20 for i in range(md.last_entry_id + 1)]
        assert md.length == sum(len(e.payload) for e in entries)
        # Recovery is idempotent: a second open sees the same end.
        again = bk.open_ledger(ledger_id, password=b"pw")
        assert again.last_add_confirmed == md.last_entry_id


@pytest.mark.fault
def test_recovery_with_a_dead_bookie_replaces_it(java_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    """An open ledger whose writer is gone and one of whose bookies is dead: recovery still closes it."""
    cluster = java_cluster_factory("4.17.3", bookies=4)
    uri = cluster.metadata_service_uri
    with BookKeeper(uri, readEntryTimeoutSec=3, addEntryTimeoutSec=3) as writer_bk:
        lh = writer_bk.create_ledger(3, 3, 2, password=b"pw")
        for i in range(40):
            lh.append(payload(i))
        ensemble = lh.metadata.last_ensemble
        ledger_id = lh.ledger_id
        cluster.kill(cluster.bookie_ids.index(ensemble[2]))
        # The writer "dies" here: its handle is abandoned without close.
        with BookKeeper(uri, readEntryTimeoutSec=3, addEntryTimeoutSec=3) as bk:
            rh = bk.open_ledger(ledger_id, password=b"pw")
            md = bk.get_ledger_metadata(ledger_id)
            assert md.state == LedgerState.CLOSED and md.last_entry_id == 39
            assert md.length == 40 * 200
            assert [e.payload for e in rh.read(0, 39)] == [payload(i) for i in range(40)]
