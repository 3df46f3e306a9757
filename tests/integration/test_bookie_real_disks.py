"""Real disks that fill up (docs/reliability.md, "Real disks"): a bookie's ledger directory on a small tmpfs.

Not a file-size limit (tests/integration/test_bookie_disk_faults.py) but a file system with no room left, as the
kernel reports it: ``statvfs`` shows the usage climb past ``diskUsageThreshold``, writes end in ENOSPC. The bookie
must turn read-only (its registration moves to ``available/readonly``), the writer move its ledger to other
bookies, and every entry stay readable, from the full bookie too. Needs root (``mount -t tmpfs``).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkspark.client import BookKeeper
from tests.campaign.history import History, check
from tests.harness.deadline import GENEROUS
from tests.harness.netns import wait_until
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import ZkRoot

pytestmark = [pytest.mark.integration, pytest.mark.fault]

#: The tmpfs: room for a few checkpoints of the entries below, not for all of them.
TMPFS_BYTES = 3 << 20
ENTRY = 32 << 10


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("a real full disk needs root (mount -t tmpfs); this process is not root")
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_bookie_whose_ledger_disk_fills_up_turns_read_only_and_the_writer_moves_on(
    zk_root: ZkRoot, tmp_path: Path, small_disk: Path
) -> None:
    cluster = PythonBookieCluster(
        zk_root.metadata_service_uri,
        tmp_path / "bookies",
        bookies=4,
        journal_sync_data=False,
        conf_overrides={"diskCheckInterval": 200, "flushInterval": 200, "diskUsageThreshold": 0.9,
                        "diskUsageLwmThreshold": 0.8},
    )
    full = cluster.bookies[0]
    full.values["ledgerDirectories"] = str(small_disk / "ledgers")
    full.write_conf()
    history = History()
    with cluster:
        cluster.start_all()
        with BookKeeper(zk_root.metadata_service_uri, addEntryTimeoutSec=5) as bk:
            lh = bk.create_ledger(3, 3, 2)  # every entry goes to the small disk while it takes them
            while full.bookie_id not in lh.metadata.last_ensemble:  # placement is random: until it is in
                lh.close()
                lh = bk.create_ledger(3, 3, 2)
            lid = lh.ledger_id
            acked = 0
            for i in range(400):
                payload = b"%06d" % i + os.urandom(ENTRY)
                history.log(f"add-{i}", "invoke", "add", lid, (lid, payload))
                try:
                    entry = lh.append(payload)
                except Exception:  # noqa: BLE001 - outcome unknown
                    history.log(f"add-{i}", "info", "add", lid)
                    break
                history.log(f"add-{i}", "ok", "add", lid, entry)
                acked += 1
                if full.bookie_id not in lh.metadata.last_ensemble:
                    break
            # The full bookie went read-only and the writer replaced it; writes go on without it.
            wait_until(lambda: full.bookie_id in cluster.registered(readonly=True), GENEROUS,
                       f"the full bookie to register read-only\n{full.log_tail(20)}")
            assert full.bookie_id not in lh.metadata.last_ensemble, lh.metadata.ensembles
            for i in range(400, 420):
                payload = b"%06d" % i + os.urandom(ENTRY)
                history.log(f"add-{i}", "invoke", "add", lid, (lid, payload))
                history.log(f"add-{i}", "ok", "add", lid, lh.append(payload))
            lh.close()
            md = bk.get_ledger_metadata(lid)
            assert len(md.ensembles) >= 2 and full.bookie_id in md.ensembles[0]
        assert full.is_alive  # a full disk stops nothing
        # Reads go on: every entry, those whose only other replica sits on the full bookie included.
        with BookKeeper(zk_root.metadata_service_uri) as bk:
            rh = bk.open_ledger(lid)
            entries = {e.entry_id: bytes(e.payload) for e in rh.read(0, rh.last_add_confirmed)}
        history.log("reader", "ok", "read", lid, {"entries": entries, "last": rh.last_add_confirmed, "after_close": True})
        assert check(history) == []
        assert acked >= 1 and len(entries) == rh.last_add_confirmed + 1
