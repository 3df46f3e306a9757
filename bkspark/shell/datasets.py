"""Dataset discovery: which datasets a cluster holds and what each one is, from ZooKeeper alone.

A dataset is the committed output of Spark write jobs (docs/connector.md, "Datasets"): its manifest names
ledgers, and each ledger's metadata says how many entries and bytes it holds.  This module reads both (the
manifest through :class:`bkspark.datasource.datasets.DatasetRegistry`, the ledgers' metadata in ZooKeeper multi
reads) and never a bookie, so it needs neither PySpark nor pyarrow and costs a few round trips per 1,000 ledgers.
``bkspark shell listdatasets`` / ``showdataset NAME`` print it (docs/shell.md, "Datasets"); from Python::

    from bkspark.shell.datasets import list_datasets, show_dataset
    for summary in list_datasets("zk+hierarchical://127.0.0.1:2181/ledgers"):
        print(summary.name, summary.ledgers, summary.rows, summary.bytes)

Rows: a ledger written one row per entry holds as many rows as entries, so its rows are known from its metadata;
a ledger of packed rows (``rowsPerEntry``, docs/connector.md "Rows per entry") holds at least one row per entry,
and how many exactly only its entries say.  :attr:`DatasetSummary.rows` is exact when no ledger of the dataset is
packed, and ``None`` otherwise (then :attr:`DatasetSummary.rows_at_least` is the bound that is known).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from bkspark.datasource.datasets import DatasetRegistry, ManifestRoot, Shard
from bkspark.datasource.packing import packed_ledger
from bkspark.errors import MetadataError
from bkspark.protocol.ledger_metadata import LedgerState

__all__ = ["DatasetSummary", "JobSummary", "list_datasets", "show_dataset", "summarize", "summarize_all"]

#: Root re-reads when the manifest changes between reading it and reading its znode's stat (a commit in between).
MAX_SUMMARY_ATTEMPTS = 20


@dataclass(frozen=True)
class JobSummary:
    """A write job of the dataset whose record is still in ZooKeeper (writing, committed but not yet cleaned
    up, or aborting: docs/connector.md, "The commit protocol")."""

    job: str
    state: str
    overwrite: bool
    created_ms: int


@dataclass(frozen=True)
class DatasetSummary:
    """What one dataset holds (see the module docstring for :attr:`rows`)."""

    name: str
    #: Whether any job ever committed (a dataset whose first job is still writing has a root but no commit).
    committed: bool
    ledgers: int
    entries: int
    #: Exact rows, or None when some ledger packs several rows per entry (:attr:`packed_ledgers`).
    rows: int | None
    #: Rows known to be there: one per entry at least.
    rows_at_least: int
    #: Payload bytes of the committed ledgers (their metadata's ``length``).
    bytes: int
    packed_ledgers: int
    #: Ledgers the manifest names whose metadata is gone (every read of the dataset fails on them).
    missing_ledgers: list[tuple[int, int]]
    #: Ledgers the manifest names that are not closed (their entries and bytes are not in the totals).
    unclosed_ledgers: list[tuple[int, int]]
    #: How many commits the manifest has had (0 for a format-1 manifest, which does not count them).
    generation: int
    #: When the manifest last changed (its root znode's mtime, ms since the epoch), None if never committed.
    last_commit_ms: int | None
    #: Write jobs of this dataset with a record in ZooKeeper.
    jobs: list[JobSummary] = field(default_factory=list)
    #: Idempotency keys of other writers (the streaming sink: ``stream-<queryId>`` -> last committed batch).
    writers: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["missing_ledgers"] = [list(p) for p in self.missing_ledgers]
        body["unclosed_ledgers"] = [list(p) for p in self.unclosed_ledgers]
        return body


def _jobs_by_dataset(registry: DatasetRegistry) -> dict[str, list[JobSummary]]:
    jobs: dict[str, list[JobSummary]] = {}
    for job in registry.jobs():
        try:
            record = registry.job(job)
        except MetadataError:
            continue  # unreadable record: `bkspark shell recoverjobs` reports it, a listing must not fail on it
        if record is None:
            continue
        for name in registry.job_datasets(job, record):  # a routed job under every dataset it writes
            jobs.setdefault(name, []).append(
                JobSummary(job=job, state=record.state.value, overwrite=record.overwrite, created_ms=record.created_ms)
            )
    return jobs


def _snapshot_with_mtime(store: Any, registry: DatasetRegistry, name: str) -> tuple[ManifestRoot | None, list[Shard], int | None]:
    """The root, its shards and the root znode's mtime, all of one version of the root."""
    for _ in range(MAX_SUMMARY_ATTEMPTS):
        stat = store.zk.exists(registry.dataset_path(name))
        if stat is None:
            return None, [], None
        root = registry.root(name)
        if root is None:
            continue  # deleted in between: look again
        snap = registry.snapshot(name) if root.committed else None
        if snap is None:
            if root.version == stat.version:
                return root, [], None
            continue
        root, shards = snap
        if root.version == stat.version:
            return root, shards, stat.mtime
    raise MetadataError(f"dataset {name!r}: its manifest kept changing while being summarized")


def summarize(store: Any, name: str, *, jobs: dict[str, list[JobSummary]] | None = None) -> DatasetSummary | None:
    """The summary of dataset ``name`` on a :class:`bkspark.metadata.store.ZkMetadataStore`, None if there is no
    such dataset (neither a manifest nor a job writing it)."""
    registry = DatasetRegistry(store.zk, store.root)
    if jobs is None:
        jobs = _jobs_by_dataset(registry)
    root, shards, mtime = _snapshot_with_mtime(store, registry, name)
    own_jobs = jobs.get(name, [])
    if root is None and not own_jobs:
        return None
    ledgers = [pair for shard in shards for pair in shard.ledgers]
    entries = size = packed = 0
    missing: list[tuple[int, int]] = []
    unclosed: list[tuple[int, int]] = []
    for scope_id, ledger_id, versioned in store.read_many_ledger_metadata(ledgers):
        if versioned is None:
            missing.append((scope_id, ledger_id))
            continue
        md = versioned.metadata
        if md.state != LedgerState.CLOSED:
            unclosed.append((scope_id, ledger_id))
            continue
        entries += md.last_entry_id + 1
        size += md.length
        packed += packed_ledger(md.custom_metadata)
    return DatasetSummary(
        name=name,
        committed=root is not None and root.committed,
        ledgers=len(ledgers),
        entries=entries,
        rows=None if packed else entries,
        rows_at_least=entries,
        bytes=size,
        packed_ledgers=packed,
        missing_ledgers=missing,
        unclosed_ledgers=unclosed,
        generation=root.generation if root is not None else 0,
        last_commit_ms=mtime,
        jobs=own_jobs,
        writers=dict(root.keys) if root is not None else {},
    )


def summarize_all(store: Any) -> list[DatasetSummary]:
    """Every dataset of the cluster (those with a manifest, and those whose first job is still writing), by name."""
    registry = DatasetRegistry(store.zk, store.root)
    jobs = _jobs_by_dataset(registry)
    summaries = []
    for name in sorted(set(registry.datasets()) | set(jobs)):
        summary = summarize(store, name, jobs=jobs)
        if summary is not None:  # removed while listing
            summaries.append(summary)
    return summaries


@contextmanager
def _store(metadata_service_uri: str, zk_timeout: float, client_conf: dict[str, str] | None) -> Iterator[Any]:
    from bkspark.metadata.store import ZkMetadataStore
    from bkspark.security.zk import ZkSecurity

    store = ZkMetadataStore(
        metadata_service_uri, session_timeout=zk_timeout, create_layout=False,
        zk_security=ZkSecurity.from_conf(client_conf or {}),
    )
    try:
        yield store
    finally:
        store.close()


def list_datasets(
    metadata_service_uri: str, *, zk_timeout: float = 10.0, client_conf: dict[str, str] | None = None
) -> list[DatasetSummary]:
    """Every dataset of the cluster at ``metadata_service_uri`` (``zk+hierarchical://...``), by name.

    ``client_conf``: ZooKeeper credentials as in a client configuration (docs/security.md)."""
    with _store(metadata_service_uri, zk_timeout, client_conf) as store:
        return summarize_all(store)


def show_dataset(
    metadata_service_uri: str, name: str, *, zk_timeout: float = 10.0, client_conf: dict[str, str] | None = None
) -> DatasetSummary | None:
    """Dataset ``name`` of the cluster at ``metadata_service_uri``, None if the cluster has no such dataset."""
    from bkspark.datasource.options import check_dataset_name

    check_dataset_name(name, "dataset")
    with _store(metadata_service_uri, zk_timeout, client_conf) as store:
        return summarize(store, name)
