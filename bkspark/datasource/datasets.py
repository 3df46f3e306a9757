"""Datasets: the committed output of Spark write jobs, kept in ZooKeeper as a sharded manifest.

The manifest of a dataset is a small **root** znode that names immutable **shards** (each a list of at most
``SHARD_MAX_LEDGERS`` ledgers).  Publishing is one ZooKeeper ``multi``: the new root (compare-and-set on its
version) and the publishing job's record (compare-and-set, state ``committed``), plus any znode the publisher
must create atomically with the commit (the Spark writer's job parent ledger).  That ``multi`` is the commit
point: readers see the old root or the new one, never a mixture.  The protocol around it (who writes what,
what a crash leaves, who removes it) is the state machine of docs/connector.md.

Layout, under the cluster's ledgers root (Java's ledger iteration only descends into children named like
ledger-id digit groups, so a ``bkspark`` child is invisible to it)::

    <root>/bkspark/datasets/<name>                    root: JSON (format 2), or the old single-znode manifest (format 1)
    <root>/bkspark/datasets/<name>/shards/<shard>     immutable shard: JSON list of (scope, ledger) and their parents
    <root>/bkspark/jobs/<job>                         job record (JSON: state, dataset, mode) while the job is live
    <root>/bkspark/jobs/<job>/<scope>-<ledger>        ledgers the job's tasks created, registered before writing

A shard is named ``<job>.<random>.<n>`` by the job that wrote it.  A shard is deleted only when no root names
it (neither as a live shard nor as ``retired``, the shards an overwrite replaced whose ledgers still await
deletion) and its job's record is gone (:meth:`DatasetRegistry.sweep_shards`): a job still able to publish
keeps its record, and its ``multi`` checks that record's version, so a shard it may still publish is never
swept.  A reader that finds a shard gone re-reads the root (a newer root replaced it).

A second kind of committer (the streaming sink) uses the same API: it creates a job record per micro-batch
(:meth:`DatasetRegistry.begin_job`), registers its ledgers, and publishes with a :class:`CommitKey`
``(writer, token)``, e.g. ``("stream-<queryId>", batchId)``; the root keeps the highest token per writer in
the same ``multi``, so a replayed batch publishes once.  See docs/connector.md, "Publishing from another writer".
"""

from __future__ import annotations

import enum
import json
import re
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Sequence, TypeVar

from bkspark.errors import BadMetadataError, InvalidOptionError, MetadataError, NoSuchLedgerMetadataError
from bkspark.metadata.znodes import Outcome, Znodes
from bkspark.protocol import zk_paths
from bkspark.retry import METADATA_CAS_RETRY

__all__ = [
    "BKSPARK_NODE",
    "SHARD_MAX_LEDGERS",
    "JOB_ID",
    "CommitKey",
    "DatasetManifest",
    "DatasetRegistry",
    "JobGoneError",
    "JobRecord",
    "JobState",
    "ManifestRoot",
    "PublishResult",
    "PublishTarget",
    "ShardRef",
]

BKSPARK_NODE = zk_paths.BKSPARK
#: The old manifest: one znode holding every ledger (read, and migrated by the next commit).
FORMAT_SINGLE = 1
#: The sharded manifest: a root naming immutable shards.
FORMAT_SHARDED = 2
#: Ledgers per shard: 10,000 pairs of 63-bit ids are under 250 kB of JSON, well inside ZooKeeper's 1 MB.
SHARD_MAX_LEDGERS = 10_000
#: A job id: it names the job's record znode and prefixes its shards' names (``<job>.<random>.<n>``), so it may hold
#: neither a slash nor a dot (the sweep reads a shard's job back as the part before the first dot).
JOB_ID = re.compile(r"[0-9A-Za-z_-]+")
#: Compare-and-set attempts of one publish before it gives up (each lost one means another commit won).
MAX_PUBLISH_ATTEMPTS = 100
#: The metadata CAS policy for the manifest root and the job records: MAX_PUBLISH_ATTEMPTS tries, no deadline (each lost try means
#: another commit won, so the loop makes progress).
PUBLISH_CAS_RETRY = METADATA_CAS_RETRY.with_(max_tries=MAX_PUBLISH_ATTEMPTS, deadline=None)
MAX_READ_ATTEMPTS = 50

Ledger = tuple[int, int]
T = TypeVar("T")
R = TypeVar("R")


class JobGoneError(MetadataError):
    """The job was aborted (or finished and forgotten): it can no longer publish."""

    code, retriable = -999, False


def ledgers_gone_error(dataset: str, missing: Iterable[Ledger]) -> NoSuchLedgerMetadataError:
    """The commit's refusal to publish ledgers whose metadata is gone: deleted after their tasks wrote them, so
    the job's rows are lost and the dataset must not name them (it would fail every later read)."""
    gone = sorted(set(missing))
    listed = ", ".join(f"{lid} (scope {scope})" for scope, lid in gone)
    return NoSuchLedgerMetadataError(
        f"[BOOKKEEPER_DATA_LOSS] cannot commit dataset {dataset!r}: ledger(s) {listed} written by this job no longer "
        "exist (deleted after their tasks wrote them); nothing was published",
        dataset=dataset, ledgers=[f"{scope}-{lid}" for scope, lid in gone],
    )


class JobState(str, enum.Enum):
    """A job record's state (docs/connector.md, "The commit protocol")."""

    WRITING = "writing"
    COMMITTED = "committed"
    ABORTING = "aborting"


@dataclass(frozen=True)
class JobRecord:
    """What ``<root>/bkspark/jobs/<job>`` holds; ``version`` is the znode's, for compare-and-set."""

    state: JobState
    dataset: str
    overwrite: bool = False
    parent: Ledger | None = None
    created_ms: int = 0
    version: int = -1
    #: A job routed by a ``dataset`` column (docs/connector.md, "Routing rows by a dataset column"): ``dataset`` is
    #: empty, its ledgers' datasets are in their registrations until the commit's ``multi`` sets ``datasets``.
    routed: bool = False
    #: Every dataset a routed job published (set, with state ``committed``, by the commit's ``multi``).
    datasets: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The datasets the job publishes (or published): its one ``dataset``, or a routed job's ``datasets``."""
        if self.routed:
            return self.datasets
        return (self.dataset,) if self.dataset else ()

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {
            "state": self.state.value, "dataset": self.dataset, "overwrite": self.overwrite,
            "parent": list(self.parent) if self.parent else None, "created_ms": self.created_ms,
        }
        if self.routed:
            body["routed"] = True
            body["datasets"] = list(self.datasets)
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, version: int) -> "JobRecord | None":
        """None for a record without data (a job registered by a writer older than this protocol)."""
        if not data:
            return None
        try:
            body = json.loads(data.decode())
            parent = body.get("parent")
            return cls(
                state=JobState(body["state"]), dataset=str(body["dataset"]), overwrite=bool(body.get("overwrite")),
                parent=(int(parent[0]), int(parent[1])) if parent else None, created_ms=int(body.get("created_ms", 0)),
                version=version, routed=bool(body.get("routed", False)),
                datasets=tuple(str(name) for name in body.get("datasets") or ()),
            )
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, UnicodeDecodeError) as exc:
            raise BadMetadataError(f"job record cannot be parsed: {exc}") from None


@dataclass(frozen=True)
class CommitKey:
    """An idempotency key published in the same ``multi`` as the ledgers: ``token`` only ever grows per writer."""

    writer: str
    token: int = 0


@dataclass(frozen=True)
class ShardRef:
    shard_id: str
    count: int

    @property
    def owner(self) -> str:
        """The job that wrote the shard (its record protects the shard from sweeping)."""
        return self.shard_id.split(".", 1)[0]


@dataclass(frozen=True)
class ManifestRoot:
    """A dataset's root znode, parsed.  ``legacy`` holds the ledgers of a format-1 (single znode) manifest."""

    name: str
    generation: int = 0
    shards: tuple[ShardRef, ...] = ()
    retired: tuple[ShardRef, ...] = ()
    keys: tuple[tuple[str, int], ...] = ()
    legacy: tuple[Ledger, ...] | None = None
    version: int = -1

    @property
    def committed(self) -> bool:
        """Whether any job ever published (an empty root znode exists before the first publish)."""
        return self.legacy is not None or self.generation > 0

    @property
    def ledger_count(self) -> int:
        return len(self.legacy) if self.legacy is not None else sum(s.count for s in self.shards)

    def token(self, writer: str) -> int | None:
        for name, token in self.keys:
            if name == writer:
                return token
        return None

    def to_bytes(self) -> bytes:
        body = {
            "format": FORMAT_SHARDED, "name": self.name, "generation": self.generation,
            "shards": [[s.shard_id, s.count] for s in self.shards],
            "retired": [[s.shard_id, s.count] for s in self.retired],
            "keys": [[w, t] for w, t in self.keys],
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, name: str, data: bytes, version: int) -> "ManifestRoot":
        if not data:
            return cls(name=name, version=version)
        try:
            body = json.loads(data.decode("utf-8"))
            fmt = body.get("format")
            if fmt == FORMAT_SINGLE:
                legacy = tuple((int(s), int(lid)) for s, lid in body["ledgers"])
                return cls(name=name, legacy=legacy, version=version)
            if fmt != FORMAT_SHARDED:
                raise ValueError(f"unknown manifest format {fmt!r}")
            return cls(
                name=name, generation=int(body["generation"]),
                shards=tuple(ShardRef(str(i), int(c)) for i, c in body["shards"]),
                retired=tuple(ShardRef(str(i), int(c)) for i, c in body["retired"]),
                keys=tuple((str(w), int(t)) for w, t in body["keys"]), version=version,
            )
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise BadMetadataError(f"dataset manifest of {name!r} cannot be parsed: {exc}") from None


@dataclass(frozen=True)
class Shard:
    """One shard's content: ledgers in commit order, and the job parents they name (for clean-up)."""

    ledgers: tuple[Ledger, ...]
    parents: tuple[Ledger, ...] | None = ()  # None: unknown (migrated from a format-1 manifest)
    #: Parents of routed jobs that published to other datasets too: their children there may outlive this
    #: shard, so its clean-up deletes them only once no other dataset's live shard names them.
    shared: tuple[Ledger, ...] = ()

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {
            "format": FORMAT_SHARDED, "ledgers": [list(p) for p in self.ledgers],
            "parents": None if self.parents is None else [list(p) for p in self.parents],
        }
        if self.shared:
            body["shared"] = [list(p) for p in self.shared]
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "Shard":
        try:
            body = json.loads(data.decode("utf-8"))
            parents = body.get("parents")
            return cls(
                ledgers=tuple((int(s), int(lid)) for s, lid in body["ledgers"]),
                parents=None if parents is None else tuple((int(s), int(lid)) for s, lid in parents),
                shared=tuple((int(s), int(lid)) for s, lid in body.get("shared") or ()),
            )
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise BadMetadataError(f"manifest shard cannot be parsed: {exc}") from None


@dataclass(frozen=True)
class DatasetManifest:
    """The committed ledgers of one dataset, as ``(scope_id, ledger_id)`` pairs in commit order.

    ``to_bytes``/``from_bytes`` are the format-1 (single znode) encoding, kept to read datasets written before
    the manifest was sharded (and to write one in the compatibility tests).
    """

    name: str
    ledgers: tuple[Ledger, ...]
    version: int = -1  # the root znode's version
    generation: int = 0

    def to_bytes(self) -> bytes:
        body = {"format": FORMAT_SINGLE, "name": self.name, "ledgers": [list(pair) for pair in self.ledgers]}
        return json.dumps(body, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, name: str, data: bytes, version: int) -> "DatasetManifest":
        root = ManifestRoot.from_bytes(name, data, version)
        if root.legacy is None:
            raise BadMetadataError(f"dataset manifest of {name!r} is not a single-znode manifest")
        return cls(name=name, ledgers=root.legacy, version=version)


@dataclass(frozen=True)
class PublishResult:
    """What a publish did: ``already`` when the key (or the job) had published before, and nothing changed."""

    root: ManifestRoot
    already: bool
    #: Shards this publish retired (an overwrite): their ledgers await deletion, see :meth:`DatasetRegistry.retired`.
    retired: tuple[ShardRef, ...] = ()


@dataclass(frozen=True)
class PublishTarget:
    """One dataset of a publish: the ledgers to add, and whether they replace the dataset's (an overwrite)."""

    name: str
    ledgers: tuple[Ledger, ...]
    replace_all: bool = False


class DatasetRegistry:
    """Dataset manifests and job records, on a started kazoo client (through :class:`bkspark.metadata.znodes.Znodes`:
    this module imports no kazoo)."""

    def __init__(self, zk: Any, ledgers_root: str) -> None:
        self._znodes = Znodes(zk)
        self._root = ledgers_root
        self._datasets = zk_paths.datasets_path(ledgers_root)
        self._jobs = zk_paths.write_jobs_path(ledgers_root)

    # -- paths (their home: bkspark/protocol/zk_paths.py) ------------------------
    def dataset_path(self, name: str) -> str:
        return zk_paths.dataset_path(self._root, name)

    def shards_path(self, name: str) -> str:
        return zk_paths.dataset_shards_path(self._root, name)

    def job_path(self, job_id: str) -> str:
        return zk_paths.write_job_path(self._root, job_id)

    # -- reading ------------------------------------------------------------
    def _read(self, path: str, parse: Callable[[bytes, int], R]) -> R | None:
        """``parse(data, version)`` of the znode at ``path``, None when there is none; a
        :class:`BadMetadataError` names the znode."""
        found = self._znodes.get(path)
        if found is None:
            return None
        data, stat = found
        try:
            return parse(data, stat.version)
        except BadMetadataError as exc:
            raise BadMetadataError(f"{exc} (znode {path})") from None

    def root(self, name: str) -> ManifestRoot | None:
        """The dataset's root as stored (None: no znode)."""
        return self._read(self.dataset_path(name), lambda data, version: ManifestRoot.from_bytes(name, data, version))

    def watch_manifest(self, name: str, callback: "Callable[[Any], None]") -> None:
        """Call ``callback(event)`` once, when the root of ``name`` is created, changed or deleted."""
        self._znodes.stat(self.dataset_path(name), watch=callback)

    def read_shards(self, name: str, refs: Sequence[ShardRef]) -> list[Shard] | None:
        """The shards' contents (pipelined reads); None if one is gone (a newer root replaced it)."""
        paths = [zk_paths.dataset_shard_path(self._root, name, ref.shard_id) for ref in refs]
        found = self._znodes.get_each(paths, timeout=60)
        shards: list[Shard] = []
        missing = False
        for ref, result in zip(refs, found):
            if result is None:
                missing = True
                continue
            shard = Shard.from_bytes(result[0])
            if len(shard.ledgers) != ref.count:
                raise BadMetadataError(
                    f"shard {ref.shard_id} of dataset {name!r} holds {len(shard.ledgers)} ledgers, its root says {ref.count}"
                )
            shards.append(shard)
        return None if missing else shards

    def snapshot(self, name: str) -> tuple[ManifestRoot, list[Shard]] | None:
        """A consistent (root, its shards) pair, or None if the dataset was never committed."""
        for _ in range(MAX_READ_ATTEMPTS):
            root = self.root(name)
            if root is None or not root.committed:
                return None
            if root.legacy is not None:
                return root, [Shard(root.legacy, None)]
            shards = self.read_shards(name, root.shards)
            if shards is not None:
                return root, shards
        raise MetadataError(f"dataset {name!r}: its manifest kept changing while being read")

    def manifest(self, name: str) -> DatasetManifest | None:
        """The committed ledgers of ``name`` (old or new format), or None if no job ever committed it."""
        snap = self.snapshot(name)
        if snap is None:
            return None
        root, shards = snap
        ledgers = tuple(pair for shard in shards for pair in shard.ledgers)
        return DatasetManifest(name=name, ledgers=ledgers, version=root.version, generation=root.generation)

    def datasets(self) -> list[str]:
        return sorted(self._znodes.children(self._datasets))

    # -- jobs ---------------------------------------------------------------
    def begin_job(self, job_id: str, record: JobRecord) -> None:
        """Create the job's record (state ``writing``), before any task may register a ledger; idempotent, and
        waits out a ZooKeeper outage shorter than the session (the job's whole write would fail otherwise).
        ``job_id`` must match :data:`JOB_ID` (:class:`InvalidOptionError` otherwise, before ZooKeeper is asked)."""
        if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
            raise InvalidOptionError(f"job id {job_id!r} is not [0-9A-Za-z_-]+ (it prefixes the job's shard names)")
        self._create_if_absent(self.job_path(job_id), record.to_bytes(), makepath=True)

    def job(self, job_id: str) -> JobRecord | None:
        """The job's record, or None when the job has none (finished and forgotten, or never begun)."""
        return self._read(self.job_path(job_id), JobRecord.from_bytes)

    def jobs(self) -> list[str]:
        return sorted(self._znodes.children(self._jobs))

    def job_age_seconds(self, job_id: str) -> float | None:
        """Seconds since the job's record was created (its znode's ctime), None without one."""
        stat = self._znodes.stat(self.job_path(job_id))
        return None if stat is None else max(0.0, time.time() - stat.ctime / 1000)

    def register(self, job_id: str, scope_id: int, ledger_id: int, dataset: str = "") -> None:
        """Record that a task of ``job_id`` created this ledger (before it writes any entry); a routed job's
        registration holds the ledger's ``dataset`` (its abort checks each ledger against that manifest).

        The job's record must exist: an aborted job's straggling task fails here (:class:`JobGoneError`) instead
        of re-creating it.  A ZooKeeper outage shorter than the session is waited out (the task would fail
        otherwise, its ledger left to the job's abort).
        """
        if not self._create_if_absent(self._registration_path(job_id, (scope_id, ledger_id)), dataset.encode()):
            raise JobGoneError(f"write job {job_id} has no record (aborted or finished): cannot register a ledger") from None

    def _registration_path(self, job_id: str, ledger: Ledger) -> str:
        return zk_paths.job_ledger_path(self._root, job_id, ledger[0], ledger[1])

    def holders(self, ledger: Ledger) -> list[str]:
        """Who still needs ``ledger``: ``dataset '<name>'`` when its manifest names it (a committed ledger, or the
        job parent its committed ledgers name), ``write job <id> (writing; ...)`` when a job that may still commit
        registered it.  Empty for garbage: what committed or aborting jobs left, ledgers an overwrite retired."""
        out: list[str] = []
        for name in self.datasets():
            snap = self.snapshot(name)
            if snap is not None and any(ledger in shard.ledgers or ledger in (shard.parents or ()) for shard in snap[1]):
                out.append(f"dataset {name!r}")
        for job_id in self.jobs():
            record = self.job(job_id)
            if record is not None and record.state is JobState.WRITING:
                if self._znodes.stat(self._registration_path(job_id, ledger)) is not None:
                    out.append(f"write job {job_id} (writing; recoverjobs aborts it once it is stale)")
        return out

    def job_ledgers(self, job_id: str) -> list[Ledger]:
        """Every ledger the tasks of ``job_id`` registered, failed attempts included."""
        children = self._znodes.children(self.job_path(job_id))
        pairs = []
        for child in children:
            scope, _, ledger = child.rpartition("-")  # "<scope>-<ledger>"; a scope may be negative ("-7-12")
            if scope.removeprefix("-").isdigit() and ledger.isdigit():
                pairs.append((int(scope), int(ledger)))
        return sorted(pairs)

    def job_ledger_datasets(self, job_id: str) -> dict[Ledger, str]:
        """The datasets a routed job's registrations name, per ledger (pipelined reads; a registration gone
        meanwhile, or one without a dataset, is left out)."""
        ledgers = self.job_ledgers(job_id)
        found = self._znodes.get_each([self._registration_path(job_id, ledger) for ledger in ledgers], timeout=60)
        out: dict[Ledger, str] = {}
        for ledger, result in zip(ledgers, found):
            if result is not None and result[0]:
                out[ledger] = result[0].decode("utf-8", "replace")
        return out

    def job_datasets(self, job_id: str, record: JobRecord | None) -> tuple[str, ...]:
        """The datasets job ``job_id`` (whose ``record`` this is) publishes to: its record's, or, for a routed job
        not yet committed, those its ledgers' registrations name."""
        if record is None:
            return ()
        if record.routed and not record.datasets:
            return tuple(sorted(set(self.job_ledger_datasets(job_id).values())))
        return record.names

    def fence_job(self, job_id: str) -> JobRecord | None:
        """Move a ``writing`` job to ``aborting`` (compare-and-set), so that it can never publish.

        Returns the record after the fence: ``aborting``, or ``committed`` when the job's own publish won the
        race (its ledgers are then committed and must not be deleted); None when the job has no record.
        """
        from bkspark.errors import MetadataVersionError

        attempts = PUBLISH_CAS_RETRY.start()
        while True:
            record = self.job(job_id)  # (re-)read: the state decides whether there is anything to fence
            if record is None or record.state is not JobState.WRITING:
                return record
            fenced = replace(record, state=JobState.ABORTING)
            stat = self._znodes.set(self.job_path(job_id), fenced.to_bytes(), version=record.version)
            if stat is None:  # another version, or gone
                lost = MetadataVersionError(f"could not fence write job {job_id}: its record keeps changing")
                attempts.backoff(lost)  # re-raises once the policy gives up
                continue
            return replace(fenced, version=stat.version)

    def forget_job(self, job_id: str) -> None:
        """Drop the job's record and registrations once its ledgers are committed or deleted."""
        self._znodes.delete(self.job_path(job_id), recursive=True)

    # -- publishing ----------------------------------------------------------
    def publish(
        self,
        name: str,
        ledgers: Iterable[Ledger],
        *,
        replace_all: bool,
        **commit: Any,
    ) -> PublishResult:
        """Make ``ledgers`` part of dataset ``name`` in one ``multi`` (the commit point); ``commit`` holds
        :meth:`publish_many`'s keywords (``job_id`` and ``key`` required).

        With ``replace_all`` (overwrite) the root names exactly ``ledgers`` and the previous shards become
        ``retired``; otherwise the ledgers are appended.  The ``multi`` also moves the job's record from
        ``writing`` to ``committed`` (compare-and-set: an abort's fence and this publish exclude each other),
        records ``key``, and creates ``extra_creates`` (paths whose parents exist).  A key already published
        (token not above the recorded one), or a job already committed, publishes nothing: ``already``.
        ``before_multi`` runs after the new shards are written (a fault point for tests).

        With ``ledger_path`` (``(ledger_id, scope_id) -> metadata znode``, the store's ``ledger_path``) every
        ledger must still exist: the ``multi`` checks the znodes of the first ones
        (:data:`~bkspark.datasource.publishing.MULTI_CHECK_BYTES` of checks), and the others are looked up before the shards are written; a ledger that is gone fails the
        commit with :func:`ledgers_gone_error` and nothing is published.
        """
        return self.publish_many([PublishTarget(name, tuple(ledgers), replace_all)], **commit)[0]

    def publish_many(
        self,
        targets: Sequence["PublishTarget"],
        *,
        job_id: str,
        key: CommitKey,
        parents: Iterable[Ledger] = (),
        extra_creates: Sequence[tuple[str, bytes]] = (),
        before_multi: Callable[[], None] | None = None,
        ledger_path: Callable[[int, int], str] | None = None,
    ) -> list[PublishResult]:
        """:meth:`publish` of several datasets at once (a routed job): one ``multi`` sets every target's root
        (each compare-and-set on its version), the job's record (``committed``, and for a routed job the
        datasets it published) and ``key`` in every root, so all of them change or none does.  One result per
        target, in order.  The steps live in :mod:`bkspark.datasource.publishing`."""
        from bkspark.datasource.publishing import DatasetPublisher  # it builds on this module's records

        publisher = DatasetPublisher(self, self._znodes)
        return publisher.publish_many(targets, job_id, key, parents, extra_creates, before_multi, ledger_path)

    def parent_named_elsewhere(self, parent: Ledger, datasets: Iterable[str], but: str) -> str | None:
        """The first of ``datasets`` other than ``but`` whose live shards name ``parent`` (None: none does)."""
        for name in datasets:
            if name == but:
                continue
            snap = self.snapshot(name)
            if snap is not None and any(parent in (shard.parents or ()) for shard in snap[1]):
                return name
        return None

    def missing_ledgers(self, znodes: dict[Ledger, str]) -> list[Ledger]:
        """The ledgers whose metadata znode (``znodes``: ledger -> path) does not exist, read with ZooKeeper's
        read-only multi reads (:mod:`bkspark.metadata.multiread`: a few hundred znodes per round trip, nothing
        logged), as planning reads a dataset's metadata."""
        gone = self._znodes.missing(list(znodes.values()), timeout=60)
        return [ledger for ledger, missing in zip(znodes, gone) if missing]

    def write_shards(self, name: str, shards: list[tuple[str, Shard]]) -> list[str]:
        """Create a plan's new shards (ids no other plan uses: NodeExists after an outage is this create's own)."""
        written = []
        for sid, shard in shards:
            written.append(sid)  # before the create: one whose answer an outage lost is still deleted on failure
            self._create_if_absent(zk_paths.dataset_shard_path(self._root, name, sid), shard.to_bytes(), makepath=True)
        return written

    def delete_shards(self, name: str, shard_ids: Iterable[str]) -> None:
        """Delete shard znodes of ``name`` (gone ones count as deleted) through a short outage."""
        for sid in shard_ids:
            path = zk_paths.dataset_shard_path(self._root, name, sid)
            self._outlast_outage(lambda: self._znodes.delete(path))

    def _outlast_outage(self, call: Callable[[], T]) -> T:
        """``call()`` through a ZooKeeper outage shorter than the session (:meth:`Znodes.outlast_outage
        <bkspark.metadata.znodes.Znodes.outlast_outage>`: only for calls safe to repeat)."""
        return self._znodes.outlast_outage(call)

    def _create_if_absent(self, path: str, data: bytes, *, makepath: bool = False) -> bool:
        """Create ``path`` unless it exists, through a short outage (:meth:`_outlast_outage`); False when its parent
        is missing (without ``makepath``).  NodeExists counts as done (each caller's create is idempotent by its
        path), also after a try whose answer the outage lost: the znode is then that try's own."""
        return self._outlast_outage(lambda: self._znodes.create(path, data, makepath=makepath)) is not Outcome.NO_NODE

    # -- clean-up after the commit point ---------------------------------------
    def retired(self, name: str) -> list[tuple[ShardRef, Shard]]:
        """The retired shards of ``name`` (replaced by an overwrite) and their contents, awaiting deletion."""
        root = self.root(name)
        if root is None or not root.retired:
            return []
        shards = self.read_shards(name, root.retired)
        if shards is None:  # dropped meanwhile by another clean-up: read again
            return self.retired(name)
        return list(zip(root.retired, shards))

    def drop_retired(self, name: str, refs: Iterable[ShardRef]) -> None:
        """Remove retired shards from the root (their ledgers are deleted), then delete their znodes."""
        from bkspark.errors import MetadataVersionError

        gone = {r.shard_id for r in refs}
        attempts = PUBLISH_CAS_RETRY.start()
        while True:
            root = self.root(name)  # (re-)read: a lost compare-and-set means a newer root
            if root is None:
                return
            if gone & {r.shard_id for r in root.retired}:
                updated = replace(root, retired=tuple(r for r in root.retired if r.shard_id not in gone))
                if self._znodes.set(self.dataset_path(name), updated.to_bytes(), version=root.version) is None:
                    lost = MetadataVersionError(f"could not update dataset {name!r}: too many concurrent commits")
                    attempts.backoff(lost)  # re-raises once the policy gives up
                    continue
            self.delete_shards(name, gone)
            return

    def sweep_shards(self, name: str) -> int:
        """Delete shards no root names whose job has no record any more; how many were deleted.

        Order matters: list the shards, drop those whose job is still live, and only then read the root, so a
        shard published by a job that finished meanwhile is seen as named.
        """
        children = self._znodes.children(self.shards_path(name))
        if not children:
            return 0
        candidates = [c for c in children if not self._znodes.stat(self.job_path(c.split(".", 1)[0]))]
        root = self.root(name)
        if root is None:
            return 0
        named = {r.shard_id for r in root.shards} | {r.shard_id for r in root.retired}
        doomed = [c for c in candidates if c not in named]
        self.delete_shards(name, doomed)
        return len(doomed)

    # -- what crashes leave -----------------------------------------------------
    def leftover_ledgers(
        self, on_unreadable: Callable[[str, BadMetadataError], None] | None = None
    ) -> dict[Ledger, Ledger | None]:
        """Ledgers that write jobs left and no manifest names -> the job parent they belong to (if known).

        Those registered by a ``committed`` job but not in its dataset's manifest (attempts that did not commit,
        whose job's clean-up did not finish), and those of retired shards (replaced by an overwrite) with the
        parents the shards list.  Ledgers of jobs that never committed are not here: their parent was never
        created, so the orphan audit reports them as ``BROKEN_PARENT_REF`` anyway.

        Every job record is read before any manifest: a job that commits meanwhile is then either still
        ``writing`` here or named by the manifest read after it (its record and its manifest change in one
        ``multi``), so a committed ledger is never reported.  A record or manifest that cannot be parsed goes to
        ``on_unreadable(label, error)`` (``job <id>`` or ``dataset <name>``) and is skipped, with every ledger
        whose fate it decides; without ``on_unreadable`` the error is raised.
        """

        def unreadable(label: str, exc: BadMetadataError) -> None:
            if on_unreadable is None:
                raise exc
            on_unreadable(label, exc)

        records: dict[str, JobRecord] = {}
        for job_id in self.jobs():
            try:
                record = self.job(job_id)
            except BadMetadataError as exc:
                unreadable(f"job {job_id}", exc)
                continue
            if record is not None and record.state is JobState.COMMITTED:
                records[job_id] = record
        named: dict[str, set[Ledger] | None] = {}

        def names(dataset: str) -> set[Ledger] | None:
            """The ledgers the manifest names; None when it cannot be read (nothing of it is judged)."""
            if dataset not in named:
                try:
                    manifest = self.manifest(dataset)
                except BadMetadataError as exc:
                    unreadable(f"dataset {dataset}", exc)
                    named[dataset] = None
                else:
                    named[dataset] = set(manifest.ledgers) if manifest is not None else set()
            return named[dataset]

        found: dict[Ledger, Ledger | None] = {}
        for job_id, record in records.items():
            manifests = [names(dataset) for dataset in record.names]
            if any(m is None for m in manifests):
                continue
            committed = set().union(*(m for m in manifests if m is not None))
            for pair in self.job_ledgers(job_id):
                if pair not in committed:
                    found[pair] = record.parent
        for dataset in self.datasets():
            committed = names(dataset)
            if committed is None:
                continue
            try:
                retired = self.retired(dataset)
            except BadMetadataError as exc:
                unreadable(f"dataset {dataset}", exc)
                continue
            for _ref, shard in retired:
                for pair in shard.ledgers:
                    if pair not in committed:
                        found.setdefault(pair, None)
                for parent in shard.parents or ():
                    found.setdefault(parent, None)
        return found
