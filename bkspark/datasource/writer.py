"""Batch writes: one ledger per task, committed as a dataset by the driver in one ZooKeeper ``multi``.

The protocol is the state machine of docs/connector.md ("The commit protocol"):

- driver, ``writer()`` (:meth:`BookKeeperWriter.reserve_parent`): reserve the job's parent ledger id and create
  the job's record ``<root>/bkspark/jobs/<job>`` in state ``writing``;
- tasks: create a ledger tagged with the dataset, job, partition and attempt (and a BP-44 create context whose
  ``childOfLedger`` is the job's parent), register it under the job *before* writing, append, close;
- driver, ``commit``: write the new manifest shards, then one ``multi`` publishes the manifest root, turns the
  job's record ``committed`` and creates the job's parent ledger (an empty closed ledger): **the commit point**.
  After it the clean-up (:mod:`bkspark.datasource.cleanup`: other attempts' ledgers, the ledgers an overwrite
  replaced, the job's record) is retried a bounded number of times and then left to the next job or
  ``bkspark shell recoverjobs``; it never raises, so Spark never turns it into an abort;
- driver, ``abort``: fence the job (``writing`` -> ``aborting``, compare-and-set: its publish can no longer
  succeed), delete its ledgers that no manifest names, forget it.  An abort that finds the job ``committed``
  finishes the commit's clean-up instead.

Every step calls :func:`bkspark.datasource.faults.fault_point` once done, so tests can fail or kill the driver
between any two steps.
"""

from __future__ import annotations

import logging
import socket
import statistics
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from bkspark.client.payloads import PackedPayloads
from bkspark.datasource.faults import fault_point
from bkspark.datasource.packing import (
    ENTRY_FORMAT_KEY,
    HEADER_BYTES,
    ROW_OVERHEAD_BYTES,
    ROWS_V1,
    ROWS_V2,
    BinaryColumn,
    RowColumns,
    pack_row_columns,
    pack_rows,
)
from bkspark.datasource.options import WriteOptions
from bkspark.protocol.values import INT64_MAX

__all__ = [
    "BookKeeperWriter",
    "LedgerCommitMessage",
    "RoutedCommitMessage",
    "TAG_DATASET",
    "TAG_DATASETS",
    "TAG_JOB",
    "TAG_PARTITION",
    "TAG_ATTEMPT",
    "TAG_APPLICATION",
    "TAG_ROLE",
    "JOB_PARENT_ROLE",
    "NO_LEDGER",
    "reserve_parent_id",
]

log = logging.getLogger(__name__)

TAG_DATASET = "bkspark.dataset"
TAG_JOB = "bkspark.job"
TAG_PARTITION = "bkspark.partition"
TAG_ATTEMPT = "bkspark.attempt"
TAG_APPLICATION = "application"
#: Custom metadata key of a routed job's parent ledger: the datasets its children went to, comma-separated.
TAG_DATASETS = "bkspark.datasets"
#: Custom metadata key of the job's parent ledger, whose value is ``JOB_PARENT_ROLE``.
TAG_ROLE = "bkspark.role"
JOB_PARENT_ROLE = b"job-commit-marker"

#: ``ledger_id`` of the commit message of a task that had no rows (it creates no ledger).
NO_LEDGER = -1

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


#: Entries per bulk append: one hand-over to the client's loop each, several in flight within the client's
#: ``maxPendingAdds`` (docs/client.md, "How many adds in flight").
BULK_APPEND_ENTRIES = 500


def large_kind(arrow_type: Any) -> bool:
    """Whether an Arrow type is large_binary or large_string (64-bit offsets)."""
    import pyarrow as pa

    return bool(pa.types.is_large_binary(arrow_type) or pa.types.is_large_string(arrow_type))


def _payload_buffers(batch: Any, index: int, is_string: bool) -> tuple[Any, bytes]:
    """The payload column of an Arrow batch as ``(offsets, data)``: numpy int64 offsets from 0 (one more than
    rows) into one copy of the column's data buffer (strings as UTF-8, nulls as empty payloads).

    Straight from the column's offsets and data buffers: no Arrow scalar per row, as ``to_pylist`` makes.
    """
    import numpy as np
    import pyarrow as pa

    column = batch.column(index)
    rows = len(column)
    if not (pa.types.is_binary(column.type) or pa.types.is_string(column.type) or large_kind(column.type)):
        column = column.cast(pa.large_binary())  # e.g. a view or fixed-size type: to the layout read below
    if column.null_count:
        column = column.fill_null(b"" if not is_string else "")
    large = large_kind(column.type)
    _validity, offsets_buffer, data_buffer = column.buffers()[:3]
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if large else np.int32)[
        column.offset : column.offset + rows + 1
    ].astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    data = b"" if data_buffer is None else memoryview(data_buffer)[start:end].tobytes()
    if start:
        offsets -= start
    return offsets, data


def _payloads(batch: Any, index: int, is_string: bool) -> tuple[PackedPayloads, int]:
    """The payload column of an Arrow batch as one entry per row, and their bytes: :func:`_payload_buffers`'
    copy and offsets as they are, with no bytes object per row (the client frames them from the buffer)."""
    offsets, data = _payload_buffers(batch, index, is_string)
    return PackedPayloads(data, offsets), len(data)


def _packed_entries(batch: Any, index: int, is_string: bool, options: WriteOptions) -> tuple[list[bytes], list[int], int]:
    """The payload column of an Arrow batch packed into entries of several rows (:mod:`packing`): the entries,
    the first row of each (and the row count at the end), and the rows' bytes."""
    offsets, data = _payload_buffers(batch, index, is_string)
    entries, cuts = pack_rows(offsets, data, options.rows_per_entry, options.entry_max_bytes)
    return entries, cuts, len(data)


@dataclass(frozen=True)
class RowColumnIndexes:
    """Where a write's ``key`` and ``headers`` columns are (None: the DataFrame has none), checked on the driver
    (:func:`bkspark.datasource.source.row_columns`)."""

    key_index: int | None = None
    key_is_string: bool = False
    headers_index: int | None = None
    #: The ``dataset`` column that routes each row (used only without the ``dataset`` option, as Kafka's sink
    #: ignores its ``topic`` column when the ``topic`` option is set).
    dataset_index: int | None = None

    @property
    def any(self) -> bool:
        return self.key_index is not None or self.headers_index is not None


def _row_columns(batch: Any, payload_index: int, is_string: bool, columns: RowColumnIndexes) -> RowColumns:
    """An Arrow batch's payload, key and headers as buffers (:class:`RowColumns`), with no Python object per row."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets, data = _payload_buffers(batch, payload_index, is_string)
    keys = header_offsets = headers_valid = header_keys = header_values = None
    if columns.key_index is not None:
        keys = BinaryColumn.of(batch.column(columns.key_index))
    if columns.headers_index is not None:
        headers = batch.column(columns.headers_index)
        if isinstance(headers, pa.ChunkedArray):
            headers = headers.combine_chunks()
        counts = pc.list_value_length(headers).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        header_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=header_offsets[1:])
        headers_valid = headers.is_valid().to_numpy(zero_copy_only=False) if headers.null_count else None
        items = headers.flatten()
        key_field = items.field(0)
        header_keys = BinaryColumn.of(key_field.fill_null("") if key_field.null_count else key_field)
        header_values = BinaryColumn.of(items.field(1))
    return RowColumns(BinaryColumn(offsets, data), keys, header_offsets, headers_valid, header_keys, header_values)


#: The connector option that raises the frame limit (a ``bookkeeper.``-prefixed client option).
FRAME_LIMIT_OPTION = "bookkeeper.nettyMaxFrameSizeBytes"


def _row_too_large(error: Any, partition_id: int, row: int, size: int) -> Any:
    """The client's :class:`EntryTooLargeError` restated for a Spark user: which row of which partition, and the key.

    The client refuses the entry locally (nothing was sent, no bookie is blamed); the task then fails as any
    other, and the job's abort deletes its ledgers.
    """
    from bkspark.errors import EntryTooLargeError

    return EntryTooLargeError(
        f"row {row} of partition {partition_id} has a payload of {size} bytes, more than one entry can carry "
        f"({error.context.get('max_payload')} bytes within the frame limit); raise the option "
        f"{FRAME_LIMIT_OPTION} (and the bookies' own nettyMaxFrameSizeBytes) or split the row",
        partition=partition_id, row=row, size=size, max_payload=error.context.get("max_payload"),
    )


def _packed_entry_too_large(error: Any, entry_max_bytes: int) -> Any:
    """An entry of several rows, within ``entryMaxBytes``, is still more than the frame limit lets one entry carry."""
    from bkspark.errors import InvalidOptionError

    return InvalidOptionError(
        f"[BOOKKEEPER_INVALID_OPTION] entryMaxBytes ({entry_max_bytes}) is more than one entry can carry "
        f"({error.context.get('max_payload')} bytes within the frame limit); lower entryMaxBytes or raise "
        f"{FRAME_LIMIT_OPTION} (and the bookies' own nettyMaxFrameSizeBytes)",
        entry_max_bytes=entry_max_bytes, max_payload=error.context.get("max_payload"),
    )


def reserve_parent_id(bk: Any, scope_id: int) -> int:
    """A ledger id for a job's parent, which no other ledger can get.

    Scope 0 draws it from the cluster's id generator; a BP-35 scope has no generator, so it is a random 63-bit
    id, as the client draws for scoped ledgers.
    """
    if scope_id == 0:
        return int(bk.store.generate_ledger_id())
    return uuid.uuid4().int & INT64_MAX


@dataclass
class RoutedCommitMessage(WriterCommitMessage):
    """What one successful task of a routed job wrote: a ledger per dataset its rows named."""

    partition_id: int
    attempt: int
    ledgers: tuple[tuple[str, LedgerCommitMessage], ...]


#: The column that routes each row to a dataset when the ``dataset`` option is absent (docs/connector.md,
#: "Routing rows by a dataset column").
DATASET_COLUMN = "dataset"


def _split_by_dataset(batch: Any, index: int) -> list[tuple[str, Any]]:
    """An Arrow batch's rows grouped by the dataset their ``dataset`` column names, in the order each name first
    appears (rows keep their order within a group); a null, empty or invalid name is :class:`InvalidRowError`
    naming the column, the row (within the batch) and the value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from bkspark.datasource.options import DATASET_NAME
    from bkspark.errors import InvalidRowError

    column = batch.column(index)
    if column.null_count:
        row = int(pc.index(column.is_null(), True).as_py())
        raise InvalidRowError(
            f"[BOOKKEEPER_INVALID_DATASET] column {DATASET_COLUMN!r} is null in row {row} of a batch: every row "
            "must name the dataset it goes to (or set the option 'dataset' for all rows)",
            column=DATASET_COLUMN, row=row,
        )
    names = pc.unique(column).to_pylist()
    for name in names:
        if not DATASET_NAME.fullmatch(name):
            row = int(pc.index(column, pa.scalar(name, column.type)).as_py())
            raise InvalidRowError(
                f"[BOOKKEEPER_INVALID_DATASET] column {DATASET_COLUMN!r} names the dataset {name!r} in row {row} of "
                "a batch, which is not a dataset name: use 1-200 letters, digits, '.', '_' or '-', starting with a "
                "letter or digit",
                column=DATASET_COLUMN, row=row, value=name,
            )
    if len(names) == 1:
        return [(names[0], batch)]
    return [(name, batch.filter(pc.equal(column, pa.scalar(name, column.type)))) for name in names]


class _LedgerWrite:
    """A task's ledger of one dataset while it is written: its bulk appends in flight, and its rows so far."""

    def __init__(
        self, writer: "BookKeeperWriter", bk: Any, dataset: str, partition_id: int, attempt: int,
        first: "list[bytes] | PackedPayloads",
    ) -> None:
        self.writer = writer
        self.bk = bk
        self.partition_id = partition_id
        self.attempt = attempt
        self.handle = writer._create_ledger(bk, partition_id, attempt, first, dataset)
        self.entries = 0
        self.rows = 0
        self.size = 0
        #: Bulk appends not yet waited for, with their entry counts (at most the client's maxPendingAdds entries;
        #: its maxPendingAddBytes is kept by append_many itself, which waits for room).
        self.pending: deque[tuple[Any, int]] = deque()
        self.in_flight = 0

    def append(self, payloads: "list[bytes] | PackedPayloads", cuts: list[int] | None, batch_size: int) -> None:
        """Hand one batch's entries to the client in runs of :data:`BULK_APPEND_ENTRIES`."""
        from bkspark.errors import EntryTooLargeError

        opts = self.writer.options
        max_pending = self.bk.conf.maxPendingAdds
        for lo in range(0, len(payloads), BULK_APPEND_ENTRIES):
            chunk = payloads[lo : lo + BULK_APPEND_ENTRIES]
            try:
                self.pending.append((self.handle.append_many(chunk), len(chunk)))
            except EntryTooLargeError as exc:
                index = lo + int(exc.context["index"])  # type: ignore[call-overload]
                if cuts is not None and cuts[index + 1] - cuts[index] > 1:
                    raise _packed_entry_too_large(exc, opts.entry_max_bytes) from exc
                row = index if cuts is None else cuts[index]
                size = len(payloads[index]) - (0 if cuts is None else HEADER_BYTES + ROW_OVERHEAD_BYTES)
                raise _row_too_large(exc, self.partition_id, self.rows + row, size) from exc
            self.in_flight += len(chunk)
            while self.in_flight > max_pending:
                future, count = self.pending.popleft()
                future.result()
                self.in_flight -= count
        self.entries += len(payloads)
        self.rows += len(payloads) if cuts is None else cuts[-1]
        self.size += batch_size

    def finish(self) -> LedgerCommitMessage:
        """Wait for every add, close the ledger "no more data": the task's commit message for it."""
        from bkspark.context import LedgerCloseContext, close_with_context

        for future, _count in self.pending:
            future.result()
        self.pending.clear()
        close_with_context(self.bk, self.handle, LedgerCloseContext.builder().because_no_more_data().build())
        opts = self.writer.options
        return LedgerCommitMessage(
            opts.scope_id, self.handle.ledger_id, self.entries, self.size, self.partition_id, self.attempt
        )

    def fail(self, exc: BaseException) -> None:
        """The task failed: close the ledger abnormally (the job's commit or abort deletes it), drop a stale client."""
        from bkspark.datasource.clients import client_conf, evict_if_stale

        log.warning(
            "task %s attempt %s failed writing ledger %s; the job's commit or abort deletes it",
            self.partition_id, self.attempt, self.handle.ledger_id,
        )
        self.writer._close_abnormally(self.bk, self.handle, exc)
        opts = self.writer.options
        # The error's invalidates_client flag decides: the next task starts with a clean client.
        evict_if_stale(opts.metadata_service_uri, client_conf(opts.client_conf), exc)


class BookKeeperWriter(DataSourceArrowWriter):
    """Writes the ``payload`` column (binary or string) of every row as one entry."""

    def __init__(
        self,
        options: WriteOptions,
        payload_index: int,
        payload_is_string: bool,
        overwrite: bool,
        parent_ledger_id: int | None = None,
        row_columns: RowColumnIndexes = RowColumnIndexes(),
    ) -> None:
        self.options = options
        self.payload_index = payload_index
        self.payload_is_string = payload_is_string
        #: The key and headers columns the write keeps (then every entry is ``rows-v2``, docs/connector.md).
        self.row_columns = row_columns
        self.overwrite = overwrite
        self.job_id = uuid.uuid4().hex
        #: The job's parent ledger id (in the job's scope), reserved on the driver; None: no job parent.
        self.parent_ledger_id = parent_ledger_id

    def reserve_parent(self) -> int:
        """Driver side, before the writer is pickled to the tasks: reserve the parent id and begin the job.

        The parent id comes from :func:`reserve_parent_id`.  Then the job's record is created (state
        ``writing``): tasks can only register ledgers under an existing record, and ``abort`` fences it.
        """
        from bkspark.datasource.datasets import JobRecord, JobState

        bk = self._client()
        if self.parent_ledger_id is None:
            self.parent_ledger_id = reserve_parent_id(bk, self.options.scope_id)
        record = JobRecord(
            state=JobState.WRITING, dataset=self.options.dataset, overwrite=self.overwrite,
            parent=(self.options.scope_id, self.parent_ledger_id), created_ms=int(time.time() * 1000),
            routed=self.routed,
        )
        self._registry(bk).begin_job(self.job_id, record)
        fault_point("job.begun")
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
    def _create_ledger(
        self, bk: Any, partition_id: int, attempt: int, first: "list[bytes] | PackedPayloads", dataset: str
    ) -> Any:
        from bkspark.context import LedgerCreateContext, create_ledger_with_context

        opts = self.options
        host = socket.gethostname()
        sizes = first.sizes() if type(first) is PackedPayloads else [len(p) for p in first]
        context = (
            LedgerCreateContext.builder()
            .created_by(CREATOR_ENTERPRISE, CREATOR_SYSTEM, self.creator_application(), host[:256])
            .part_of_data_set(dataset)
            .expected_average_entry_size(int(statistics.fmean(sizes)), statistics.pstdev(sizes))
        )
        if self.parent_ledger_id is not None:
            context = context.child_of_ledger(self.parent_ledger_id, opts.scope_id)
        context = context.build()
        tags = {
            TAG_DATASET: dataset.encode(),
            TAG_JOB: self.job_id.encode(),
            TAG_PARTITION: str(partition_id).encode(),
            TAG_ATTEMPT: str(attempt).encode(),
            TAG_APPLICATION: f"bkspark-spark-writer@{host}".encode(),
        }
        if self.row_columns.any:
            tags[ENTRY_FORMAT_KEY] = ROWS_V2  # rows with their keys and headers (docs/connector.md)
        elif opts.rows_per_entry > 1:
            tags[ENTRY_FORMAT_KEY] = ROWS_V1  # every reader unpacks this ledger's entries (docs/connector.md)
        settings = dict(
            custom_metadata=tags,
            ensemble_size=opts.ensemble_size,
            write_quorum_size=opts.write_quorum_size,
            ack_quorum_size=opts.ack_quorum_size,
            digest_type=opts.digest_type,
            password=opts.password,
            scope_id=opts.scope_id,
        )
        # Scope 0 ids come from the cluster's generator, BP-35 scoped ids are drawn (and redrawn on a collision)
        # by the client itself.
        handle = create_ledger_with_context(bk, context, **settings)
        try:
            # A routed job's registration names the ledger's dataset (its abort checks that dataset's manifest).
            self._registry(bk).register(self.job_id, opts.scope_id, handle.ledger_id, dataset if self.routed else "")
            fault_point("task.registered")
        except BaseException:
            # Not registered: nobody could find it later, so it goes now.
            from bkspark.datasource.cleanup import delete_ledgers

            delete_ledgers(bk, [(opts.scope_id, handle.ledger_id)])
            raise
        return handle

    def write(self, iterator: Iterator[Any]) -> "LedgerCommitMessage | RoutedCommitMessage":
        from pyspark import TaskContext

        context = TaskContext.get()
        partition_id = context.partitionId() if context else 0
        attempt = context.attemptNumber() if context else 0
        opts = self.options
        batches = (b for b in iterator if b.num_rows)
        if self.routed:
            return self._write_routed(batches, partition_id, attempt)
        first_batch = next(batches, None)
        if first_batch is None:
            return LedgerCommitMessage(opts.scope_id, NO_LEDGER, 0, 0, partition_id, attempt)
        bk = self._client()
        first = self._entries(first_batch)
        ledger = _LedgerWrite(self, bk, opts.dataset, partition_id, attempt, first[0])
        try:
            ledger.append(*first)
            for batch in batches:
                ledger.append(*self._entries(batch))
            return ledger.finish()
        except BaseException as exc:
            ledger.fail(exc)
            raise

    @property
    def routed(self) -> bool:
        """Whether each row names its dataset (a ``dataset`` column and no ``dataset`` option)."""
        return not self.options.dataset and self.row_columns.dataset_index is not None

    def _write_routed(self, batches: Iterator[Any], partition_id: int, attempt: int) -> "RoutedCommitMessage":
        """A task of a routed job: one ledger per dataset its rows name, each written as a job of one dataset's."""
        assert self.row_columns.dataset_index is not None
        bk: Any = None
        ledgers: dict[str, _LedgerWrite] = {}
        try:
            for batch in batches:
                for dataset, rows in _split_by_dataset(batch, self.row_columns.dataset_index):
                    entries = self._entries(rows)
                    if dataset not in ledgers:
                        bk = bk or self._client()
                        ledgers[dataset] = _LedgerWrite(self, bk, dataset, partition_id, attempt, entries[0])
                    ledgers[dataset].append(*entries)
            done = tuple((dataset, ledger.finish()) for dataset, ledger in ledgers.items())
        except BaseException as exc:
            for ledger in ledgers.values():
                ledger.fail(exc)
            raise
        return RoutedCommitMessage(partition_id, attempt, done)

    def _entries(self, batch: Any) -> tuple["list[bytes] | PackedPayloads", list[int] | None, int]:
        """One Arrow batch as entries: ``(entries, first row of each entry and the row count, or None when each
        row is its own entry, the rows' bytes)``."""
        if self.row_columns.any:  # rows-v2: the rows' keys and headers go with them, whatever rowsPerEntry
            rows = _row_columns(batch, self.payload_index, self.payload_is_string, self.row_columns)
            entries, cuts = pack_row_columns(rows, self.options.rows_per_entry, self.options.entry_max_bytes)
            return entries, cuts, len(rows.payloads.data)
        if self.options.rows_per_entry > 1:
            return _packed_entries(batch, self.payload_index, self.payload_is_string, self.options)
        payloads, size = _payloads(batch, self.payload_index, self.payload_is_string)
        return payloads, None, size

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
        """Publish the committed ledgers (the commit point), then clean up; see docs/connector.md.

        Before the commit point an error propagates (Spark then calls ``abort``).  After it the job is committed
        whatever happens: each clean-up step is retried a bounded number of times, then logged and left for the
        next job of the dataset or ``bkspark shell recoverjobs``.  Called again (a retried commit RPC), it
        publishes nothing and finishes the clean-up.  A routed job publishes every dataset its rows named in the
        same ``multi`` (docs/connector.md, "Routing rows by a dataset column").
        """
        from bkspark.datasource.cleanup import CommitCleaner
        from bkspark.datasource.datasets import CommitKey, JobGoneError, JobState, PublishTarget

        bk = self._client()
        registry = self._registry(bk)
        opts = self.options
        by_dataset = ledgers_by_dataset(messages, opts.dataset)
        if not self.routed:
            by_dataset.setdefault(opts.dataset, [])  # a job with no rows still publishes (an overwrite empties)
        names = sorted(by_dataset)
        committed = [ledger for name in names for ledger in by_dataset[name]]
        record = registry.job(self.job_id)
        if record is None:
            roots = [registry.root(name) for name in names]
            if names and all(root is not None and root.token(self.job_id) is not None for root in roots):
                log.info("write job %s was committed and cleaned up before: nothing to do", self.job_id)
                return
            raise JobGoneError(f"write job {self.job_id} has no record (aborted, or never begun): cannot commit")
        if record.state is JobState.ABORTING:
            raise JobGoneError(f"write job {self.job_id} is being aborted: it can no longer commit")
        cleaner = CommitCleaner(bk, registry)
        if not names:  # a routed job without rows: nothing to publish, its record goes as an abort's would
            cleaner.abort_job(self.job_id, (), extra_ledgers=committed)
            return
        parent = (opts.scope_id, self.parent_ledger_id) if committed and self.parent_ledger_id is not None else None
        extra = []
        if parent is not None and record.state is JobState.WRITING:
            extra.append(self._parent_znode(bk, committed, parent, names))
        results = registry.publish_many(
            [PublishTarget(name, tuple(by_dataset[name]), self.overwrite) for name in names],
            job_id=self.job_id, key=CommitKey(self.job_id, 0), parents=[parent] if parent else [], extra_creates=extra,
            before_multi=lambda: fault_point("commit.shards-written"), ledger_path=bk.store.ledger_path,
        )
        if results[0].already:
            log.info("write job %s had already published dataset(s) %s: finishing its clean-up", self.job_id, names)
        cleaner.finish_commit(self.job_id, names, extra_ledgers=committed)

    def _parent_znode(
        self, bk: Any, ledgers: list[tuple[int, int]], parent: tuple[int, int], datasets: list[str] | None = None
    ) -> tuple[str, bytes]:
        """The metadata znode of the job's parent ledger (path, bytes), created by the publishing ``multi``.

        The parent is an empty closed ledger (the job's commit marker) on the ensemble of the first of the job's
        ``ledgers``; when that one is gone, the commit fails naming every one that is gone (:func:`ledgers_gone_error`).  Created in the same ``multi`` as the manifest, it exists exactly when the job is committed: the
        ledgers of a job that never committed always name a missing parent, which the orphan audit reports.
        A routed job's parent is the parent of its ledgers in every one of ``datasets`` (default: the option's),
        which ``bkspark.datasets`` lists.
        """
        from bkspark.context import CLOSE_KEY, SEAL_TIME_KEY, LedgerCloseContext, LedgerCreateContext
        from bkspark.datasource.datasets import ledgers_gone_error
        from bkspark.errors import NoSuchLedgerMetadataError

        opts = self.options
        datasets = datasets or [opts.dataset]
        host = socket.gethostname()[:256]
        context = (
            LedgerCreateContext.builder()
            .created_by(CREATOR_ENTERPRISE, CREATOR_SYSTEM, f"{self.creator_application()}/commit-marker", host)
            .part_of_data_set(",".join(datasets))
            .expected_max_entries(0)
            .expected_max_length(0)
            .build()
        )
        tags = {
            TAG_DATASET: ",".join(datasets).encode(),
            TAG_JOB: self.job_id.encode(),
            TAG_ROLE: JOB_PARENT_ROLE,
            TAG_APPLICATION: f"bkspark-spark-writer@{socket.gethostname()}".encode(),
        }
        if self.routed:
            tags[TAG_DATASETS] = ",".join(datasets).encode()
        now_ms = int(time.time() * 1000)
        custom = context.to_custom_metadata(tags)
        custom[CLOSE_KEY] = LedgerCloseContext.builder().because_no_more_data().build().to_bytes()
        custom[SEAL_TIME_KEY] = str(now_ms).encode("ascii")
        model = ledgers[0]
        try:
            md = bk.get_ledger_metadata(model[1], scope_id=model[0])
        except NoSuchLedgerMetadataError:
            znodes = {ledger: bk.store.ledger_path(ledger[1], ledger[0]) for ledger in ledgers}
            gone = self._registry(bk).missing_ledgers(znodes) or [model]
            raise ledgers_gone_error(" + ".join(datasets), gone) from None
        parent_md = md.empty_closed_sibling(now_ms, custom)
        return bk.store.ledger_znode_to_create(parent[1], parent_md, scope_id=parent[0])

    def abort(self, messages: list[Any]) -> None:
        """Fence the job (it can never publish after this), then delete its ledgers; never committed ones.

        If the job's publish won the race (a commit that failed after its commit point), this finishes that
        commit's clean-up instead: committed work is never aborted.
        """
        from bkspark.datasource.cleanup import CommitCleaner

        bk = self._client()
        by_dataset = ledgers_by_dataset(messages, self.options.dataset)
        datasets = sorted(by_dataset) if self.routed else [self.options.dataset]
        CommitCleaner(bk, self._registry(bk)).abort_job(
            self.job_id, datasets, extra_ledgers=[ledger for ledgers in by_dataset.values() for ledger in ledgers]
        )


def ledgers_by_dataset(messages: list[Any], dataset: str) -> dict[str, list[tuple[int, int]]]:
    """The ledgers of the tasks' commit messages per dataset (``dataset`` for a job of one dataset's messages;
    None for failed tasks; NO_LEDGER for empty partitions)."""
    out: dict[str, list[tuple[int, int]]] = {}
    for message in messages:
        if isinstance(message, RoutedCommitMessage):
            for name, part in message.ledgers:
                out.setdefault(name, []).append((part.scope_id, part.ledger_id))
        elif isinstance(message, LedgerCommitMessage) and message.ledger_id != NO_LEDGER:
            out.setdefault(dataset, []).append((message.scope_id, message.ledger_id))
    return out


def _committed_ledgers(messages: list[Any]) -> list[tuple[int, int]]:
    """The ledgers of the tasks' commit messages (None for failed tasks; NO_LEDGER for empty partitions)."""
    return [ledger for ledgers in ledgers_by_dataset(messages, "").values() for ledger in ledgers]
