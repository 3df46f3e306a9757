"""Class-data sharing (AppCDS) archives that make repeated BookKeeper JVM starts cheaper.

The first JVM of a kind (e.g. the 4.17.3 bookie) runs with `-XX:ArchiveClassesAtExit`; once it has exited cleanly
the archive is kept under `.cache/bookkeeper/<version>/cds/`, and later JVMs of that kind start with
`-XX:SharedArchiveFile` (about half the CPU time of a cold start). The archive name hashes the Java runtime and
every classpath jar (path, size, mtime), so a new `make jars` or a new JDK makes a new one. The JVM checks the
archive itself and silently ignores one that does not fit (`-Xshare:auto`). BKSPARK_CDS=0 turns all this off.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["CdsArchive", "CdsUse", "cds_enabled"]

_STALE_LOCK_SECONDS = 600.0
_tmp_counter = itertools.count()


def cds_enabled() -> bool:
    """False when BKSPARK_CDS is set to 0/false/no/off."""
    return os.environ.get("BKSPARK_CDS", "1").strip().lower() not in ("0", "false", "no", "off")


class CdsUse:
    """What one JVM launch does with the archive: its JVM options, and `finish()` to call after it exited."""

    def __init__(self, jvm_args: list[str], archive: "CdsArchive | None" = None, tmp: Path | None = None) -> None:
        self.jvm_args = jvm_args
        self._archive = archive
        self._tmp = tmp

    @property
    def dumping(self) -> bool:
        """True when this JVM writes the archive at exit (give it time to stop)."""
        return self._tmp is not None

    def finish(self, clean_exit: bool) -> None:
        """Publish the archive this JVM wrote (when it exited cleanly) and release the dump lock."""
        if self._archive is None or self._tmp is None:
            return
        tmp, self._tmp = self._tmp, None
        try:
            if clean_exit and tmp.is_file() and tmp.stat().st_size > 0:
                self._archive.publish(tmp)
        finally:
            tmp.unlink(missing_ok=True)
            self._archive.release()


class CdsArchive:
    """The AppCDS archive of one kind of JVM (a main class on a jar-only classpath)."""

    def __init__(self, directory: Path, kind: str, java: str, classpath: Sequence[str]) -> None:
        self.directory = Path(directory)
        self.kind = kind
        digest = hashlib.sha256()
        for item in (java, *classpath):
            digest.update(item.encode())
            try:
                st = os.stat(os.path.realpath(item))
                digest.update(f":{st.st_size}:{st.st_mtime_ns}".encode())
            except OSError:
                digest.update(b":missing")
            digest.update(b"\0")
        self.path = self.directory / f"{kind}-{digest.hexdigest()[:16]}.jsa"
        self.lock_path = self.path.with_suffix(".lock")

    def acquire(self) -> CdsUse:
        """JVM options for the next launch: use the archive, or dump it (one dumper at a time), or nothing."""
        if not cds_enabled():
            return CdsUse([])
        if self.path.is_file():
            return CdsUse([f"-XX:SharedArchiveFile={self.path}", "-Xshare:auto"])
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self._lock():
            return CdsUse([])
        tmp = self.path.with_name(f"{self.path.stem}.{os.getpid()}.{next(_tmp_counter)}.tmp")
        return CdsUse([f"-XX:ArchiveClassesAtExit={tmp}"], self, tmp)

    def _lock(self) -> bool:
        for _ in range(2):
            try:
                fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    if time.time() - self.lock_path.stat().st_mtime > _STALE_LOCK_SECONDS:
                        self.lock_path.unlink(missing_ok=True)
                        continue
                except OSError:
                    continue
                return False
            os.close(fd)
            return True
        return False

    def publish(self, tmp: Path) -> None:
        """Move a freshly written archive into place and drop older archives of this kind."""
        os.replace(tmp, self.path)
        for old in self.directory.glob(f"{self.kind}-*.jsa"):
            if old != self.path:
                old.unlink(missing_ok=True)

    def release(self) -> None:
        """Drop the dump lock."""
        self.lock_path.unlink(missing_ok=True)
