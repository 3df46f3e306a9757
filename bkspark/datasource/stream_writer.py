"""``df.writeStream.format("bookkeeper")``: an exactly-once sink into a dataset.

Each micro-batch is one write job of the dataset's commit protocol (docs/connector.md), driven by what Spark
hands each side:

* Tasks (executors) do not get the batch id as an argument; Spark's task local properties carry it
  (``streaming.sql.batchId``) and the query run (``spark.jobGroup.id``, the run id).  A task names its job
  ``stream-<query>-<batch>-<run>``; the first task of the job creates its record with a freshly reserved parent
  ledger id (the others read it), and each task writes its rows into a ledger of its own, a child of that parent,
  registered under the job before the first entry (the batch writer's ``write``).
* The driver's ``commit(messages, batchId)`` publishes the batch's ledgers, records ``batchId`` under the
  query's key (``stream-<query>``, ``<query>`` a digest of the checkpoint location) and creates the job's parent
  ledger, all in the same ZooKeeper ``multi``.  A batch committed again (Spark crashed after our commit and
  before its own ``commits/N``, then replayed the batch) publishes nothing: its new ledgers are duplicates and are
  deleted at once.  Then every job of an earlier run of the query for this batch or an earlier one (a run that
  died) is finished or aborted: a restart from the checkpoint removes what the dead run left.
* ``abort(messages, batchId)`` fences and deletes the batch's jobs of every run.

So, as for a batch job, the parent exists exactly when the batch committed: the ledgers a dead run left name a
missing parent, and the orphan audit reports them (``BROKEN_PARENT_REF``) until the restarted query's next
commit, its ``abort`` or ``bkspark shell recoverjobs`` removes them.

Output modes: ``append`` (each batch's rows are added) and ``complete`` (each batch's rows replace the dataset's,
atomically: the commit's ``multi`` publishes them as an overwrite does, and the clean-up deletes the replaced
ledgers and their parents).  Spark itself refuses ``update`` for every Python data source.  See
docs/streaming.md.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any, Iterator

from bkspark.datasource.options import WriteOptions, parse_write_options
from bkspark.datasource.spark_features import StreamArrowWriterBase
from bkspark.datasource.writer import (
    NO_LEDGER,
    BookKeeperWriter,
    LedgerCommitMessage,
    RoutedCommitMessage,
    RowColumnIndexes,
    ledgers_by_dataset,
)
from bkspark.errors import InvalidOptionError

__all__ = [
    "BookKeeperStreamWriter",
    "StreamCommitMessage",
    "parse_stream_write_options",
    "query_writer",
    "batch_job_id",
    "parse_batch_job_id",
    "BATCH_ID_PROPERTY",
]

log = logging.getLogger(__name__)

#: Spark's task local property holding the micro-batch id (``MicroBatchExecution.BATCH_ID_KEY``).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
#: Spark's task local property holding the job group, which a streaming query sets to its run id.
RUN_ID_PROPERTY = "spark.jobGroup.id"


def parse_stream_write_options(options: Any, *, routed: bool = False) -> tuple[WriteOptions, str]:
    """The write options and the checkpoint location (the query's identity); ``routed``: the DataFrame has a
    ``dataset`` column, so the ``dataset`` option may be absent."""
    opts = {str(k).lower(): v for k, v in options.items() if v is not None}
    checkpoint = (opts.get("checkpointlocation") or "").strip()
    if not checkpoint:
        raise InvalidOptionError(
            "[BOOKKEEPER_MISSING_OPTION] the bookkeeper sink needs a checkpoint location (it is the query's identity "
            "for exactly-once commits): .option('checkpointLocation', '/path/to/checkpoint')"
        )
    return parse_write_options(opts, stream=True, routed=routed), checkpoint


def query_writer(checkpoint_location: str) -> str:
    """The commit-key writer of a query: stable across restarts from the same checkpoint."""
    digest = hashlib.sha256(checkpoint_location.rstrip("/").encode("utf-8")).hexdigest()[:20]
    return f"stream-{digest}"


def batch_job_id(writer: str, batch_id: int, run_id: str) -> str:
    """The write job of one micro-batch of one query run: ``<writer>-<batch>-<run>``."""
    return f"{writer}-{batch_id}-{run_id}"


def parse_batch_job_id(writer: str, job_id: str) -> tuple[int, str] | None:
    """``(batch, run)`` of a job of this query (``writer``), None for any other job."""
    head = f"{writer}-"
    if not job_id.startswith(head):
        return None
    batch, sep, run = job_id[len(head):].partition("-")
    if not (sep and batch.isdigit() and run):
        return None
    return int(batch), run


@dataclass
class StreamCommitMessage(LedgerCommitMessage):
    """A task's ledger, with the micro-batch job it belongs to."""

    job_id: str = ""


@dataclass
class StreamRoutedCommitMessage(RoutedCommitMessage):
    """A routed task's ledgers (one per dataset its rows named), with the micro-batch job they belong to."""

    job_id: str = ""


def _job_of(message: Any) -> str | None:
    """The micro-batch job of a task's message that holds ledgers (None: an empty task's, or a failed one)."""
    if isinstance(message, StreamCommitMessage) and message.ledger_id != NO_LEDGER:
        return message.job_id
    if isinstance(message, StreamRoutedCommitMessage) and message.ledgers:
        return message.job_id
    return None


class _TaskWriter(BookKeeperWriter):
    """The batch writer's task side, under a job id the task derives from Spark's local properties."""

    def __init__(
        self, options: WriteOptions, payload_index: int, payload_is_string: bool, writer: str, complete: bool = False,
        row_columns: RowColumnIndexes = RowColumnIndexes(),
    ) -> None:
        super().__init__(options, payload_index, payload_is_string, overwrite=complete, row_columns=row_columns)
        self.writer = writer

    def write(self, iterator: Iterator[Any]) -> "StreamCommitMessage | StreamRoutedCommitMessage":
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        run_id = (context.getLocalProperty(RUN_ID_PROPERTY) if context else None) or "norun"
        if batch_id is None:
            raise InvalidOptionError("[BOOKKEEPER_NOT_STREAMING] the bookkeeper stream writer runs only in a streaming query")
        return self.write_batch(iterator, int(batch_id), run_id)

    def write_batch(
        self, iterator: Iterator[Any], batch_id: int, run_id: str
    ) -> "StreamCommitMessage | StreamRoutedCommitMessage":
        """One task of micro-batch ``batch_id`` of run ``run_id``: join (or begin) the batch's job, write a ledger."""
        self.job_id = batch_job_id(self.writer, batch_id, run_id)
        batches = iter(iterator)
        first = next((b for b in batches if b.num_rows), None)
        if first is not None:
            self.parent_ledger_id = self._join_job()
        chained = iter(()) if first is None else _prepend(first, batches)
        message = super().write(chained)
        if isinstance(message, RoutedCommitMessage):
            return StreamRoutedCommitMessage(message.partition_id, message.attempt, message.ledgers, self.job_id)
        return StreamCommitMessage(
            message.scope_id, message.ledger_id, message.entry_count, message.byte_count,
            message.partition_id, message.attempt, self.job_id,
        )

    def _join_job(self) -> int | None:
        """The job's parent ledger id: the first task creates the record with a new one, the others read it."""
        import time

        from bkspark.datasource.datasets import JobGoneError, JobRecord, JobState
        from bkspark.datasource.faults import fault_point
        from bkspark.datasource.writer import reserve_parent_id

        bk = self._client()
        registry = self._registry(bk)
        record = registry.job(self.job_id)
        if record is None:
            scope_id = self.options.scope_id
            fresh = JobRecord(
                state=JobState.WRITING, dataset=self.options.dataset, overwrite=self.overwrite,
                parent=(scope_id, reserve_parent_id(bk, scope_id)), created_ms=int(time.time() * 1000),
                routed=self.routed,
            )
            registry.begin_job(self.job_id, fresh)  # a no-op when another task of the batch won the race
            fault_point("job.begun")
            record = registry.job(self.job_id)
        if record is None or record.state is not JobState.WRITING:
            raise JobGoneError(f"write job {self.job_id} was aborted or finished before this task could write")
        return None if record.parent is None else record.parent[1]


def _prepend(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


class BookKeeperStreamWriter(StreamArrowWriterBase):
    """Writes every micro-batch into a dataset exactly once (see the module's docstring)."""

    def __init__(
        self, options: WriteOptions, payload_index: int, payload_is_string: bool, checkpoint: str,
        complete: bool = False, row_columns: RowColumnIndexes = RowColumnIndexes(),
    ) -> None:
        self.options = options
        self.writer = query_writer(checkpoint)
        #: Output mode complete: each batch replaces the dataset's rows (else: appends to them).
        self.complete = complete
        self._tasks = _TaskWriter(options, payload_index, payload_is_string, self.writer, complete, row_columns)

    def write(self, iterator: Iterator[Any]) -> "StreamCommitMessage | StreamRoutedCommitMessage":
        return self._tasks.write(iterator)

    def _registry(self) -> tuple[Any, Any]:
        bk = self._tasks._client()
        return bk, self._tasks._registry(bk)

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 - Spark's name
        """Publish the batch with the key (query, batchId) in one ``multi``; a replay publishes nothing.

        Then the jobs that earlier, dead runs of the query left for this batch or an earlier one are finished or
        aborted (their ledgers deleted unless a manifest names them).
        """
        from bkspark.datasource.cleanup import CommitCleaner

        batch = int(batchId)
        jobs = sorted({job for job in map(_job_of, messages) if job is not None})
        if len(jobs) > 1:
            raise InvalidOptionError(f"[BOOKKEEPER_SINK] batch {batch} was written by several runs {jobs}: not committing")
        bk, registry = self._registry()
        cleaner = CommitCleaner(bk, registry)
        if jobs:
            self._publish(bk, registry, cleaner, jobs[0], ledgers_by_dataset(messages, self.options.dataset), batch)
        elif self.complete and not self._tasks.routed:  # a routed batch without rows names no dataset to empty
            runs = sorted({m.job_id for m in messages if isinstance(m, StreamCommitMessage) and m.job_id})
            self._publish_nothing(registry, cleaner, runs[0] if runs else batch_job_id(self.writer, batch, "driver"), batch)
        # An empty append batch publishes nothing: Spark records the batch itself.
        self._remove_dead_runs(registry, cleaner, batch, keep=set(jobs))

    def _publish(
        self, bk: Any, registry: Any, cleaner: Any, job_id: str, by_dataset: dict[str, list[tuple[int, int]]], batch: int
    ) -> None:
        """The commit point of a batch with rows: ledgers (of every dataset a routed batch names), key and the job's
        parent in one ``multi``."""
        import copy

        from bkspark.datasource.datasets import CommitKey, JobState, PublishTarget
        from bkspark.datasource.faults import fault_point

        names = sorted(by_dataset)
        ledgers = [ledger for name in names for ledger in by_dataset[name]]
        record = registry.job(job_id)
        parent = record.parent if record is not None else None
        extra = []
        if parent is not None and record is not None and record.state is JobState.WRITING:
            marker = copy.copy(self._tasks)  # the parent's tags and create context name this batch's job
            marker.job_id = job_id
            extra.append(marker._parent_znode(bk, ledgers, parent, names))
        results = registry.publish_many(
            [PublishTarget(name, tuple(by_dataset[name]), self.complete) for name in names],
            job_id=job_id, key=CommitKey(self.writer, batch), parents=[parent] if parent else [], extra_creates=extra,
            before_multi=lambda: fault_point("commit.shards-written"), ledger_path=bk.store.ledger_path,
        )
        if results[0].already:
            log.info("batch %s of %s was committed before: its replayed ledgers %s are duplicates, deleting them",
                     batch, self.writer, ledgers)
            cleaner.abort_job(job_id, names, extra_ledgers=ledgers)
        else:
            cleaner.finish_commit(job_id, names, extra_ledgers=ledgers)

    def _publish_nothing(self, registry: Any, cleaner: Any, job_id: str, batch: int) -> None:
        """Output mode complete, a batch without rows: the dataset becomes empty (atomically, exactly once)."""
        import time

        from bkspark.datasource.datasets import CommitKey, JobRecord, JobState

        dataset = self.options.dataset
        registry.begin_job(job_id, JobRecord(JobState.WRITING, dataset, overwrite=True, created_ms=int(time.time() * 1000)))
        result = registry.publish(dataset, [], replace_all=True, job_id=job_id, key=CommitKey(self.writer, batch))
        if result.already:
            cleaner.abort_job(job_id, dataset)
        else:
            cleaner.finish_commit(job_id, dataset)

    def _remove_dead_runs(self, registry: Any, cleaner: Any, batch: int, keep: set[str]) -> None:
        """Finish or abort the jobs of other runs of this query for batches up to ``batch``.

        Such a job belongs to a run that died (one checkpoint has one live run, and Spark starts batch N only
        after N - 1 ended): a ``writing`` one can never publish any more (its batch's key is recorded), a
        ``committed`` one only needs its clean-up.  Errors are logged, not raised: the batch is committed.
        """
        for job_id in registry.jobs():
            parsed = parse_batch_job_id(self.writer, job_id)
            if parsed is None or job_id in keep or parsed[0] > batch:
                continue
            try:
                record = registry.job(job_id)
                cleaner.abort_job(job_id, registry.job_datasets(job_id, record) or self.options.dataset)
                log.info("removed job %s that a dead run of %s left", job_id, self.writer)
            except Exception as exc:  # noqa: BLE001 - after the commit point nothing may fail the batch
                log.warning("could not remove job %s that a dead run left (recoverjobs will): %s", job_id, exc)

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        """Fence and delete every job of this batch (any run): none of it is committed."""
        from bkspark.datasource.cleanup import CommitCleaner

        bk, registry = self._registry()
        by_dataset = ledgers_by_dataset(messages, self.options.dataset)
        ledgers = [ledger for found in by_dataset.values() for ledger in found]
        cleaner = CommitCleaner(bk, registry)
        for job_id in registry.jobs():
            parsed = parse_batch_job_id(self.writer, job_id)
            if parsed is not None and parsed[0] == int(batchId):
                names = set(by_dataset) | set(registry.job_datasets(job_id, registry.job(job_id)))
                cleaner.abort_job(job_id, sorted(names) or self.options.dataset, extra_ledgers=ledgers)
