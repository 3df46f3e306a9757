"""Batch writes: one ledger per task, committed as a dataset by the driver.

Each task that has rows creates a ledger tagged with the dataset, the job, the
partition and the attempt (plus a BP-44 create context, :mod:`bkspark.context`),
registers it under the job in ZooKeeper *before* writing (so a failed attempt's
ledger can still be found), appends its rows in order with pipelined adds,
closes the ledger (close context "no more data") and returns its id.  The
driver's ``commit`` publishes the committed ledgers in the dataset manifest
(the commit point), deletes ledgers of failed or retried attempts, and, for
``overwrite``, the dataset's previous ledgers (and their jobs' parents);
``abort`` deletes every ledger of the job.  Rows of attempts that did not
commit never become visible through the dataset.

Job parent (so the orphan audit sees the ledgers of a job whose driver died):
the driver reserves a ledger id for the job when it creates the writer
(:meth:`BookKeeperWriter.reserve_parent`; it travels to the tasks with the
pickled writer), every task ledger names it with ``childOfLedger``, and only
``commit`` creates that ledger (empty, closed, tagged like the job), *before*
the manifest's compare-and-set.  A job killed before its commit never creates
it, so the audit lists every ledger it left as ``BROKEN_PARENT_REF``.  See
docs/connector.md for why the parent comes before the commit point.
"""

from __future__ import annotations

import logging
import socket
import statistics
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from bkspark.datasource.options import WriteOptions

__all__ = [
    "BookKeeperWriter",
    "LedgerCommitMessage",
    "TAG_DATASET",
    "TAG_JOB",
    "TAG_PARTITION",
    "TAG_ATTEMPT",
    "TAG_APPLICATION",
    "TAG_ROLE",
    "JOB_PARENT_ROLE",
    "NO_LEDGER",
]

log = logging.getLogger(__name__)

TAG_DATASET = "bkspark.dataset"
TAG_JOB = "bkspark.job"
TAG_PARTITION = "bkspark.partition"
TAG_ATTEMPT = "bkspark.attempt"
TAG_APPLICATION = "application"
#: Custom metadata key of the job's parent ledger, whose value is ``JOB_PARENT_ROLE``.
TAG_ROLE = "bkspark.role"
JOB_PARENT_ROLE = b"job-commit-marker"

#: ``ledger_id`` of the commit message of a task that had no rows (it creates no ledger).
NO_LEDGER = -1

#: Adds in flight per task before it waits for their acknowledgements.
MAX_PENDING_ADDS = 2000

#: Who creates the connector's ledgers, in their BP-44 create context (``createdBy``).
CREATOR_ENTERPRISE = "apache-spark"
CREATOR_SYSTEM = "bkspark-connector"


@dataclass
class LedgerCommitMessage(WriterCommitMessage):
    """What one successful task wrote (``ledger_id == NO_LEDGER`` when its partition was empty)."""

    scope_id: int
    ledger_id: int
    entry_count: int
    byte_count: int
    partition_id: int
    attempt: int


def _payloads(batch: Any, index: int, is_string: bool) -> list[bytes]:
    """The payload column of an Arrow batch as bytes (strings as UTF-8, nulls as empty entries)."""
    import pyarrow as pa

    column = batch.column(index)
    if is_string:
        column = column.cast(pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary())
    return [b"" if value is None else value for value in column.to_pylist()]


class BookKeeperWriter(DataSourceArrowWriter):
    """Writes the ``payload`` column (binary or string) of every row as one entry."""

    def __init__(
        self,
        options: WriteOptions,
        payload_index: int,
        payload_is_string: bool,
        overwrite: bool,
        parent_ledger_id: int | None = None,
    ) -> None:
        self.options = options
        self.payload_index = payload_index
        self.payload_is_string = payload_is_string
        self.overwrite = overwrite
        self.job_id = uuid.uuid4().hex
        #: The job's parent ledger id (in the job's scope), reserved on the driver; None: no job parent.
        self.parent_ledger_id = parent_ledger_id

    def reserve_parent(self) -> int:
        """Reserve the job's parent ledger id (driver side, before the writer is pickled to the tasks).

        Scope 0 draws it from the cluster's id generator, so no other ledger can ever get it; a BP-35 scope has
        no generator, so it is a random 63-bit id, as the client draws for scoped ledgers.
        """
        if self.parent_ledger_id is None:
            if self.options.scope_id == 0:
                self.parent_ledger_id = int(self._client().store.generate_ledger_id())
            else:
                self.parent_ledger_id = uuid.uuid4().int & ((1 << 63) - 1)
        return self.parent_ledger_id

    def _client(self) -> Any:
        from bkspark.datasource.clients import client_conf, get_client

        return get_client(self.options.metadata_service_uri, client_conf(self.options.client_conf))

    def _registry(self, bk: Any) -> Any:
        from bkspark.datasource.clients import client_root, client_zk
        from bkspark.datasource.datasets import DatasetRegistry

        return DatasetRegistry(client_zk(bk), client_root(bk))

    def creator_application(self) -> str:
        """``createdBy``'s application: Spark's application id when the job passed it, then the write job."""
        app = self.options.application_id
        return f"{app}/job-{self.job_id}" if app else f"job-{self.job_id}"

    # -- executor -------------------------------------------------------------
    def _create_ledger(self, bk: Any, partition_id: int, attempt: int, first: list[bytes]) -> Any:
        from bkspark.context import LedgerCreateContext, create_ledger_with_context

        opts = self.options
        host = socket.gethostname()
        sizes = [len(p) for p in first]
        context = (
            LedgerCreateContext.builder()
            .created_by(CREATOR_ENTERPRISE, CREATOR_SYSTEM, self.creator_application(), host[:256])
            .part_of_data_set(opts.dataset)
            .expected_average_entry_size(int(statistics.fmean(sizes)), statistics.pstdev(sizes))
        )
        if self.parent_ledger_id is not None:
            context = context.child_of_ledger(self.parent_ledger_id, opts.scope_id)
        context = context.build()
        tags = {
            TAG_DATASET: opts.dataset.encode(),
            TAG_JOB: self.job_id.encode(),
            TAG_PARTITION: str(partition_id).encode(),
            TAG_ATTEMPT: str(attempt).encode(),
            TAG_APPLICATION: f"bkspark-spark-writer@{host}".encode(),
        }
        settings = dict(
            custom_metadata=tags,
            ensemble_size=opts.ensemble_size,
            write_quorum_size=opts.write_quorum_size,
            ack_quorum_size=opts.ack_quorum_size,
            digest_type=opts.digest_type,
            password=opts.password,
            scope_id=opts.scope_id,
        )
        if opts.scope_id == 0:
            handle = create_ledger_with_context(bk, context, **settings)
        else:
            handle = self._create_scoped(bk, context, settings)
        try:
            self._registry(bk).register(self.job_id, opts.scope_id, handle.ledger_id)
        except BaseException:
            # Not registered: nobody could find it later, so it goes now.
            self._delete(bk, [(opts.scope_id, handle.ledger_id)])
            raise
        return handle

    @staticmethod
    def _create_scoped(bk: Any, context: Any, settings: dict[str, Any]) -> Any:
        """A ledger in scope ``scopeId`` != 0: BP-35 ids are chosen by the writer (random 63-bit), not ZooKeeper."""
        from bkspark.context import create_ledger_with_context
        from bkspark.errors import LedgerExistsError

        attempts = 5
        for attempt in range(attempts):
            try:
                return create_ledger_with_context(bk, context, ledger_id=uuid.uuid4().int & ((1 << 63) - 1), **settings)
            except LedgerExistsError:
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def write(self, iterator: Iterator[Any]) -> LedgerCommitMessage:
        from pyspark import TaskContext

        from bkspark.context import LedgerCloseContext, close_with_context
        from bkspark.errors import BookieError, BookieUnavailableError, MetadataError

        context = TaskContext.get()
        partition_id = context.partitionId() if context else 0
        attempt = context.attemptNumber() if context else 0
        opts = self.options
        batches = (b for b in iterator if b.num_rows)
        first_batch = next(batches, None)
        if first_batch is None:
            return LedgerCommitMessage(opts.scope_id, NO_LEDGER, 0, 0, partition_id, attempt)
        first = _payloads(first_batch, self.payload_index, self.payload_is_string)
        bk = self._client()
        handle = self._create_ledger(bk, partition_id, attempt, first)
        entries = 0
        size = 0
        pending: list[Any] = []
        try:
            payloads: list[bytes] | None = first
            while payloads is not None:
                for value in payloads:
                    pending.append(handle.append_async(value))
                    size += len(value)
                    if len(pending) >= MAX_PENDING_ADDS:
                        for future in pending:
                            future.result()
                        pending.clear()
                entries += len(payloads)
                batch = next(batches, None)
                payloads = None if batch is None else _payloads(batch, self.payload_index, self.payload_is_string)
            for future in pending:
                future.result()
            close_with_context(bk, handle, LedgerCloseContext.builder().because_no_more_data().build())
        except BaseException as exc:
            log.warning(
                "task %s attempt %s failed writing ledger %s; the job's commit or abort deletes it",
                partition_id, attempt, handle.ledger_id,
            )
            self._close_abnormally(bk, handle, exc)
            if isinstance(exc, (BookieError, BookieUnavailableError, MetadataError)):
                from bkspark.datasource.clients import client_conf, evict_client

                evict_client(opts.metadata_service_uri, client_conf(opts.client_conf))  # the next task starts clean
            raise
        return LedgerCommitMessage(opts.scope_id, handle.ledger_id, entries, size, partition_id, attempt)

    @staticmethod
    def _close_abnormally(bk: Any, handle: Any, error: BaseException) -> None:
        """Best effort: close the failed attempt's ledger with a close context that says why.

        The context expects the ledger's deletion at once: the job's commit or abort deletes it, and if the
        driver dies before either runs, the orphan audit reports it as overdue for deletion.
        """
        from datetime import datetime, timezone

        from bkspark.context import MAX_ERROR_MESSAGE_CHARS, LedgerCloseContext, close_with_context

        message = f"{type(error).__name__}: {error}"[:MAX_ERROR_MESSAGE_CHARS]
        context = (
            LedgerCloseContext.builder()
            .closing_abnormally(message)
            .expect_delete_after(datetime.now(timezone.utc))
            .build()
        )
        try:
            close_with_context(bk, handle, context)
        except Exception:  # noqa: BLE001 - the task's own error is the one to report
            log.debug("could not close ledger %s after a failed write", handle.ledger_id, exc_info=True)

    # -- driver ------------------------------------------------------------
    def commit(self, messages: list[Any]) -> None:
        """Create the job's parent, then publish the committed ledgers (the commit point), then clean up.

        The parent is created *before* the manifest's compare-and-set: if the driver dies between the two, the
        job's ledgers have a parent but no manifest names them (a leak that ``<root>/bkspark/jobs/<job>`` still
        lists), whereas the other order could leave committed data reported as orphans, which an operator
        deleting orphans would lose.  A job that committed no ledger creates no parent.
        """
        bk = self._client()
        registry = self._registry(bk)
        committed = [
            (m.scope_id, m.ledger_id)
            for m in messages
            if isinstance(m, LedgerCommitMessage) and m.ledger_id != NO_LEDGER
        ]
        if committed and self.parent_ledger_id is not None:
            self._create_parent(bk)
        _, dropped = registry.commit(self.options.dataset, committed, replace=self.overwrite)
        keep = set(committed)
        leftovers = [pair for pair in registry.job_ledgers(self.job_id) if pair not in keep]
        dropped = [pair for pair in dropped if pair not in keep]
        # Overwrite: the manifest is now exactly this job's ledgers, so no committed ledger names the parents of
        # the dropped ones any more; they go right after their children (children first, so a crash in between
        # leaves only garbage reported as orphans, never a committed ledger).
        old_parents = self._parents_of(bk, dropped) if self.parent_ledger_id is not None else []
        self._delete(bk, leftovers + dropped)
        self._delete(bk, old_parents)
        registry.forget_job(self.job_id)

    def _create_parent(self, bk: Any) -> None:
        """Create and close the job's empty parent ledger (the job's commit marker), with the reserved id."""
        from bkspark.context import LedgerCloseContext, LedgerCreateContext, close_with_context, create_ledger_with_context
        from bkspark.errors import LedgerExistsError

        opts = self.options
        assert self.parent_ledger_id is not None
        context = (
            LedgerCreateContext.builder()
            .created_by(
                CREATOR_ENTERPRISE, CREATOR_SYSTEM, f"{self.creator_application()}/commit-marker",
                socket.gethostname()[:256],
            )
            .part_of_data_set(opts.dataset)
            .expected_max_entries(0)
            .expected_max_length(0)
            .build()
        )
        tags = {
            TAG_DATASET: opts.dataset.encode(),
            TAG_JOB: self.job_id.encode(),
            TAG_ROLE: JOB_PARENT_ROLE,
            TAG_APPLICATION: f"bkspark-spark-writer@{socket.gethostname()}".encode(),
        }
        try:
            handle = create_ledger_with_context(
                bk, context, custom_metadata=tags, ledger_id=self.parent_ledger_id, scope_id=opts.scope_id,
                ensemble_size=opts.ensemble_size, write_quorum_size=opts.write_quorum_size,
                ack_quorum_size=opts.ack_quorum_size, digest_type=opts.digest_type, password=opts.password,
            )
        except LedgerExistsError:
            existing = bk.get_ledger_metadata(self.parent_ledger_id, scope_id=opts.scope_id)
            if existing.custom_metadata.get(TAG_JOB) != self.job_id.encode():
                raise  # the reserved id was taken by someone else: committing would hang our ledgers on theirs
            return  # an earlier commit attempt of this job created it
        close_with_context(bk, handle, LedgerCloseContext.builder().because_no_more_data().build())

    @staticmethod
    def _parents_of(bk: Any, ledgers: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The job parents (``bkspark.role`` = commit marker) that ``ledgers`` name, read before they go."""
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

    def abort(self, messages: list[Any]) -> None:
        bk = self._client()
        registry = self._registry(bk)
        created = set(registry.job_ledgers(self.job_id))
        created.update(
            (m.scope_id, m.ledger_id)
            for m in messages
            if isinstance(m, LedgerCommitMessage) and m.ledger_id != NO_LEDGER
        )
        self._delete(bk, sorted(created))
        if self.parent_ledger_id is not None:
            # Normally never created; a commit that failed after creating it is followed by this abort.
            self._delete(bk, [(self.options.scope_id, self.parent_ledger_id)])
        registry.forget_job(self.job_id)

    @staticmethod
    def _delete(bk: Any, ledgers: list[tuple[int, int]]) -> None:
        from bkspark.errors import NoSuchLedgerMetadataError

        for scope_id, ledger_id in ledgers:
            try:
                bk.delete_ledger(ledger_id, scope_id=scope_id)
            except NoSuchLedgerMetadataError:
                pass
