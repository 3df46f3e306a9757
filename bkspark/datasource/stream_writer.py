"""``df.writeStream.format("bookkeeper")``: an exactly-once sink into a dataset.

Each micro-batch is one write job of the dataset's commit protocol (docs/connector.md), driven by what Spark
hands each side:

* Tasks (executors) do not get the batch id as an argument; Spark's task local properties carry it
  (``streaming.sql.batchId``) and the query run (``spark.jobGroup.id``, the run id).  A task names its job
  ``stream-<query>-<batch>-<run>``, creates the job's record if it is the first (idempotent), and writes its rows
  into a ledger of its own, registered under the job before the first entry (the batch writer's ``write``).
* The driver's ``commit(messages, batchId)`` publishes the batch's ledgers and records ``batchId`` under the
  query's key (``stream-<query>``, ``<query>`` a digest of the checkpoint location) in the same ZooKeeper
  ``multi``.  A batch committed again (Spark crashed after our commit and before its own ``commits/N``, then
  replayed the batch) publishes nothing: its new ledgers are duplicates and are deleted at once.
* ``abort(messages, batchId)`` fences and deletes the batch's jobs of every run.  A run that died before its
  commit or abort leaves a job in state ``writing``: ``bkspark shell recoverjobs`` removes it (stream batches
  have no job parent ledger, so the orphan audit does not flag those ledgers).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceStreamArrowWriter

from bkspark.datasource.options import WriteOptions, parse_write_options
from bkspark.datasource.writer import NO_LEDGER, BookKeeperWriter, LedgerCommitMessage
from bkspark.errors import InvalidOptionError

__all__ = ["BookKeeperStreamWriter", "StreamCommitMessage", "parse_stream_write_options", "query_writer", "BATCH_ID_PROPERTY"]

log = logging.getLogger(__name__)

#: Spark's task local property holding the micro-batch id (``MicroBatchExecution.BATCH_ID_KEY``).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
#: Spark's task local property holding the job group, which a streaming query sets to its run id.
RUN_ID_PROPERTY = "spark.jobGroup.id"
_SINK_ONLY_KEYS = {"checkpointlocation", "queryname"}


def parse_stream_write_options(options: Any) -> tuple[WriteOptions, str]:
    """The write options and the checkpoint location (the query's identity)."""
    opts = {str(k).lower(): v for k, v in options.items() if v is not None}
    checkpoint = (opts.get("checkpointlocation") or "").strip()
    if not checkpoint:
        raise InvalidOptionError(
            "[BOOKKEEPER_MISSING_OPTION] the bookkeeper sink needs a checkpoint location (it is the query's identity "
            "for exactly-once commits): .option('checkpointLocation', '/path/to/checkpoint')"
        )
    return parse_write_options({k: v for k, v in opts.items() if k not in _SINK_ONLY_KEYS}), checkpoint


def query_writer(checkpoint_location: str) -> str:
    """The commit-key writer of a query: stable across restarts from the same checkpoint."""
    digest = hashlib.sha256(checkpoint_location.rstrip("/").encode("utf-8")).hexdigest()[:20]
    return f"stream-{digest}"


def _job_prefix(writer: str, batch_id: int) -> str:
    return f"{writer}-{batch_id}-"


@dataclass
class StreamCommitMessage(LedgerCommitMessage):
    """A task's ledger, with the micro-batch job it belongs to."""

    job_id: str = ""


class _TaskWriter(BookKeeperWriter):
    """The batch writer's task side, under a job id the task derives from Spark's local properties."""

    def __init__(self, options: WriteOptions, payload_index: int, payload_is_string: bool, writer: str) -> None:
        super().__init__(options, payload_index, payload_is_string, overwrite=False)
        self.writer = writer

    def write(self, iterator: Iterator[Any]) -> StreamCommitMessage:
        import time

        from pyspark import TaskContext

        from bkspark.datasource.datasets import JobRecord, JobState

        context = TaskContext.get()
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        run_id = (context.getLocalProperty(RUN_ID_PROPERTY) if context else None) or "norun"
        if batch_id is None:
            raise InvalidOptionError("[BOOKKEEPER_NOT_STREAMING] the bookkeeper stream writer runs only in a streaming query")
        self.job_id = f"{_job_prefix(self.writer, int(batch_id))}{run_id}"
        batches = iter(iterator)
        first = next((b for b in batches if b.num_rows), None)
        if first is not None:
            bk = self._client()
            record = JobRecord(state=JobState.WRITING, dataset=self.options.dataset, created_ms=int(time.time() * 1000))
            self._registry(bk).begin_job(self.job_id, record)  # the first task of the batch creates it
        chained = iter(()) if first is None else _prepend(first, batches)
        message = super().write(chained)
        return StreamCommitMessage(
            message.scope_id, message.ledger_id, message.entry_count, message.byte_count,
            message.partition_id, message.attempt, self.job_id,
        )


def _prepend(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


class BookKeeperStreamWriter(DataSourceStreamArrowWriter):
    """Appends every micro-batch to a dataset exactly once (see the module's docstring)."""

    def __init__(self, options: WriteOptions, payload_index: int, payload_is_string: bool, checkpoint: str) -> None:
        self.options = options
        self.writer = query_writer(checkpoint)
        self._tasks = _TaskWriter(options, payload_index, payload_is_string, self.writer)

    def write(self, iterator: Iterator[Any]) -> StreamCommitMessage:
        return self._tasks.write(iterator)

    def _registry(self) -> tuple[Any, Any]:
        bk = self._tasks._client()
        return bk, self._tasks._registry(bk)

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 - Spark's name
        """Publish the batch's ledgers with the key (query, batchId) in one ``multi``; a replay publishes nothing."""
        from bkspark.datasource.datasets import CommitKey
        from bkspark.datasource.writer import CommitCleaner

        ledgers = [(m.scope_id, m.ledger_id) for m in messages if isinstance(m, StreamCommitMessage) and m.ledger_id != NO_LEDGER]
        jobs = sorted({m.job_id for m in messages if isinstance(m, StreamCommitMessage) and m.ledger_id != NO_LEDGER})
        if not jobs:
            return  # an empty batch: nothing to publish, and Spark records the batch itself
        if len(jobs) != 1:
            raise InvalidOptionError(f"[BOOKKEEPER_SINK] batch {batchId} was written by several runs {jobs}: not committing")
        job_id = jobs[0]
        bk, registry = self._registry()
        dataset = self.options.dataset
        result = registry.publish(
            dataset, ledgers, replace_all=False, job_id=job_id, key=CommitKey(self.writer, int(batchId)),
        )
        cleaner = CommitCleaner(bk, registry)
        if result.already:
            log.info("batch %s of %s was committed before: its replayed ledgers %s are duplicates, deleting them",
                     batchId, self.writer, ledgers)
            cleaner.abort_job(job_id, dataset, extra_ledgers=ledgers)
        else:
            cleaner.finish_commit(job_id, dataset, extra_ledgers=ledgers)

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        """Fence and delete every job of this batch (any run): none of it is committed."""
        from bkspark.datasource.writer import CommitCleaner

        bk, registry = self._registry()
        prefix = _job_prefix(self.writer, int(batchId))
        ledgers = [(m.scope_id, m.ledger_id) for m in messages if isinstance(m, StreamCommitMessage) and m.ledger_id != NO_LEDGER]
        cleaner = CommitCleaner(bk, registry)
        for job_id in registry.jobs():
            if job_id.startswith(prefix):
                cleaner.abort_job(job_id, self.options.dataset, extra_ledgers=ledgers)
