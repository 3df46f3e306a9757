"""Batch writes: one ledger per task, committed as a dataset by the driver.

Each task creates a ledger tagged with the dataset, the job, the partition and
the attempt, registers it under the job in ZooKeeper *before* writing (so a
failed attempt's ledger can still be found), appends its rows in order with
pipelined adds, closes the ledger and returns its id.  The driver's ``commit``
publishes the committed ledgers in the dataset manifest (the commit point),
deletes ledgers of failed or retried attempts, and, for ``overwrite``, the
dataset's previous ledgers; ``abort`` deletes every ledger of the job.
Delivery is exactly-once per committed job: rows of attempts that did not
commit never become visible through the dataset.
"""

from __future__ import annotations

import logging
import socket
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from bkspark.datasource.options import WriteOptions

__all__ = ["BookKeeperWriter", "LedgerCommitMessage", "TAG_DATASET", "TAG_JOB", "TAG_PARTITION", "TAG_ATTEMPT"]

log = logging.getLogger(__name__)

TAG_DATASET = "bkspark.dataset"
TAG_JOB = "bkspark.job"
TAG_PARTITION = "bkspark.partition"
TAG_ATTEMPT = "bkspark.attempt"
TAG_APPLICATION = "application"

#: Adds in flight per task before it waits for acknowledgements.
MAX_PENDING_ADDS = 2000


@dataclass
class LedgerCommitMessage(WriterCommitMessage):
    """What one successful task wrote."""

    scope_id: int
    ledger_id: int
    entry_count: int
    byte_count: int
    partition_id: int
    attempt: int


class BookKeeperWriter(DataSourceArrowWriter):
    """Writes the ``payload`` column (binary or string) of every row as one entry."""

    def __init__(self, options: WriteOptions, payload_index: int, payload_is_string: bool, overwrite: bool) -> None:
        self.options = options
        self.payload_index = payload_index
        self.payload_is_string = payload_is_string
        self.overwrite = overwrite
        self.job_id = uuid.uuid4().hex

    def _client(self) -> Any:
        from bkspark.datasource.clients import client_conf, get_client

        return get_client(self.options.metadata_service_uri, client_conf(self.options.client_conf))

    # -- executor -------------------------------------------------------------
    def write(self, iterator: Iterator[Any]) -> LedgerCommitMessage:
        from pyspark import TaskContext

        from bkspark.datasource.datasets import DatasetRegistry

        context = TaskContext.get()
        partition_id = context.partitionId() if context else 0
        attempt = context.attemptNumber() if context else 0
        opts = self.options
        bk = self._client()
        tags = {
            TAG_DATASET: opts.dataset.encode(),
            TAG_JOB: self.job_id.encode(),
            TAG_PARTITION: str(partition_id).encode(),
            TAG_ATTEMPT: str(attempt).encode(),
            TAG_APPLICATION: f"bkspark-spark-writer@{socket.gethostname()}".encode(),
        }
        handle = bk.create_ledger(
            ensemble_size=opts.ensemble_size,
            write_quorum_size=opts.write_quorum_size,
            ack_quorum_size=opts.ack_quorum_size,
            digest_type=opts.digest_type,
            password=opts.password,
            custom_metadata=tags,
            scope_id=opts.scope_id,
        )
        DatasetRegistry(bk.zk, bk.ledgers_root).register(self.job_id, opts.scope_id, handle.ledger_id)
        entries = 0
        size = 0
        pending: list[Any] = []
        try:
            for batch in iterator:
                column = batch.column(self.payload_index)
                for value in column.to_pylist():
                    if value is None:
                        value = b""
                    elif self.payload_is_string:
                        value = value.encode("utf-8")
                    pending.append(handle.append_async(value))
                    entries += 1
                    size += len(value)
                    if len(pending) >= MAX_PENDING_ADDS:
                        for future in pending:
                            future.result()
                        pending.clear()
            for future in pending:
                future.result()
            handle.close()
        except BaseException:
            log.warning("task %s attempt %s failed writing ledger %s; the job's commit or abort deletes it",
                        partition_id, attempt, handle.ledger_id)
            raise
        return LedgerCommitMessage(opts.scope_id, handle.ledger_id, entries, size, partition_id, attempt)

    # -- driver ------------------------------------------------------------
    def commit(self, messages: list[Any]) -> None:
        from bkspark.datasource.datasets import DatasetRegistry

        bk = self._client()
        registry = DatasetRegistry(bk.zk, bk.ledgers_root)
        committed = [(m.scope_id, m.ledger_id) for m in messages if isinstance(m, LedgerCommitMessage)]
        _, dropped = registry.commit(self.options.dataset, committed, replace=self.overwrite)
        leftovers = [pair for pair in registry.job_ledgers(self.job_id) if pair not in set(committed)]
        self._delete(bk, leftovers + dropped)
        registry.forget_job(self.job_id)

    def abort(self, messages: list[Any]) -> None:
        from bkspark.datasource.datasets import DatasetRegistry

        bk = self._client()
        registry = DatasetRegistry(bk.zk, bk.ledgers_root)
        created = set(registry.job_ledgers(self.job_id))
        created.update((m.scope_id, m.ledger_id) for m in messages if isinstance(m, LedgerCommitMessage))
        self._delete(bk, sorted(created))
        registry.forget_job(self.job_id)

    @staticmethod
    def _delete(bk: Any, ledgers: list[tuple[int, int]]) -> None:
        from bkspark.errors import NoSuchLedgerMetadataError

        for scope_id, ledger_id in ledgers:
            try:
                bk.delete_ledger(ledger_id, scope_id=scope_id)
            except NoSuchLedgerMetadataError:
                pass
