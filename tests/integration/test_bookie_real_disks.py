"""Real disks that fill up or fail (docs/reliability.md, "Real disks"). Needs root (mount, losetup).

* A bookie's ledger directory on a small tmpfs: not a file-size limit (tests/integration/test_bookie_disk_faults.py)
  but a file system with no room left, as the kernel reports it (ENOSPC, ``statvfs``). The bookie must turn
  read-only (its registration moves to ``available/readonly``), the writer move its ledger to other bookies, and
  every entry stay readable.
* A bookie's journal directory on a small tmpfs: the journal's write fails with ENOSPC, the bookie says so in its
  log, refuses every later add (EREADONLY: it turned read-only), the writer moves to other bookies, and every
  acknowledged entry stays readable.
* A bookie's ledger directory on btrfs on a loop device, one data block of its entry log then overwritten on the
  device: btrfs' data checksum fails and the kernel answers the bookie's read with EIO (the device-mapper ``error``
  and ``flakey`` targets do the same where the kernel has device-mapper; this one does not). The bookie answers
  EIO, the client reads the entry from the other replica.
* A bookie's journal on ext4 on a loop device whose writes the kernel throttles (cgroup v1's blkio throttle; no
  device-mapper ``delay`` here): a slow fsync. Adds that need the bookie wait for it, nothing is acknowledged
  before its sync (a copy of the device taken right after an acknowledgement holds it), a writer with a short
  ``addEntryTimeoutSec`` moves to other bookies.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bkspark.client import BookKeeper
from bkspark.protocol import v2
from bookie_server.journal import JournalFaults
from tests.campaign.history import History, check
from tests.harness import loop_disk
from tests.harness.deadline import GENEROUS
from tests.harness.loop_disk import LoopDisk
from tests.harness.netns import wait_until
from tests.harness.python_bookie import (
    LedgerEntries,
    PythonBookieCluster,
    RawBookieConnection,
    histogram_count_above,
)
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


def _four_bookies_one_on(
    zk_root: ZkRoot, tmp_path: Path, key: str, directory: Path, conf: dict[str, Any], journal_sync_data: bool = True
) -> tuple[PythonBookieCluster, Any]:
    """Four Python bookies (not started); the first one's ``key`` directories set to ``directory`` (the small disk)."""
    cluster = PythonBookieCluster(
        zk_root.metadata_service_uri, tmp_path / "bookies", bookies=4, journal_sync_data=journal_sync_data,
        conf_overrides=conf,
    )
    full = cluster.bookies[0]
    full.values[key] = str(directory)
    full.write_conf()
    return cluster, full


def _ledger_on(bk: BookKeeper, bookie_id: str) -> Any:
    """A ledger (E=3, Qw=3, Qa=2) whose ensemble holds ``bookie_id``: every entry goes to it while it takes them
    (placement is random: ledgers are made until one has it)."""
    lh = bk.create_ledger(3, 3, 2)
    while bookie_id not in lh.metadata.last_ensemble:
        lh.close()
        lh = bk.create_ledger(3, 3, 2)
    return lh


def _append_until_replaced(lh: Any, bookie_id: str, history: History, count: int = 400) -> int:
    """Append ``ENTRY``-sized entries until ``bookie_id`` leaves the ensemble (or an add fails, its outcome
    unknown); each add logged in ``history``. The number acknowledged."""
    lid = lh.ledger_id
    acked = 0
    for i in range(count):
        payload = b"%06d" % i + os.urandom(ENTRY)
        history.log(f"add-{i}", "invoke", "add", lid, (lid, payload))
        try:
            entry = lh.append(payload)
        except Exception:  # noqa: BLE001 - outcome unknown
            history.log(f"add-{i}", "info", "add", lid)
            break
        history.log(f"add-{i}", "ok", "add", lid, entry)
        acked += 1
        if bookie_id not in lh.metadata.last_ensemble:
            break
    return acked


def _writes_go_on_without(cluster: PythonBookieCluster, full: Any, bk: BookKeeper, lh: Any, history: History) -> Any:
    """The full bookie registers read-only, the writer has replaced it, more entries are acknowledged without it;
    the closed ledger's metadata (its first ensemble held the full bookie)."""
    wait_until(lambda: full.bookie_id in cluster.registered(readonly=True), GENEROUS,
               f"the full bookie to register read-only\n{full.log_tail(20)}")
    assert full.bookie_id not in lh.metadata.last_ensemble, lh.metadata.ensembles
    _append_more(lh, history)
    lh.close()
    md = bk.get_ledger_metadata(lh.ledger_id)
    assert len(md.ensembles) >= 2 and full.bookie_id in md.ensembles[0]
    return md


def _append_more(lh: Any, history: History, first: int = 400, count: int = 20) -> None:
    """Entries ``first`` .. ``first + count - 1``, each acknowledged (the ensemble left has room for them)."""
    lid = lh.ledger_id
    for i in range(first, first + count):
        payload = b"%06d" % i + os.urandom(ENTRY)
        history.log(f"add-{i}", "invoke", "add", lid, (lid, payload))
        history.log(f"add-{i}", "ok", "add", lid, lh.append(payload))


def _read_back(uri: str, lid: int, history: History) -> tuple[dict[int, bytes], int]:
    """Every entry of the closed ledger, read by a new client and logged as the history's final read."""
    with BookKeeper(uri) as bk:
        rh = bk.open_ledger(lid)
        entries = {e.entry_id: bytes(e.payload) for e in rh.read(0, rh.last_add_confirmed)}
    history.log("reader", "ok", "read", lid, {"entries": entries, "last": rh.last_add_confirmed, "after_close": True})
    return entries, rh.last_add_confirmed


def test_a_bookie_whose_ledger_disk_fills_up_turns_read_only_and_the_writer_moves_on(
    zk_root: ZkRoot, tmp_path: Path, small_disk: Path
) -> None:
    cluster, full = _four_bookies_one_on(
        zk_root, tmp_path, "ledgerDirectories", small_disk / "ledgers",
        {"diskCheckInterval": 200, "flushInterval": 200, "diskUsageThreshold": 0.9, "diskUsageLwmThreshold": 0.8},
        journal_sync_data=False,
    )
    history = History()
    with cluster:
        cluster.start_all()
        with BookKeeper(zk_root.metadata_service_uri, addEntryTimeoutSec=5) as bk:
            lh = _ledger_on(bk, full.bookie_id)  # every entry goes to the small disk while it takes them
            lid = lh.ledger_id
            acked = _append_until_replaced(lh, full.bookie_id, history)
            # The full bookie went read-only and the writer replaced it; writes go on without it.
            md = _writes_go_on_without(cluster, full, bk, lh, history)
        assert full.is_alive  # a full disk stops nothing
        # Reads go on: every entry, those whose only other replica sits on the full bookie included.
        entries, last = _read_back(zk_root.metadata_service_uri, lid, history)
        assert check(history) == []
        assert acked >= 1 and len(entries) == last + 1


def test_a_bookie_whose_journal_disk_fills_up_refuses_adds_turns_read_only_and_the_writer_moves_on(
    zk_root: ZkRoot, tmp_path: Path, small_disk: Path
) -> None:
    # No checkpoint during the test: the journal is never trimmed, so its files fill the small disk.
    cluster, full = _four_bookies_one_on(
        zk_root, tmp_path, "journalDirectories", small_disk / "journal", {"flushInterval": 600000, "diskCheckInterval": 200}
    )
    history = History()
    with cluster:
        cluster.start_all()
        with BookKeeper(zk_root.metadata_service_uri, addEntryTimeoutSec=5) as bk:
            lh = _ledger_on(bk, full.bookie_id)  # every entry goes to the small journal while it takes them
            lid = lh.ledger_id
            _append_until_replaced(lh, full.bookie_id, history)  # up to 13 MiB: four times the disk
            # The bookie names the cause, turns read-only and the writer replaced it; writes go on without it.
            wait_until(lambda: "journal write failed" in full.log_tail(200), GENEROUS,
                       f"the full bookie to log its failed journal write\n{full.log_tail(20)}")
            assert "No space left on device" in full.log_tail(200)
            md = _writes_go_on_without(cluster, full, bk, lh, history)
            acked = sum(1 for op in history.ops if op.f == "add" and op.type == "ok")
            print(f"\njournal disk full: {acked} adds acknowledged, ensembles {md.ensembles}")
        # Any further add gets a clear refusal, not a hang and not an acknowledgement it cannot keep.
        entries_of = LedgerEntries(b"journal-full")
        with RawBookieConnection(full.port) as conn:
            assert conn.call_v2(entries_of.add_request(lid + 1000, 0)).rc == v2.EREADONLY
        assert full.is_alive  # a full journal stops nothing
        # Reads go on: every acknowledged entry, those whose other replica sits on the full bookie included.
        entries, last = _read_back(zk_root.metadata_service_uri, lid, history)
        assert check(history) == []
        assert len(entries) == last + 1 >= 20


@pytest.fixture
def btrfs_disk(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A 128 MiB btrfs on a loop device over a sparse file (data checksums on): ``(mount point, backing file)``."""
    reason = loop_disk.unavailable_reason("btrfs")
    if reason:
        pytest.skip(reason)
    with LoopDisk(tmp_path / "disk.img", tmp_path / "btrfs", size=128 << 20, fs_type="btrfs") as disk:
        yield disk.mount_point, disk.image


def _corrupt_on_the_device(image: Path, needle: bytes) -> int:
    """Flip one byte of the first copy of ``needle`` in the device's backing file; its offset."""
    with open(image, "r+b") as f:
        data = f.read()
        at = data.find(needle)
        assert at >= 0, "the entry is not on the device yet"
        f.seek(at + len(needle) // 2)
        f.write(bytes([data[at + len(needle) // 2] ^ 0xFF]))
        f.flush()
        os.fsync(f.fileno())
    return at


def test_a_read_the_kernel_fails_with_eio_is_healed_from_the_other_replica(
    zk_root: ZkRoot, tmp_path: Path, btrfs_disk: tuple[Path, Path]
) -> None:
    mount_point, image = btrfs_disk
    cluster = PythonBookieCluster(
        zk_root.metadata_service_uri, tmp_path / "bookies", bookies=3, journal_sync_data=False,
        conf_overrides={"flushInterval": 200},
    )
    broken = cluster.bookies[0]
    broken.values["ledgerDirectories"] = str(mount_point / "ledgers")
    broken.write_conf()
    history = History()
    payloads = [b"entry-%03d:" % i + os.urandom(4096) for i in range(20)]
    with cluster:
        cluster.start_all()
        with BookKeeper(zk_root.metadata_service_uri) as bk:
            lh = bk.create_ledger(3, 2, 2)
            while broken.bookie_id not in lh.metadata.last_ensemble:
                lh.close()
                lh = bk.create_ledger(3, 2, 2)
            lid = lh.ledger_id
            for i, payload in enumerate(payloads):
                history.log(f"add-{i}", "invoke", "add", lid, (lid, payload))
                history.log(f"add-{i}", "ok", "add", lid, lh.append(payload))
            lh.close()
            ensemble = list(lh.metadata.last_ensemble)
        index = ensemble.index(broken.bookie_id)
        # An entry the broken bookie holds (its write set: entries e with e % 3 in {index, index - 1}).
        victim = next(e for e in range(20) if index in (e % 3, (e + 1) % 3))
        # Wait for a checkpoint to move it from the write cache into the entry log, then onto the device.
        wait_until(lambda: broken.entry_log_bytes() > 20_000, GENEROUS, "a checkpoint of the broken bookie")
        subprocess.run(["sync", "-f", str(mount_point)], check=True)
        time.sleep(0.5)
        subprocess.run(["sync", "-f", str(mount_point)], check=True)
        _corrupt_on_the_device(image, payloads[victim][:1024])
        for log_file in broken.entry_logs():  # forget the file's pages: the next read goes to the device
            fd = os.open(log_file, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        with RawBookieConnection(broken.port) as conn:
            assert conn.call_v2(v2.encode_read_request(lid, victim)).rc == v2.EIO  # the kernel's EIO, passed on
        assert broken.is_alive
        # The operator sees which entry and which directory failed (the client only gets EIO).
        wait_until(lambda: "entry log read of ledger %d entry %d" % (lid, victim) in broken.log_tail(200), GENEROUS,
                   "the broken bookie to log the failed read")
        entries, last = _read_back(zk_root.metadata_service_uri, lid, history)
        assert entries[victim] == payloads[victim] and check(history) == []


# -- a slow fsync, made by the kernel ----------------------------------------------------------------------------------

#: The writer's per-request timeout while the slow bookie is to be waited for (far longer than any throttled sync).
PATIENT_ADD_TIMEOUT_S = 120
#: The writer's per-request timeout when it is to give up on the slow bookie (docs/client.md, ``addEntryTimeoutSec``).
IMPATIENT_ADD_TIMEOUT_S = 2
#: The throttled journal disk's budget that makes every sync of a ``ENTRY``-byte record outlast
#: ``IMPATIENT_ADD_TIMEOUT_S``: 32 KiB of data and the file system's journal blocks at 8 KiB a second.
OUTLASTING_BPS = 8 << 10
SLOW_MS = 1000.0


@pytest.fixture
def journal_disk(tmp_path: Path) -> Iterator[LoopDisk]:
    """An ext4 on a loop device of its own, for one bookie's journal."""
    reason = loop_disk.unavailable_reason() or loop_disk.throttle_unavailable_reason()
    if reason:
        pytest.skip(reason)
    with LoopDisk(tmp_path / "journal.img", tmp_path / "journal-disk") as disk:
        yield disk


def _ledger_needing(bk: BookKeeper, bookie_id: str) -> Any:
    """A ledger (E=3, Qw=3, Qa=3) with ``bookie_id`` in its ensemble: no add is acknowledged without it."""
    lh = bk.create_ledger(3, 3, 3)
    while bookie_id not in lh.metadata.last_ensemble:
        lh.close()
        lh = bk.create_ledger(3, 3, 3)
    return lh


def _journal_bytes(mount_point: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted((mount_point / "journal" / "current").glob("*.txn")))


def _sync_latency(cluster: PythonBookieCluster, i: int) -> tuple[float, float]:
    """Bookie ``i``'s journal syncs so far: (count, total milliseconds), from its ``/metrics``."""
    return (cluster.metric(i, "bookie_journal_JOURNAL_SYNC_count") or 0.0,
            cluster.metric(i, "bookie_journal_JOURNAL_SYNC_sum") or 0.0)


@pytest.mark.parametrize("ack_before_sync", [False, True], ids=["ack-after-sync", "ack-before-sync-bug"])
def test_a_slow_journal_fsync_slows_adds_acknowledges_nothing_before_its_sync_and_loses_nothing(
    zk_root: ZkRoot, tmp_path: Path, journal_disk: LoopDisk, ack_before_sync: bool
) -> None:
    """The kernel lets one write a second reach the slow bookie's journal disk. Adds that need it wait for its
    syncs (its JOURNAL_SYNC and ADD_ENTRY latencies say so) and go on; a copy of the disk taken right after an
    acknowledgement (a power cut) holds every entry acknowledged so far. The ``ack-before-sync-bug`` case swaps the
    journal's ack and sync (its test-only fault point) and shows the copy then misses acknowledged entries: the
    check can fail."""
    cluster = PythonBookieCluster(
        zk_root.metadata_service_uri, tmp_path / "bookies", bookies=3, journal_sync_data=True,
    )
    slow = cluster.bookies[0]
    slow.values["journalDirectories"] = str(journal_disk.mount_point / "journal")
    slow.write_conf()
    if ack_before_sync:
        slow.fault_env = {JournalFaults.ACK_BEFORE_SYNC_ENV: "1"}
    history = History()
    with cluster:
        with BookKeeper(zk_root.metadata_service_uri, addEntryTimeoutSec=PATIENT_ADD_TIMEOUT_S) as bk:
            lh = _ledger_needing(bk, slow.bookie_id)
            lid = lh.ledger_id
            payloads = [b"slow-sync-%04d:" % i + os.urandom(512) for i in range(48)]

            def add(i: int) -> Any:
                history.log(f"add-{i}", "invoke", "add", lid, (lid, payloads[i]))
                return lh.append_async(payloads[i])

            for i in range(16):  # unthrottled, for the figures
                history.log(f"add-{i}", "ok", "add", lid, add(i).result(timeout=GENEROUS))
            fast_syncs = _sync_latency(cluster, 0)
            journal_disk.throttle_writes(iops=1)
            futures = {i: add(i) for i in range(16, 48)}
            futures[31].result(timeout=GENEROUS)
            # A power cut now: what reached the disk, against every add acknowledged before it.
            acked = [i for i in range(48) if i < 16 or (futures[i].done() and futures[i].exception() is None)]
            image = journal_disk.power_cut_image(tmp_path / "after-the-cut.img")
            for i, future in futures.items():
                history.log(f"add-{i}", "ok", "add", lid, future.result(timeout=GENEROUS))
            slow_syncs = _sync_latency(cluster, 0)
            metrics = cluster.http_get(0, "/metrics")
            journal_disk.throttle_writes(0)
            lh.close()
        with LoopDisk(image, tmp_path / "after-the-cut", existing=True) as after:
            on_disk = _journal_bytes(after.mount_point)
        missing = [i for i in acked if payloads[i] not in on_disk]
        if ack_before_sync:
            assert missing, "the swapped ack and sync went unseen: the check cannot fail"
            return
        assert missing == [], f"acknowledged before their sync: entries {missing}"
        # The bookie's own latencies show the slow syncs and the adds that waited for them.
        assert histogram_count_above(metrics, "bookie_journal_JOURNAL_SYNC", SLOW_MS) >= 1
        assert histogram_count_above(metrics, "bookkeeper_server_ADD_ENTRY_REQUEST", SLOW_MS, success="true") >= 1
        fast_ms = fast_syncs[1] / fast_syncs[0]
        slow_ms = (slow_syncs[1] - fast_syncs[1]) / (slow_syncs[0] - fast_syncs[0])
        print(f"\njournal sync (write + fdatasync), mean: {fast_ms:.1f} ms unthrottled, {slow_ms:.0f} ms at one write "
              f"a second; {len(acked)} entries acknowledged before the cut, all on the disk")
        entries, last = _read_back(zk_root.metadata_service_uri, lid, history)
        assert check(history) == [] and len(entries) == last + 1 == 48


def test_a_writer_moves_to_other_bookies_when_a_journal_sync_outlasts_add_entry_timeout(
    zk_root: ZkRoot, tmp_path: Path, journal_disk: LoopDisk
) -> None:
    """The slow bookie's journal disk takes 8 KiB a second: each sync of a 32 KiB entry outlasts the writer's
    ``addEntryTimeoutSec``. The writer gives up on it, changes ensemble and goes on; every acknowledged entry reads
    back, and the slow bookie, alive all along, acknowledges nothing it did not sync."""
    cluster, slow = _four_bookies_one_on(zk_root, tmp_path, "journalDirectories", journal_disk.mount_point / "journal", {})
    history = History()
    with cluster:
        cluster.start_all()
        with BookKeeper(zk_root.metadata_service_uri, addEntryTimeoutSec=IMPATIENT_ADD_TIMEOUT_S) as bk:
            lh = _ledger_needing(bk, slow.bookie_id)
            lid = lh.ledger_id
            _append_more(lh, history, first=1000, count=5)  # unthrottled
            journal_disk.throttle_writes(bps=OUTLASTING_BPS)
            _append_until_replaced(lh, slow.bookie_id, history, count=40)
            assert slow.bookie_id not in lh.metadata.last_ensemble, lh.metadata.ensembles
            _append_more(lh, history)  # without it
            journal_disk.throttle_writes(0)
            lh.close()
            md = bk.get_ledger_metadata(lid)
        assert slow.is_alive and len(md.ensembles) >= 2 and slow.bookie_id in md.ensembles[0]
        # The bookie's own sync latency shows the slow sync the writer gave up on (it ended when the throttle lifted).
        # The sync is recorded when it returns, after the throttle lifted: wait for it (an event, a generous bound).
        deadline = time.monotonic() + 60
        while histogram_count_above(cluster.http_get(0, "/metrics"), "bookie_journal_JOURNAL_SYNC", SLOW_MS) < 1:
            assert time.monotonic() < deadline, "the bookie recorded no journal sync slower than the bound"
            time.sleep(0.2)
        entries, last = _read_back(zk_root.metadata_service_uri, lid, history)
        assert check(history) == [] and len(entries) == last + 1
        print(f"\nslow sync past addEntryTimeoutSec: ensembles {md.ensembles}")
