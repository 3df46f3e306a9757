"""After a write job's commit point, and its abort: delete what it leaves, forget it, finish what crashes left.

The clean-up steps of docs/connector.md ("The commit protocol"): a committed job's other attempts' ledgers and
what an overwrite replaced are deleted and its record forgotten (:meth:`CommitCleaner.finish_commit`, retried under
:data:`CLEANUP_RETRY`, never raised: the job is committed); an abort fences the job and deletes its ledgers that no
manifest names (:meth:`CommitCleaner.abort_job`); :func:`recover_jobs` finishes both for jobs a crashed driver
left (``bkspark shell recoverjobs``).  Shared by the batch writer (:mod:`bkspark.datasource.writer`), the
streaming sink and the shell.  Every step is idempotent and checks the manifest before it deletes.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Sequence

from bkspark.datasource.faults import fault_point
from bkspark.datasource.writer import JOB_PARENT_ROLE, TAG_DATASETS, TAG_ROLE
from bkspark.retry import RetryPolicy

__all__ = ["CLEANUP_RETRY", "CLEANUP_UNFINISHED", "CommitCleaner", "delete_ledgers", "recover_jobs"]

log = logging.getLogger(__name__)


def delete_ledgers(bk: Any, ledgers: Iterable[tuple[int, int]]) -> None:
    """Delete ``ledgers`` (one already gone counts as deleted), each after the ``ledger.delete`` fault point."""
    from bkspark.errors import NoSuchLedgerMetadataError

    for scope_id, ledger_id in ledgers:
        fault_point("ledger.delete")
        try:
            bk.delete_ledger(ledger_id, scope_id=scope_id)
        except NoSuchLedgerMetadataError:
            pass


#: Attempts of one clean-up step after the commit point, and the pause before the first retry (doubling).
CLEANUP_ATTEMPTS = 3
CLEANUP_BACKOFF_SECONDS = 0.2
#: The policy of one clean-up step: any failure is tried again, :data:`CLEANUP_ATTEMPTS` tries in all.
CLEANUP_RETRY = RetryPolicy(
    max_tries=CLEANUP_ATTEMPTS, delay=CLEANUP_BACKOFF_SECONDS, backoff=2.0, max_delay=60.0, deadline=None, jitter=0.0,
    retry_on=lambda exc: True,
)


class CommitCleaner:
    """The steps after a job's commit point, and aborts: shared by the writer, the next job and the shell.

    Every step is idempotent and checks the manifest before it deletes, so any process may run it again after
    a crash or concurrently with another.
    """

    def __init__(self, bk: Any, registry: Any) -> None:
        self.bk = bk
        self.registry = registry

    # -- committed jobs -------------------------------------------------------
    def finish_commit(
        self, job_id: str, dataset: "str | Sequence[str]", extra_ledgers: Iterable[tuple[int, int]] = (), *,
        recover_others: bool = True,
    ) -> bool:
        """Delete what a committed job leaves (other attempts' ledgers, what it replaced), then forget it.

        ``dataset``: the job's dataset, or every dataset a routed job published.  Errors are retried, then logged:
        never raised (the job is committed).  True when everything was done; False leaves the job's record (state
        committed) for the next job or ``bkspark shell recoverjobs``.  With ``recover_others``, then finishes the
        committed or aborting jobs of those datasets that crashes left.
        """
        names = _dataset_names(dataset)
        extra = list(extra_ledgers)
        steps = [
            ("commit.published", "delete the ledgers of attempts that did not commit",
             lambda: self._delete_uncommitted(job_id, names, extra)),
            ("commit.attempts-deleted", "delete the ledgers an overwrite replaced",
             lambda: [self.clean_dataset(name) for name in names]),
        ]
        done = all([self._retrying(point, what, job_id, fn) for point, what, fn in steps])
        if not done:
            log.warning(
                "write job %s is committed, but its clean-up is unfinished: its record stays under "
                "<root>/bkspark/jobs for the next write of dataset(s) %s or `bkspark shell recoverjobs`", job_id, names,
            )
            return False
        forgotten = self._retrying("commit.retired-deleted", "forget the job", job_id, lambda: self._forget(job_id, names))
        if forgotten and recover_others:
            self._retrying("commit.forgotten", "finish other jobs' clean-up", job_id,
                           lambda: [recover_jobs(self.bk, self.registry, dataset=name, stale_after=None) for name in names])
        return forgotten

    def _retrying(self, point: str, what: str, job_id: str, step: Callable[[], Any]) -> bool:
        attempts = CLEANUP_RETRY.start()
        while True:
            try:
                fault_point(point)
                step()
                return True
            except Exception as exc:  # noqa: BLE001 - after the commit point nothing may turn into an abort
                log.warning("write job %s: could not %s (attempt %d of %d): %s: %s",
                            job_id, what, attempts.tries + 1, CLEANUP_RETRY.max_tries, type(exc).__name__, exc)
                try:
                    attempts.backoff(exc)  # re-raises after the last attempt
                except Exception:  # noqa: BLE001 - the step stays unfinished, for the next job or recoverjobs
                    return False

    def _named(self, datasets: "str | Sequence[str]") -> set[tuple[int, int]]:
        """Every ledger the manifests of ``datasets`` name."""
        named: set[tuple[int, int]] = set()
        for name in _dataset_names(datasets):
            manifest = self.registry.manifest(name)
            if manifest is not None:
                named.update(manifest.ledgers)
        return named

    def _delete_uncommitted(self, job_id: str, datasets: tuple[str, ...], extra: list[tuple[int, int]]) -> None:
        """The job's registered ledgers that the manifests do not name (read after the commit point)."""
        named = self._named(datasets)
        candidates = set(self.registry.job_ledgers(job_id)) | set(extra)
        delete_ledgers(self.bk, sorted(candidates - named))

    def _forget(self, job_id: str, datasets: "str | Sequence[str]") -> None:
        self.registry.forget_job(job_id)
        for name in _dataset_names(datasets):
            self.registry.sweep_shards(name)

    def clean_dataset(self, dataset: str) -> None:
        """Delete the ledgers of the dataset's retired shards (parents first), drop the shards; sweep the rest.

        A parent a routed job shared with other datasets (``Shard.shared``) stays while another dataset's live
        shard names it: its children there are still committed.
        """
        for ref, shard in self.registry.retired(dataset):
            named = self._named(dataset)
            ledgers = [p for p in shard.ledgers if p not in named]
            parents = shard.parents if shard.parents is not None else _parents_of(self.bk, ledgers)
            parents = [p for p in parents if p not in named and not (p in shard.shared and self._kept_elsewhere(p, dataset))]
            # Parents first: a crash in between leaves children naming a missing parent, which the audit reports
            # and the next clean-up (the shard is still retired) deletes.
            delete_ledgers(self.bk, parents)
            delete_ledgers(self.bk, ledgers)
            self.registry.drop_retired(dataset, [ref])
        self.registry.sweep_shards(dataset)

    def _kept_elsewhere(self, parent: tuple[int, int], dataset: str) -> bool:
        """Whether another dataset of the routed job whose parent this is still names it (``bkspark.datasets``)."""
        from bkspark.errors import NoSuchLedgerMetadataError

        try:
            custom = self.bk.get_ledger_metadata(parent[1], scope_id=parent[0]).custom_metadata
        except NoSuchLedgerMetadataError:
            return False
        others = custom.get(TAG_DATASETS, b"").decode("utf-8", "replace").split(",")
        holder = self.registry.parent_named_elsewhere(parent, [name for name in others if name], dataset)
        if holder is not None:
            log.info("job parent %s stays: dataset %r still names it", parent, holder)
        return holder is not None

    # -- aborted jobs ----------------------------------------------------------
    def abort_job(
        self, job_id: str, dataset: "str | Sequence[str]", extra_ledgers: Iterable[tuple[int, int]] = ()
    ) -> bool:
        """Fence, delete the job's ledgers that no manifest names, forget the job (errors propagate).

        ``dataset``: the job's dataset, or the datasets a routed job's messages named (its registrations name
        the rest).  False when the job turned out committed (its commit won the fence; then its clean-up ran
        instead, and its record says whether that finished), so that no caller reports a committed job as aborted.
        """
        from bkspark.datasource.datasets import JobState

        names = _dataset_names(dataset)
        record = self.registry.fence_job(job_id)
        fault_point("abort.fenced")
        if record is not None and record.state is JobState.COMMITTED:
            log.warning("write job %s: abort after its commit point; finishing the commit's clean-up instead", job_id)
            self.finish_commit(job_id, record.names or names, extra_ledgers)
            return False
        if record is None:
            roots = [self.registry.root(name) for name in names]
            if names and all(root is not None and root.token(job_id) is not None for root in roots):
                return False  # committed and cleaned up: nothing of it is garbage
        if record is not None and record.routed:
            names = tuple(dict.fromkeys(names + tuple(self.registry.job_ledger_datasets(job_id).values())))
        named = self._named(names)
        created = set(self.registry.job_ledgers(job_id)) | set(extra_ledgers)
        if created & named:  # cannot happen while the fence holds; never delete committed data
            log.error("write job %s: ledgers %s are committed in dataset(s) %s: not deleting them",
                      job_id, sorted(created & named), names)
        delete_ledgers(self.bk, sorted(created - named))
        fault_point("abort.ledgers-deleted")
        self._forget(job_id, names)
        fault_point("abort.forgotten")
        return True


def _dataset_names(dataset: "str | Sequence[str]") -> tuple[str, ...]:
    """One dataset's name, or several, as a tuple (an empty name: a routed job's, before it names any)."""
    if isinstance(dataset, str):
        return (dataset,) if dataset else ()
    return tuple(dataset)


#: What :func:`recover_jobs` says of a committed job whose clean-up failed again (its record stays for a re-run).
CLEANUP_UNFINISHED = "committed: clean-up unfinished"


def recover_jobs(
    bk: Any, registry: Any, *, dataset: str | None = None, stale_after: float | None = None
) -> list[tuple[str, str]]:
    """Finish the jobs a crash left behind: ``(job id, what was done)`` for each.

    Committed jobs get their clean-up finished (or :data:`CLEANUP_UNFINISHED` when it failed again), aborting
    jobs their abort; jobs still ``writing`` are aborted
    only when ``stale_after`` is given and their record is at least that many seconds old (a younger one may
    still be running: fencing it would fail its commit, never lose data).  Then every dataset concerned gets
    its retired ledgers deleted and its unnamed shards swept.

    Every job record, and the manifest root of every dataset concerned, is parsed before anything is deleted:
    one that cannot be raises :class:`~bkspark.errors.BadMetadataError` naming its znode, and nothing changed
    (whose ledgers a job it cannot read holds, and which are committed, is unknown).
    """
    from bkspark.datasource.datasets import JobState

    cleaner = CommitCleaner(bk, registry)
    done: list[tuple[str, str]] = []
    touched: set[str] = set() if dataset is None else {dataset}
    for job_id in registry.jobs():
        record = registry.job(job_id)
        names = registry.job_datasets(job_id, record)
        if record is not None and (dataset is None or dataset in names):
            touched.update(names)
    for name in sorted(touched):
        registry.root(name)
    for job_id in registry.jobs():
        record = registry.job(job_id)
        names = registry.job_datasets(job_id, record)
        if record is None or (dataset is not None and dataset not in names):
            continue
        touched.update(names)
        if record.state is JobState.COMMITTED:
            finished = cleaner.finish_commit(job_id, names, recover_others=False)
        elif record.state is JobState.WRITING and (
            stale_after is None or (registry.job_age_seconds(job_id) or 0.0) < stale_after
        ):
            continue
        elif cleaner.abort_job(job_id, names):
            done.append((job_id, "aborted" if record.state is JobState.ABORTING else "stale writing job aborted"))
            continue
        else:  # its commit won the fence: committed after all, and forgotten once its clean-up finished
            finished = registry.job(job_id) is None
        done.append((job_id, "committed: clean-up finished" if finished else CLEANUP_UNFINISHED))
    for name in sorted(touched):
        cleaner.clean_dataset(name)
    return done


def _parents_of(bk: Any, ledgers: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The job parents (``bkspark.role`` = commit marker) that ``ledgers`` name, from their create contexts.

    For ledgers of a format-1 manifest, whose shards do not list their parents.
    """
    from bkspark.context import read_create_context
    from bkspark.errors import BadMetadataError, NoSuchLedgerMetadataError

    parents: list[tuple[int, int]] = []
    for scope_id, ledger_id in ledgers:
        try:
            create = read_create_context(bk.get_ledger_metadata(ledger_id, scope_id=scope_id).custom_metadata)
        except (NoSuchLedgerMetadataError, BadMetadataError):
            continue
        link = create.child_of_ledger if create is not None else None
        if link is None or (link.scope_id, link.ledger_id) in parents:
            continue
        try:
            role = bk.get_ledger_metadata(link.ledger_id, scope_id=link.scope_id).custom_metadata.get(TAG_ROLE)
        except NoSuchLedgerMetadataError:
            continue
        if role == JOB_PARENT_ROLE:  # never delete a parent that another application gave its ledger
            parents.append((link.scope_id, link.ledger_id))
    return parents
