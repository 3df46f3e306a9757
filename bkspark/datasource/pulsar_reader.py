"""Batch reads of Pulsar topics: plan from the managed-ledger info on the driver, decode entries on executors.

Planning (driver): the topics resolve to managed ledgers (:class:`bkspark.pulsar.topics.TopicResolver`), each a
list of ledgers; a closed ledger is read to its last entry, the ledger the broker still writes up to its LAC
(a non-recovery open: nothing is fenced, the producers go on).  Slices are split and packed by the connector's
rules (:func:`bkspark.datasource.planning.plan_partitions`).  Reading (executor): each entry is decoded into its
messages (:mod:`bkspark.pulsar.entry`) and gathered into Arrow batches (:mod:`bkspark.pulsar.columns`).

The client is opened with ``metadataReadOnly``: it writes nothing to Pulsar's ZooKeeper (docs/pulsar.md).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Iterator, Mapping

from pyspark.sql.datasource import DataSourceReader, InputPartition

from bkspark.datasource.planning import LedgerSlice, partition_slices, plan_partitions, split_ledger
from bkspark.datasource.pulsar_options import PulsarReadOptions

__all__ = [
    "PulsarReader", "PulsarSlice", "ROWS_PER_BATCH", "client_settings", "pulsar_schema", "pulsar_reader",
    "PulsarPushdownReader",
]

#: Messages of one Arrow batch at most.
ROWS_PER_BATCH = 8192
#: Value bytes of one Arrow batch at most (a batch's binary column has int32 offsets).
BYTES_PER_BATCH = 64 * 1024 * 1024
#: Entries read at a time, going back from a slice's start, for the chunks of a message whose last chunk it holds
#: (a chunk is up to the broker's maxMessageSize, 5 MiB by default; a message's chunks are usually adjacent).
CHUNK_READ_BACK = 8
#: The earlier ledgers of its partition a slice reads back through for such chunks (a chunked message spans a few
#: entries; a ledger holds thousands).
CHUNK_LEDGERS_BACK = 16


@dataclass(frozen=True)
class PulsarSlice(LedgerSlice):
    """Entries ``first_entry..last_entry`` of one ledger of a topic (a :class:`LedgerSlice` that knows its topic;
    ``previous_ledgers``, nearest first, are where it reads back for the first chunks of a chunked message whose
    last chunk it holds)."""

    topic: str = ""
    partition: int = -1
    previous_ledgers: tuple[int, ...] = ()
    #: Rows at positions (ledger, entry, batch index) before ``start`` or from ``end`` on are left out
    #: (``startingOffsets``, ``endingOffsets``).
    start: tuple[int, int, int] | None = None
    end: tuple[int, int, int] | None = None

    def keeps(self, entry_id: int, batch_index: int) -> bool:
        position = (self.ledger_id, entry_id, batch_index)
        return (self.start is None or position >= self.start) and (self.end is None or position < self.end)


def pulsar_schema(options: Mapping[str, str | None]) -> Any:
    """The columns of a Pulsar read (options checked first, so a mistake fails at ``load()``): the fixed ones, with
    ``value`` typed by the topics' schema from Pulsar's registry unless ``schema`` is ``raw``."""
    from bkspark.datasource.pulsar_options import parse_pulsar_read_options
    from bkspark.pulsar.columns import spark_schema

    return spark_schema(value_decoder_of(parse_pulsar_read_options(options)))


def value_decoder_of(options: PulsarReadOptions) -> Any:
    """The :class:`bkspark.pulsar.schemas.ValueDecoder` of the read's topics (their schema in Pulsar's registry),
    None with ``schema=raw`` or when no topic has one.  Reads the locator znodes and the schema ledgers only."""
    from bkspark.datasource.clients import client_root, client_zk, get_client
    from bkspark.pulsar.errors import PulsarSchemaError
    from bkspark.pulsar.schemas import load_topic_schema, schema_path, value_decoder
    from bkspark.pulsar.topics import TopicResolver, pulsar_root_of

    if options.schema == "raw":
        return None
    bk = get_client(options.metadata_service_uri, client_settings(options))
    root = pulsar_root_of(client_root(bk))
    resolver = TopicResolver(client_zk(bk), root)
    found: dict[str, Any] = {}
    for part in resolver.resolve(list(options.topics), options.topics_pattern):
        path = schema_path(root, part.topic)
        if path not in found:
            found[path] = (part.topic, load_topic_schema(client_zk(bk), bk, root, part.topic,
                                                         digest_type=options.digest_type, password=options.password))
    with_schema = [schema for _, schema in found.values() if schema is not None]
    without = [str(topic) for topic, schema in found.values() if schema is None]
    if with_schema and without:
        raise PulsarSchemaError(
            f"[BOOKKEEPER_PULSAR_SCHEMA] topic {with_schema[0].topic} has a schema and {without[0]} has none: read "
            "them apart, or all as bytes with .option('schema', 'raw')"
        )
    return value_decoder(with_schema)


def _check_schema(schema: Any, decoder: Any) -> None:
    from bkspark.errors import InvalidOptionError
    from bkspark.pulsar.columns import spark_schema

    if schema is not None and schema != spark_schema(decoder):
        raise InvalidOptionError(
            "[BOOKKEEPER_USER_SCHEMA] a Pulsar topic is read with its own columns (docs/pulsar.md, 'Columns' and "
            "'Schemas'; the topic's schema may have changed since the query was planned); leave out .schema(...) "
            "and select or cast the columns afterwards"
        )


def pulsar_reader(options: Mapping[str, str | None], schema: Any, pushdown: bool = False) -> "PulsarReader":
    """The reader of a Pulsar read; with ``pushdown`` (Spark's filter-pushdown planner) the one that defines
    ``pushFilters`` (``__publishTime`` pruning)."""
    from bkspark.datasource.pulsar_options import parse_pulsar_read_options

    parsed = parse_pulsar_read_options(options)
    decoder = value_decoder_of(parsed)
    _check_schema(schema, decoder)
    reader = PulsarPushdownReader(parsed) if pushdown else PulsarReader(parsed)
    reader.decoder = decoder
    return reader


def client_settings(options: PulsarReadOptions) -> dict[str, Any]:
    """The client configuration of a Pulsar read: read-only metadata always."""
    from bkspark.datasource.clients import client_conf

    return client_conf(options.client_conf, batch_read_enabled=options.batch_read_enabled, metadataReadOnly=True)


def _registry_refresh(bk: Any, options: PulsarReadOptions) -> Any:
    """The decoder's way to the registries from this process (``ValueDecoder.refresh``, by a registry's topic): a
    version registered after the query was planned is found there (docs/pulsar.md, "Schemas")."""
    from bkspark.datasource.clients import client_root, client_zk
    from bkspark.pulsar.schemas import load_topic_schema
    from bkspark.pulsar.topics import parse_topic_name, pulsar_root_of

    def refresh(registry: str) -> Any:
        return load_topic_schema(client_zk(bk), bk, pulsar_root_of(client_root(bk)), parse_topic_name(registry),
                                 digest_type=options.digest_type, password=options.password)

    return refresh


def data_loss(options: PulsarReadOptions, topic: str, ledger_id: int, why: str) -> Exception | None:
    """The error to raise for a ledger of ``topic`` the bookies cannot give (``failOnDataLoss`` true), else None."""
    from bkspark.pulsar.errors import PulsarDataLossError

    if not options.fail_on_data_loss:
        return None
    return PulsarDataLossError(
        f"[BOOKKEEPER_DATA_LOSS] ledger {ledger_id} of topic {topic} {why}; its messages cannot be read from the "
        "bookies. Set .option('failOnDataLoss', 'false') to skip such ledgers"
    )


class PulsarReader(DataSourceReader):
    """Reads the messages of Pulsar topics (docs/pulsar.md)."""

    def __init__(self, options: PulsarReadOptions) -> None:
        self.options = options
        #: Types ``value`` by the topics' schema (:func:`value_decoder_of`); None: ``value`` is bytes.
        self.decoder: Any = None
        #: The least ``__publishTime`` (ms) a row may have (``startingTime`` and pushed filters), for pruning ledgers
        #: and entries; None: no lower bound.
        self.min_publish_ms: int | None = options.starting_time
        #: The ``__publishTime`` (ms) every row is below (``endingTime`` and pushed filters); None: no upper bound.
        self.max_publish_ms: int | None = options.ending_time

    def _in_time_range(self, publish_ms: int) -> bool:
        """Whether a message with this publish time can be a row: within ``startingTime``/``endingTime`` and the
        ``__publishTime`` bounds of pushed filters (a row outside them would be filtered out by Spark anyway)."""
        return (self.min_publish_ms is None or publish_ms >= self.min_publish_ms) and (
            self.max_publish_ms is None or publish_ms < self.max_publish_ms)

    def _pruned(self, ledger: Any) -> bool:
        """Whether none of a closed ledger's messages can pass a ``__publishTime >= X`` filter: it was closed
        (``LedgerInfo.timestamp``, the broker's clock) more than ``publishTimeSkewMs`` before X, and every message
        in it was published (the producer's clock) before it was closed."""
        if self.min_publish_ms is None or ledger.timestamp_ms is None or ledger.entries is None:
            return False
        return ledger.timestamp_ms + self.options.publish_time_skew_ms < self.min_publish_ms

    # -- planning (driver) ------------------------------------------------
    def partitions(self) -> list[InputPartition]:
        from bkspark.datasource.clients import client_root, client_zk, get_client
        from bkspark.datasource.planning import mean_entry_bytes
        from bkspark.pulsar.topics import TopicResolver, pulsar_root_of

        opts = self.options
        bk = get_client(opts.metadata_service_uri, client_settings(opts))
        resolver = TopicResolver(client_zk(bk), pulsar_root_of(client_root(bk)))
        slices: list[LedgerSlice] = []
        starts, ends = dict(opts.starting_offsets), dict(opts.ending_offsets)
        for part in resolver.resolve(list(opts.topics), opts.topics_pattern):
            topic = str(part.topic)
            start, end = starts.get(topic), ends.get(topic)
            ledgers = resolver.ledgers(part) or []
            wanted = []
            for ledger in ledgers:
                if self._pruned(ledger) or _outside(ledger.ledger_id, start, end):
                    continue
                if ledger.bookkeeper_deleted:
                    error = data_loss(opts, topic, ledger.ledger_id, "was offloaded and deleted from BookKeeper")
                    if error is not None:
                        raise error
                    continue
                wanted.append((0, ledger.ledger_id))
            for _, ledger_id, versioned in bk.store.read_many_ledger_metadata(wanted):
                if versioned is None:
                    error = data_loss(opts, topic, ledger_id, "no longer exists (deleted by retention?)")
                    if error is not None:
                        raise error
                    continue
                md = versioned.metadata
                last = self._last_readable_entry(bk, md, ledger_id)
                first = start[1] if start is not None and start[0] == ledger_id else 0
                if end is not None and end[0] == ledger_id:
                    last = min(last, end[1])
                if last < first:
                    continue
                for piece in split_ledger(
                    0, ledger_id, first, last, opts.max_entries_per_partition,
                    ledger_open=md.state.name != "CLOSED", entry_bytes=mean_entry_bytes(md),
                    max_bytes_per_partition=opts.max_bytes_per_partition,
                ):
                    base = {f.name: getattr(piece, f.name) for f in fields(LedgerSlice)}
                    slices.append(PulsarSlice(**base, topic=topic, partition=part.partition, start=start, end=end,
                                              previous_ledgers=previous_ledgers(ledgers, ledger_id)))
        return plan_partitions(
            slices, opts.max_entries_per_partition, min_partitions=opts.min_partitions,
            max_partitions=opts.max_partitions, max_bytes_per_partition=opts.max_bytes_per_partition,
        )

    def _last_readable_entry(self, bk: Any, md: Any, ledger_id: int) -> int:
        """A closed ledger's last entry; the LAC of the ledger the broker writes (a non-recovery open: the broker's
        explicit LAC, ``bookkeeperExplicitLacIntervalInMills``, makes it current)."""
        if md.state.name == "CLOSED":
            return md.last_entry_id if md.last_entry_id is not None else -1
        handle = bk.open_ledger(
            ledger_id, recovery=False, password=self.options.password, digest_type=self.options.digest_type
        )
        try:
            return handle.read_last_add_confirmed()
        finally:
            handle.close()

    # -- reading (executor) -------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[Any]:
        from bkspark.datasource.clients import evict_if_stale, get_client
        from bkspark.pulsar.columns import MessageColumns
        from bkspark.pulsar.entry import ChunkAssembler

        slices = partition_slices(partition)
        if not slices:
            return
        opts = self.options
        settings = client_settings(opts)
        bk = get_client(opts.metadata_service_uri, settings)
        if self.decoder is not None:
            self.decoder.refresh = _registry_refresh(bk, opts)
        columns = MessageColumns(self.decoder)
        try:
            for part in slices:
                assert isinstance(part, PulsarSlice)
                # one per slice: a slice gives the messages whose last chunk it holds, whatever else it is packed with
                for _ in self._read_slice(bk, part, columns, ChunkAssembler()):
                    yield columns.batch()
                    columns.clear()
            if len(columns):
                yield columns.batch()
        except Exception as exc:
            evict_if_stale(opts.metadata_service_uri, settings, exc)
            raise

    def _open(self, bk: Any, part: PulsarSlice) -> Any:
        from bkspark.errors import NoSuchLedgerMetadataError

        try:
            return bk.open_ledger(
                part.ledger_id, recovery=False, password=self.options.password, digest_type=self.options.digest_type
            )
        except NoSuchLedgerMetadataError:
            error = data_loss(self.options, part.topic, part.ledger_id, "was deleted after the query was planned")
            if error is not None:
                raise error from None
            return None

    def _read_slice(self, bk: Any, part: PulsarSlice, columns: Any, assembler: Any) -> Iterator[None]:
        """Decode the slice's entries into ``columns``; yields whenever ``columns`` holds a batch's worth."""
        from bkspark.pulsar.entry import entry_messages, parse_entry

        handle = self._open(bk, part)
        if handle is None:
            return
        opts = self.options
        try:
            next_entry = part.first_entry
            for batch in handle.read_batches(
                part.first_entry, part.last_entry, batch_size=opts.batch_max_count, max_size=opts.batch_max_size,
                batch=opts.batch_read_enabled, rows_per_group=ROWS_PER_BATCH,
            ):
                for entry_id, payload in _entries(batch):
                    if entry_id != next_entry:
                        raise _gap(part, next_entry, entry_id)
                    next_entry += 1
                    entry = parse_entry(payload)
                    if entry.is_chunk:
                        done = assembler.add(entry, (part.ledger_id, entry_id),
                                             earlier=lambda producer, uuid, count: self._chunks_before(
                                                 bk, part, producer, uuid, count))
                        if done is not None and part.keeps(entry_id, -1) and self._in_time_range(
                                done[0].publish_time):
                            message, first = done
                            columns.add(message, part.topic, part.partition, part.ledger_id, entry_id, first)
                    elif self._in_time_range(entry.metadata.publish_time) and not _added_whole_batch(
                            entry, part, entry_id, columns) and not (  # a batch's messages share its publish time
                            part.keeps(entry_id, -1) and columns.add_single(
                                entry, part.topic, part.partition, part.ledger_id, entry_id)):
                        for message in entry_messages(entry):
                            if part.keeps(entry_id, message.batch_index):
                                columns.add(message, part.topic, part.partition, part.ledger_id, entry_id)
                    if len(columns) >= ROWS_PER_BATCH or columns.value_bytes >= BYTES_PER_BATCH:
                        yield None
            if next_entry != part.last_entry + 1:
                raise _gap(part, next_entry, None)
        finally:
            handle.close()

    def _chunks_before(self, bk: Any, part: PulsarSlice, producer: str, uuid: str,
                       count: int) -> tuple[tuple[int, int], list[bytes]] | None:
        """Chunks ``0..count-1`` of one message, read back from the slice's start through the earlier ledgers of
        its partition: (chunk 0's position, their payloads), None when they are not there (deleted)."""
        from bkspark.errors import NoSuchLedgerMetadataError
        from bkspark.pulsar.entry import parse_entry

        found: dict[int, tuple[tuple[int, int], bytes]] = {}
        places = [(part.ledger_id, part.first_entry - 1)] + [(lid, None) for lid in part.previous_ledgers]
        for ledger_id, last in places:
            if last is not None and last < 0:
                continue
            try:
                handle = bk.open_ledger(ledger_id, recovery=False, password=self.options.password,
                                        digest_type=self.options.digest_type)
            except NoSuchLedgerMetadataError:
                return None
            try:
                top = handle.last_add_confirmed if last is None else last
                while top >= 0:
                    low = max(0, top - CHUNK_READ_BACK + 1)
                    for entry in reversed(handle.read(low, top)):
                        parsed = parse_entry(entry.payload)
                        md = parsed.metadata
                        if (parsed.is_chunk and (md.producer_name, md.uuid) == (producer, uuid)
                                and md.chunk_id < count and md.chunk_id not in found):
                            found[md.chunk_id] = ((ledger_id, entry.entry_id), bytes(parsed.payload))
                            if md.chunk_id == 0:
                                if len(found) < count:
                                    return None
                                return found[0][0], [found[i][1] for i in range(count)]
                    top = low - 1
            finally:
                handle.close()
        return None


class PulsarPushdownReader(PulsarReader):
    """The reader with ``pushFilters``, used only when Spark's pushdown conf is on: a lower bound on
    ``__publishTime`` (``>``, ``>=``, ``=``, ``IN``) prunes ledgers closed before it (:meth:`PulsarReader._pruned`),
    and both bounds (also ``<``, ``<=``) skip the entries published outside them without decoding them. Every filter
    is handed back, so Spark still applies it to the rows: pruning only skips what the filter would drop."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:  # noqa: N802 - Spark's name
        for filter_ in filters:
            bound = _publish_time_lower_bound(filter_)
            if bound is not None:
                self.min_publish_ms = bound if self.min_publish_ms is None else max(self.min_publish_ms, bound)
            upper = _publish_time_upper_bound(filter_)
            if upper is not None:
                self.max_publish_ms = upper if self.max_publish_ms is None else min(self.max_publish_ms, upper)
            yield filter_


def _publish_time_lower_bound(filter_: Any) -> int | None:
    """The least ``__publishTime`` in ms that ``filter_`` lets through, when it gives one (a timezone-aware
    timestamp: Spark hands them so), else None."""
    import datetime
    import math

    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In

    if getattr(filter_, "attribute", None) != ("__publishTime",):
        return None
    if not isinstance(filter_, (EqualTo, GreaterThan, GreaterThanOrEqual, In)):
        return None
    values = filter_.value if isinstance(filter_, In) else [filter_.value]
    if not values or not all(
        isinstance(v, datetime.datetime) and v.tzinfo is not None for v in values
    ):
        return None
    return math.floor(min(v.timestamp() for v in values) * 1000)  # floor: never above the filter's bound


def _added_whole_batch(entry: Any, part: PulsarSlice, entry_id: int, columns: Any) -> bool:
    """Every message of a batch entry the slice keeps whole, added by the compiled split in one step; False when
    the entry is not such a batch or the split hands it back (the caller then goes message by message)."""
    if not entry.is_batch or entry.is_marker or entry.is_encrypted:
        return False
    last_index = entry.metadata.num_messages_in_batch - 1
    if not (part.keeps(entry_id, 0) and part.keeps(entry_id, last_index)):
        return False
    return bool(columns.add_batch(entry, part.topic, part.partition, part.ledger_id, entry_id))


def _publish_time_upper_bound(filter_: Any) -> int | None:
    """A publish time in ms that every message ``filter_`` lets through is below (``<``, ``<=``, ``=``, ``IN`` on
    ``__publishTime``), else None; rounded so that it never drops a message the filter keeps."""
    import datetime

    from pyspark.sql.datasource import EqualTo, In, LessThan, LessThanOrEqual

    if getattr(filter_, "attribute", None) != ("__publishTime",):
        return None
    if not isinstance(filter_, (EqualTo, LessThan, LessThanOrEqual, In)):
        return None
    values = filter_.value if isinstance(filter_, In) else [filter_.value]
    if not values or not all(isinstance(v, datetime.datetime) and v.tzinfo is not None for v in values):
        return None
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    return max((v - epoch) // datetime.timedelta(milliseconds=1) for v in values) + 1  # exact: no float rounding


def previous_ledgers(ledgers: Any, ledger_id: int) -> tuple[int, ...]:
    """The ledgers of a partition listed before ``ledger_id`` (``TopicLedger``s in the topic's order), nearest
    first and at most :data:`CHUNK_LEDGERS_BACK`, less those offloaded and deleted from the bookies."""
    ids = [ledger.ledger_id for ledger in ledgers if not ledger.bookkeeper_deleted]
    before = [lid for lid in ids if lid < ledger_id]
    return tuple(reversed(before[-CHUNK_LEDGERS_BACK:]))


def _outside(ledger_id: int, start: tuple[int, int, int] | None, end: tuple[int, int, int] | None) -> bool:
    """Whether a whole ledger is before ``startingOffsets`` or after ``endingOffsets`` (a topic's ledger ids grow
    with its positions, as Pulsar's own position order has it)."""
    return (start is not None and ledger_id < start[0]) or (end is not None and ledger_id > end[0])


def _entries(batch: Any) -> Iterator[tuple[int, memoryview]]:
    """``(entry id, payload)`` of a batch of ``read_batches``, the payloads as views of its data buffer."""
    import numpy as np

    ids = batch.column(0).to_numpy()
    payloads = batch.column(1)
    buffers = payloads.buffers()
    width = np.int64 if str(payloads.type).startswith("large") else np.int32
    offsets = np.frombuffer(buffers[1], dtype=width)[payloads.offset : payloads.offset + len(payloads) + 1].tolist()
    data = memoryview(buffers[2]) if buffers[2] is not None else memoryview(b"")
    for index, entry_id in enumerate(ids.tolist()):
        yield entry_id, data[offsets[index] : offsets[index + 1]]


def _gap(part: PulsarSlice, expected: int, got: int | None) -> Exception:
    from bkspark.errors import NoSuchEntryError

    where = f"entry {got}" if got is not None else "no more entries"
    return NoSuchEntryError(
        f"ledger {part.ledger_id} of topic {part.topic} returned {where} where entry {expected} was next "
        f"(slice {part.first_entry}..{part.last_entry})"
    )
