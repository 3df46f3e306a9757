"""Datasets: the committed output of Spark write jobs, kept in ZooKeeper.

A write job creates one ledger per task.  Spark's driver never hears about the
ledgers of failed or retried task attempts, so every task registers its
ledger under the job *before* writing to it; the driver's ``commit`` then
knows every ledger the job made, keeps the committed ones and deletes the
rest, and ``abort`` deletes them all.

Layout, under the cluster's ledgers root (Java's ledger iteration only
descends into children named like ledger-id digit groups, so a ``bkspark``
child is invisible to it; see docs/connector.md)::

    <root>/bkspark/datasets/<name>          JSON manifest: committed ledgers (the commit point)
    <root>/bkspark/jobs/<jobId>/<scope>-<ledger>   ledgers a job's tasks created

Every ledger also carries ``bkspark.dataset`` and ``bkspark.job`` in its
custom metadata, which the Java shell's ``ledgermetadata`` shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable

from bkspark.errors import BadMetadataError, MetadataError

__all__ = ["DatasetManifest", "DatasetRegistry", "BKSPARK_NODE"]

BKSPARK_NODE = "bkspark"
_FORMAT_VERSION = 1


@dataclass(frozen=True)
class DatasetManifest:
    """The committed ledgers of one dataset, as ``(scope_id, ledger_id)`` pairs in commit order."""

    name: str
    ledgers: tuple[tuple[int, int], ...]
    version: int = -1  # the znode version, for compare-and-set

    def to_bytes(self) -> bytes:
        body = {"format": _FORMAT_VERSION, "name": self.name, "ledgers": [list(pair) for pair in self.ledgers]}
        return json.dumps(body, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, name: str, data: bytes, version: int) -> "DatasetManifest":
        try:
            body = json.loads(data.decode("utf-8"))
            if body.get("format") != _FORMAT_VERSION:
                raise ValueError(f"unknown manifest format {body.get('format')!r}")
            ledgers = tuple((int(scope), int(ledger)) for scope, ledger in body["ledgers"])
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise BadMetadataError(f"dataset manifest of {name!r} cannot be parsed: {exc}") from None
        return cls(name=name, ledgers=ledgers, version=version)


class DatasetRegistry:
    """Dataset manifests and per-job ledger registrations, on a kazoo client."""

    def __init__(self, zk: "object", ledgers_root: str) -> None:
        self._zk = zk
        base = ledgers_root.rstrip("/") + "/" + BKSPARK_NODE
        self._datasets = base + "/datasets"
        self._jobs = base + "/jobs"

    # -- datasets ---------------------------------------------------------
    def manifest(self, name: str) -> DatasetManifest | None:
        """The committed manifest of ``name``, or None if no job ever committed it."""
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = self._zk.get(f"{self._datasets}/{name}")
        except NoNodeError:
            return None
        return DatasetManifest.from_bytes(name, data, stat.version)

    def watch_manifest(self, name: str, callback: "object") -> None:
        """Call ``callback(event)`` once, when the manifest of ``name`` is created, changed or deleted."""
        self._zk.exists(f"{self._datasets}/{name}", watch=callback)

    def commit(self, name: str, ledgers: Iterable[tuple[int, int]], *, replace: bool) -> tuple[DatasetManifest, list[tuple[int, int]]]:
        """Make ``ledgers`` part of dataset ``name`` atomically (compare-and-set on the manifest).

        With ``replace`` the manifest becomes exactly ``ledgers`` (overwrite);
        otherwise they are appended.  Returns the new manifest and the ledgers
        that left the dataset (for the caller to delete after the commit point).
        """
        from kazoo.exceptions import BadVersionError, NodeExistsError

        new = tuple(ledgers)
        path = f"{self._datasets}/{name}"
        for _ in range(100):
            current = self.manifest(name)
            if current is None:
                manifest = DatasetManifest(name, new)
                try:
                    self._zk.create(path, manifest.to_bytes(), makepath=True)
                except NodeExistsError:
                    continue
                return self.manifest(name) or manifest, []
            if replace:
                kept = new
                dropped = [pair for pair in current.ledgers if pair not in set(new)]
            else:
                kept = current.ledgers + tuple(pair for pair in new if pair not in set(current.ledgers))
                dropped = []
            manifest = DatasetManifest(name, kept)
            try:
                stat = self._zk.set(path, manifest.to_bytes(), version=current.version)
            except BadVersionError:
                continue
            return DatasetManifest(name, kept, stat.version), dropped
        raise MetadataError(f"could not commit dataset {name!r}: too many concurrent commits")

    # -- jobs ---------------------------------------------------------------
    def register(self, job_id: str, scope_id: int, ledger_id: int) -> None:
        """Record that a task of ``job_id`` created this ledger (before it writes any entry)."""
        from kazoo.exceptions import NodeExistsError

        try:
            self._zk.create(f"{self._jobs}/{job_id}/{scope_id}-{ledger_id}", b"", makepath=True)
        except NodeExistsError:
            pass

    def job_ledgers(self, job_id: str) -> list[tuple[int, int]]:
        """Every ledger the tasks of ``job_id`` registered, failed attempts included."""
        from kazoo.exceptions import NoNodeError

        try:
            children = self._zk.get_children(f"{self._jobs}/{job_id}")
        except NoNodeError:
            return []
        pairs = []
        for child in children:
            scope, _, ledger = child.partition("-")
            if scope.isdigit() and ledger.isdigit():
                pairs.append((int(scope), int(ledger)))
        return sorted(pairs)

    def forget_job(self, job_id: str) -> None:
        """Drop the job's registrations once its ledgers are committed or deleted."""
        from kazoo.exceptions import NoNodeError

        try:
            self._zk.delete(f"{self._jobs}/{job_id}", recursive=True)
        except NoNodeError:  # no task of the job created a ledger
            pass
