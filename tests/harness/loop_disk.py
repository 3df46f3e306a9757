"""A real disk for one test: a file system on a loop device, whose faults the kernel makes (docs/reliability.md,
"Real disks"). Root only (losetup, mount, the blkio cgroup).

* **Slow writes** (:meth:`LoopDisk.throttle_writes`): cgroup v1's block throttle on the loop device, set in the
  root ``blkio`` group (``blkio.throttle.write_iops_device``, ``write_bps_device``). Every process here is in that group and the loop
  device is this disk's alone, so every write to it, a journal's ``fdatasync`` included, waits for the kernel's
  budget: at 2 writes a second one ``fdatasync`` of a 500-byte append on ext4 took 2.6 s on this project's build
  machine (0.4 ms unthrottled), the journal commit and the data block each waiting their turn.
* **A full disk** (:meth:`LoopDisk.fill`): a file that takes every free block, so the next write that needs a new
  block fails with the kernel's ENOSPC (ext4 made with no blocks reserved for root, so a bookie run as root gets
  the error too); :meth:`LoopDisk.unfill` gives the room back.
* **A power cut** (:meth:`LoopDisk.power_cut_image`): a copy of the backing file holds what reached the device and
  nothing that was only written to the page cache above it; mounted (``existing=True``), ext4 replays its own
  journal as after a reboot.

:func:`unavailable_reason` says in one line why such a disk cannot be made here, for ``pytest.skip``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["BLKIO_ROOT", "LoopDisk", "unavailable_reason"]

#: The root group of cgroup v1's blkio controller (this machine's and CI's kernel mount it there).
BLKIO_ROOT = Path("/sys/fs/cgroup/blkio")
_WRITE_IOPS = BLKIO_ROOT / "blkio.throttle.write_iops_device"
_WRITE_BPS = BLKIO_ROOT / "blkio.throttle.write_bps_device"
_FILLER = ".filler"


def unavailable_reason(fs_type: str = "ext4") -> str | None:
    """Why a loop-device disk (with ``fs_type``) cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return f"a real disk needs root (losetup, mount -t {fs_type}); this process is not root"
    for tool in ("losetup", f"mkfs.{fs_type}"):
        if shutil.which(tool) is None:
            return f"a real disk needs `{tool}` (make setup installs it)"
    return None


def throttle_unavailable_reason() -> str | None:
    """Why writes to a device cannot be slowed here (no cgroup v1 blkio throttle), or None."""
    if not _WRITE_IOPS.exists():
        return f"slow writes need cgroup v1's blkio throttle ({_WRITE_IOPS} is missing)"
    return None


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120).stdout.strip()


class LoopDisk:
    """A ``size``-byte sparse file, a loop device over it, a file system on that, mounted at ``mount_point``.

    A context manager; :meth:`close` lifts the throttle, unmounts and detaches the device, whatever happened.
    """

    def __init__(
        self, image: Path, mount_point: Path, size: int = 64 << 20, fs_type: str = "ext4", existing: bool = False
    ) -> None:
        """``existing``: mount the file system already in ``image`` (a copy of another disk) instead of a new one."""
        self.image = Path(image)
        self.mount_point = Path(mount_point)
        self.device = ""
        self._throttled = False
        if not existing:
            with open(self.image, "wb") as f:
                f.truncate(size)
        self.device = _run("losetup", "--find", "--show", str(self.image))
        try:
            mkfs = {"ext4": ["-q", "-F", "-m", "0"], "btrfs": ["-q", "-f", "-m", "single", "-d", "single"]}[fs_type]
            if not existing:
                _run(f"mkfs.{fs_type}", *mkfs, self.device)
            self.mount_point.mkdir(parents=True, exist_ok=True)
            _run("mount", self.device, str(self.mount_point))
        except BaseException:
            self.close()
            raise
        rdev = os.stat(self.device).st_rdev
        #: ``major:minor`` of the loop device, as the blkio files name it.
        self.numbers = f"{os.major(rdev)}:{os.minor(rdev)}"

    def throttle_writes(self, iops: int = 0, bps: int = 0) -> None:
        """From now on the kernel lets at most ``iops`` writes and ``bps`` bytes a second reach the device (0: no
        limit of that kind; both 0 lift the throttle)."""
        _WRITE_IOPS.write_text(f"{self.numbers} {int(iops)}\n")
        _WRITE_BPS.write_text(f"{self.numbers} {int(bps)}\n")
        self._throttled = iops > 0 or bps > 0

    def power_cut_image(self, copy: Path) -> Path:
        """Copy the device's backing file as it is now: what reached the "disk" (a write still in the page cache
        above the device, or held by the throttle, is not in it), as a power cut would leave it."""
        shutil.copyfile(self.image, copy)
        return copy

    def fill(self) -> None:
        """Take every free block of the file system (a file of all the room left)."""
        filler = self.mount_point / _FILLER
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            chunk = 64 << 20
            while chunk >= 4096:  # the free count moves as the file system's own metadata grows: halve until full
                try:
                    os.posix_fallocate(fd, os.fstat(fd).st_size, chunk)
                except OSError:
                    chunk //= 2
            os.fsync(fd)
        finally:
            os.close(fd)

    def unfill(self) -> None:
        """Give back the room :meth:`fill` took."""
        (self.mount_point / _FILLER).unlink(missing_ok=True)

    def close(self) -> None:
        if self._throttled:
            self.throttle_writes(0)
        if self.device:
            subprocess.run(["umount", "-l", str(self.mount_point)], check=False, capture_output=True)
            subprocess.run(["losetup", "-d", self.device], check=False, capture_output=True)
            self.device = ""

    def __enter__(self) -> "LoopDisk":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
