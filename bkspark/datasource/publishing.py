"""The commit point of a dataset publish: plan the new roots and shards, write the shards, then one ZooKeeper
``multi`` (docs/connector.md, "The commit protocol").

:class:`~bkspark.datasource.datasets.DatasetRegistry` owns the manifest's format, reads and job records; this
module owns the one multi-step operation that changes a manifest's live shards: the plan (which shards a publish
merges, writes and retires), the compare-and-set loop around the ``multi``, and what each failed ``multi`` leaves
(the plan's shards are deleted again, a lost answer is settled by the job's record).  A registry publishes through
:meth:`DatasetRegistry.publish_many <bkspark.datasource.datasets.DatasetRegistry.publish_many>`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from bkspark.datasource.datasets import (
    PUBLISH_CAS_RETRY,
    SHARD_MAX_LEDGERS,
    CommitKey,
    JobGoneError,
    JobState,
    Ledger,
    ManifestRoot,
    PublishResult,
    PublishTarget,
    Shard,
    ShardRef,
    ledgers_gone_error,
)
from bkspark.errors import MetadataError
from bkspark.metadata.znodes import Outcome, Znodes

if TYPE_CHECKING:
    from bkspark.datasource.datasets import DatasetRegistry

__all__ = ["CHECK_OP_OVERHEAD", "MAX_COMMIT_KEYS", "MULTI_CHECK_BYTES", "DatasetPublisher", "checks_in_multi"]

#: Idempotency keys a root remembers (the least recently published writer is forgotten first).
MAX_COMMIT_KEYS = 1000
#: The bytes of existence checks one publish's ``multi`` may carry, one per published ledger's metadata znode:
#: about 1,100 to 1,500 ledgers of scope 0 (a job's tasks), 770 of the longest BP-35 paths.  A ``multi`` is one
#: transaction that ZooKeeper prepares, logs and applies whole: thousands of operations in one cost its server
#: memory out of proportion (the test ZooKeeper's 128 MB heap ran out on a few of 9,000), so the bound is small.
#: Ledgers past it are looked up with read-only multi reads just before the shards are written
#: (docs/connector.md, "The commit protocol").
MULTI_CHECK_BYTES = 64 * 1024
#: What one check operation costs in a ``multi`` besides its path's bytes (the operation's header, the path's
#: length and the version to check).
CHECK_OP_OVERHEAD = 20


@dataclass
class _Plan:
    """A publish under construction: the new root and the shard znodes to write first."""

    root: ManifestRoot
    new_shards: list[tuple[str, Shard]] = field(default_factory=list)
    retired: tuple[ShardRef, ...] = ()


def checks_in_multi(paths: Sequence[str], budget: int = MULTI_CHECK_BYTES) -> list[str]:
    """The first of ``paths`` whose check operations fit ``budget`` bytes of a publish's ``multi``."""
    used = 0
    for count, path in enumerate(paths):
        used += len(path.encode()) + CHECK_OP_OVERHEAD
        if used > budget:
            return list(paths[:count])
    return list(paths)


def _chunks(items: Sequence[Ledger], size: int) -> list[tuple[Ledger, ...]]:
    return [tuple(items[i : i + size]) for i in range(0, len(items), size)] or [()]


class DatasetPublisher:
    """Publishes to the datasets of one :class:`DatasetRegistry` (whose reads, paths and shard znodes it uses)."""

    def __init__(self, registry: "DatasetRegistry", znodes: Znodes) -> None:
        self._registry = registry
        self._znodes = znodes

    def publish_many(self, targets: Sequence[PublishTarget], job_id: str, key: CommitKey, parents: Iterable[Ledger],
                     extra_creates: Sequence[tuple[str, bytes]], before_multi: Callable[[], None] | None,
                     ledger_path: Callable[[int, int], str] | None) -> list[PublishResult]:
        """:meth:`DatasetRegistry.publish_many <bkspark.datasource.datasets.DatasetRegistry.publish_many>`, whose
        keywords (and their defaults) these are; one result per target, in order."""
        from bkspark.errors import MetadataVersionError

        targets = list(targets)
        names = [t.name for t in targets]
        if not targets or len(set(names)) != len(names):
            raise ValueError(f"publish needs distinct datasets, got {names}")
        label = ", ".join(repr(name) for name in names)
        parent_list = tuple(dict.fromkeys(parents))
        # A parent whose children go to several datasets: each dataset's shards mark it shared (see Shard.shared).
        shared = parent_list if len(targets) > 1 else ()
        znodes = (
            {ledger: ledger_path(ledger[1], ledger[0]) for t in targets for ledger in t.ledgers}
            if ledger_path is not None else {}
        )
        checked = checks_in_multi(list(znodes.values()))
        in_multi = dict(list(znodes.items())[: len(checked)])
        beyond = dict(list(znodes.items())[len(checked) :])  # checked only before the multi
        # Every step before the multi reads or creates what only this publish names (a shard id is new to each
        # plan): a ZooKeeper outage shorter than the session is waited out (Znodes.outlast_outage) instead of failing
        # the job's commit.
        for name in names:
            self._znodes.outlast_outage(lambda: self._znodes.ensure_path(self._registry.dataset_path(name)))
        attempts = PUBLISH_CAS_RETRY.start()
        lost: MetadataVersionError | None = None
        while True:
            if lost is not None:
                attempts.backoff(lost)  # re-raises once the policy gives up
            lost = MetadataVersionError(f"could not commit dataset {label}: too many concurrent commits")
            # Re-read the job and the roots on every try.
            job = self._znodes.outlast_outage(lambda: self._registry.job(job_id))
            roots: dict[str, ManifestRoot] = {}
            for name in names:
                found = self._znodes.outlast_outage(lambda: self._registry.root(name))
                assert found is not None  # ensured above, and a root is never deleted
                roots[name] = found
            if job is not None and job.state is JobState.COMMITTED or any(self._has_key(r, key) for r in roots.values()):
                return [PublishResult(roots[name], True) for name in names]
            if job is None or job.state is not JobState.WRITING:
                raise JobGoneError(f"write job {job_id} was aborted (or forgotten) before its commit: nothing published")
            gone = self._znodes.outlast_outage(lambda: self._registry.missing_ledgers(beyond))
            if gone:
                raise ledgers_gone_error(" + ".join(names), gone)
            plans: dict[str, _Plan] = {}
            for t in targets:
                plan = self._znodes.outlast_outage(
                    lambda: self._plan(t.name, roots[t.name], t.ledgers, parent_list, replace_all=t.replace_all,
                                       job_id=job_id, key=key, shared=shared)
                )
                if plan is None:
                    break  # a shard of the root vanished under us: a newer root exists
                plans[t.name] = plan
            if len(plans) != len(targets):
                continue
            written: dict[str, list[str]] = {}
            for name in names:
                written[name] = self._registry.write_shards(name, plans[name].new_shards)
            if before_multi is not None:
                before_multi()
            committed = replace(job, state=JobState.COMMITTED, datasets=tuple(names) if job.routed else job.datasets)
            tx = self._znodes.multi()
            tx.set(self._registry.job_path(job_id), committed.to_bytes(), version=job.version)
            for name in names:
                tx.set(self._registry.dataset_path(name), plans[name].root.to_bytes(), version=roots[name].version)
            for path, data in extra_creates:
                tx.create(path, data)
            for path in checked:
                tx.check(path, -1)  # version -1: any version, so the znode must merely exist
            results = tx.commit()
            if results is None:
                # Applied or not: the job's record says (it turns committed in the same multi). The multi itself is
                # never sent again as it was: a lost one is re-planned under the CAS policy once the record says no.
                after = self._znodes.outlast_outage(lambda: self._registry.job(job_id))
                if after is not None and after.state is JobState.COMMITTED:
                    return [
                        PublishResult(self._znodes.outlast_outage(lambda: self._registry.root(name)) or plans[name].root, False,
                                      plans[name].retired)
                        for name in names
                    ]
                self._delete_written(written)
                continue
            if all(outcome is Outcome.OK for outcome in results):
                return [
                    PublishResult(replace(plans[name].root, version=roots[name].version + 1), False, plans[name].retired)
                    for name in names
                ]
            self._delete_written(written)
            job_outcome, root_outcomes = results[0], results[1 : 1 + len(names)]
            if Outcome.BAD_VERSION in root_outcomes or job_outcome in (Outcome.BAD_VERSION, Outcome.NO_NODE):
                continue  # another commit won (or our record changed): look again
            first_create = 1 + len(names)
            create_outcomes = results[first_create : first_create + len(extra_creates)]
            if Outcome.NO_NODE in results[first_create + len(extra_creates) :]:
                # A ledger of the job deleted before the multi: name every one that is gone now.
                gone = self._znodes.outlast_outage(lambda: self._registry.missing_ledgers(in_multi)) or list(in_multi)
                raise ledgers_gone_error(" + ".join(names), gone)
            for (path, _), outcome in zip(extra_creates, create_outcomes):
                if outcome is Outcome.NO_NODE:
                    self._znodes.outlast_outage(lambda: self._znodes.ensure_path(path.rsplit("/", 1)[0]))
                elif outcome is Outcome.NODE_EXISTS:
                    raise MetadataError(f"cannot commit dataset {label}: {path} already exists")
            if Outcome.NO_NODE in create_outcomes:
                continue
            failed = [type(e).__name__ for e in tx.errors if e is not None]
            raise MetadataError(f"cannot commit dataset {label}: {failed}")

    def _delete_written(self, written: dict[str, list[str]]) -> None:
        for name, shard_ids in written.items():
            self._registry.delete_shards(name, shard_ids)

    @staticmethod
    def _has_key(root: ManifestRoot, key: CommitKey) -> bool:
        recorded = root.token(key.writer)
        return recorded is not None and recorded >= key.token

    def _plan(
        self, name: str, root: ManifestRoot, new: tuple[Ledger, ...], parents: tuple[Ledger, ...], *,
        replace_all: bool, job_id: str, key: CommitKey, shared: tuple[Ledger, ...] = (),
    ) -> _Plan | None:
        """The root to publish and the shards to write first; None if a shard we must read is gone."""
        tag = uuid.uuid4().hex[:12]
        counter = iter(range(1 << 30))

        def shard_id() -> str:
            return f"{job_id}.{tag}.{next(counter)}"

        new_shards: list[tuple[str, Shard]] = []
        kept: list[ShardRef] = []
        retired: list[ShardRef] = list(root.retired)  # still awaiting deletion: every root carries them on
        if root.legacy is not None:
            # Migrate the format-1 manifest: its ledgers go into shards of their own (parents unknown).
            legacy_refs = []
            for chunk in _chunks(root.legacy, SHARD_MAX_LEDGERS):
                if chunk:
                    sid = shard_id()
                    new_shards.append((sid, Shard(chunk, None)))
                    legacy_refs.append(ShardRef(sid, len(chunk)))
            current = legacy_refs
        else:
            current = list(root.shards)
        tail_shared: list[Ledger] = []
        if replace_all:
            retired += current
            tail: list[Ledger] = []
            tail_parents: list[Ledger] = []
        else:
            kept = current
            # Merge the new ledgers with the last shards while they fit in one shard: the number of shards stays
            # about twice the ledgers / SHARD_MAX_LEDGERS, and each publish rewrites at most one shard's worth.
            take: list[ShardRef] = []
            while kept and kept[-1].count + sum(s.count for s in take) + len(new) <= SHARD_MAX_LEDGERS:
                take.insert(0, kept.pop())
            tail, tail_parents = [], []
            fresh = {sid: shard for sid, shard in new_shards}
            unread = [ref for ref in take if ref.shard_id not in fresh]
            contents = self._registry.read_shards(name, unread) if unread else []
            if contents is None:
                return None
            by_id = dict(zip((r.shard_id for r in unread), contents))
            unknown_parents = False
            for ref in take:
                shard = fresh.get(ref.shard_id) or by_id[ref.shard_id]
                tail.extend(shard.ledgers)
                tail_shared.extend(shard.shared)
                if shard.parents is None:
                    unknown_parents = True
                else:
                    tail_parents.extend(shard.parents)
            new_shards = [(sid, shard) for sid, shard in new_shards if sid not in {r.shard_id for r in take}]
            if unknown_parents:
                # Ledgers whose parents are unknown keep a shard of their own (clean-up reads their metadata).
                legacy_tail = [p for ref in take for p in (fresh.get(ref.shard_id) or by_id[ref.shard_id]).ledgers]
                sid = shard_id()
                new_shards.append((sid, Shard(tuple(legacy_tail), None)))
                kept.append(ShardRef(sid, len(legacy_tail)))
                tail, tail_parents = [], []
        ledgers = tail + list(new)
        all_parents = tuple(dict.fromkeys(tail_parents + list(parents)))
        all_shared = tuple(dict.fromkeys(tail_shared + list(shared)))
        refs: list[ShardRef] = []
        if ledgers:
            for chunk in _chunks(ledgers, SHARD_MAX_LEDGERS):
                sid = shard_id()
                new_shards.append((sid, Shard(chunk, all_parents, all_shared)))
                refs.append(ShardRef(sid, len(chunk)))
        keys = [(w, t) for w, t in root.keys if w != key.writer] + [(key.writer, key.token)]
        new_root = ManifestRoot(
            name=name, generation=root.generation + 1, shards=tuple(kept + refs), retired=tuple(retired),
            keys=tuple(keys[-MAX_COMMIT_KEYS:]),
        )
        live = {r.shard_id for r in new_root.shards} | {r.shard_id for r in new_root.retired}
        return _Plan(new_root, [(sid, s) for sid, s in new_shards if sid in live], tuple(r for r in retired if r not in root.retired))
