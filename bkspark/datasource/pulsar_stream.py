"""``spark.readStream.format("bookkeeper").option("topic", ...)``: follow Pulsar topics from the bookies.

Where each part runs (as for the ledger stream, :mod:`bkspark.datasource.stream_reader`):

* ``initialOffset``, ``latestOffset``, ``partitions`` and ``commit`` run in Spark's long-lived Python process on
  the driver.  Each trigger re-reads every partition's managed-ledger znode (so ledgers the broker rolls are
  followed, and ledgers retention deleted are seen), and brings the LAC of each partition's last ledger up to date
  with a long-poll tail (:meth:`bkspark.client.BookKeeper.open_tail`: opened without recovery, nothing fenced).
  With nothing new it waits on those tails and on ZooKeeper watches of the managed-ledger znodes, at most
  ``longPollTimeoutMs``.
* ``read`` runs on executors: the batch reader's :meth:`PulsarReader.read` over :class:`PulsarSlice`\\ s bounded by
  the micro-batch's start and end positions, so a replayed batch reads exactly the same messages.

The client is opened with ``metadataReadOnly`` and watches are reads: nothing is written to Pulsar's ZooKeeper.
Offsets and admission are pure functions in :mod:`bkspark.datasource.pulsar_stream_offsets`.  See docs/pulsar.md,
"Streaming".
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, fields
from typing import Any, Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from bkspark.datasource.pulsar_options import PulsarReadOptions
from bkspark.datasource.pulsar_stream_offsets import (
    ENTRY_START,
    STREAM_ALIASES,
    STREAM_OPTIONS,
    LATEST,
    PartitionView,
    Position,
    ReadableLedger,
    admit,
    canonical,
    earliest,
    entries_waiting,
    parse_stream_starting_offsets,
    positions_of,
    readable_end,
)
from bkspark.datasource.stream_offsets import Admission
from bkspark.errors import InvalidOptionError

__all__ = ["PulsarStreamOptions", "PulsarStreamReader", "parse_pulsar_stream_options", "pulsar_stream_reader"]

log = logging.getLogger(__name__)

#: Entries read at a time on the driver to count messages for ``maxMessagesPerTrigger``.
COUNT_READ_CHUNK = 256


@dataclass(frozen=True)
class PulsarStreamOptions:
    """A Pulsar stream's own options, beside the read options it shares with ``spark.read``."""

    starting_offsets: dict[str, Any]
    #: Partitions JSON ``startingOffsets`` starts at their latest (``-1``).
    start_latest: tuple[str, ...] = ()
    max_entries_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    max_messages_per_trigger: int | None = None
    long_poll_timeout_ms: int = 2000


def parse_pulsar_stream_options(options: Mapping[str, str | None]) -> tuple[PulsarReadOptions, PulsarStreamOptions]:
    """The read options (as ``spark.read`` checks them) and the stream's own; ``endingOffsets`` is refused."""
    from bkspark.datasource.pulsar_options import parse_pulsar_read_options
    from bkspark.datasource.stream_reader import DEFAULT_LONG_POLL_TIMEOUT_MS, _duration_ms, _positive

    own = {name.lower() for name in STREAM_OPTIONS}
    aliases = {alias.lower(): name.lower() for alias, name in STREAM_ALIASES.items()}
    shared: dict[str, str | None] = {}
    stream: dict[str, str] = {}
    for key, value in options.items():
        lowered = str(key).lower()
        if value is None:
            continue
        if lowered == "endingoffsets":
            raise InvalidOptionError(
                "[BOOKKEEPER_INVALID_OPTION] option 'endingOffsets' does not apply to a stream: use "
                "Trigger.AvailableNow to stop at what is readable when the query starts (docs/pulsar.md, 'Streaming')"
            )
        name = aliases.get(lowered, lowered)
        if name in own:
            if name in stream:
                raise InvalidOptionError(f"[BOOKKEEPER_CONFLICTING_OPTIONS] option {key!r} is given twice (an alias "
                                         "and its option)")
            stream[name] = str(value)
        else:
            shared[key] = value
    read = parse_pulsar_read_options(shared)
    start, latest = parse_stream_starting_offsets(stream.get("startingoffsets"))
    return read, PulsarStreamOptions(
        starting_offsets=start,
        start_latest=tuple(sorted(latest)),
        max_entries_per_trigger=_positive(stream, "maxEntriesPerTrigger"),
        max_bytes_per_trigger=_positive(stream, "maxBytesPerTrigger"),
        max_messages_per_trigger=_positive(stream, "maxMessagesPerTrigger"),
        long_poll_timeout_ms=_duration_ms(stream, "longPollTimeoutMs", DEFAULT_LONG_POLL_TIMEOUT_MS),
    )


def pulsar_stream_reader(options: Mapping[str, str | None], schema: Any) -> "PulsarStreamReader":
    """The stream reader of ``readStream`` on a Pulsar topic (options checked now, so a mistake fails at start);
    ``value`` typed by the topics' schema as a batch read types it."""
    from bkspark.datasource.pulsar_reader import _check_schema, value_decoder_of

    read, stream = parse_pulsar_stream_options(options)
    decoder = value_decoder_of(read)
    _check_schema(schema, decoder)
    reader = PulsarStreamReader(read, stream)
    reader.decoder = decoder
    return reader


class _Driver:
    """Driver-side state of one query: a read-only client, one tail per partition's last ledger, the watches."""

    def __init__(self, options: PulsarReadOptions) -> None:
        from bkspark.datasource.clients import client_root, client_zk, get_client
        from bkspark.datasource.pulsar_reader import client_settings
        from bkspark.pulsar.topics import TopicResolver, pulsar_root_of

        self.options = options
        self.bk = get_client(options.metadata_service_uri, client_settings(options))
        self.zk = client_zk(self.bk)
        self.resolver = TopicResolver(self.zk, pulsar_root_of(client_root(self.bk)))
        #: Tails of the ledgers each partition's managed ledger lists last, by ledger id.
        self.tails: dict[int, Any] = {}
        #: The last entry of every closed ledger seen (a deleted ledger read to its end lost nothing).
        self.closed_last: dict[int, int] = {}
        self.changed = asyncio.Event()
        self._watched: set[str] = set()
        self.target: dict[str, Position] | None = None
        self.last_views: list[PartitionView] = []

    def views(self) -> list[PartitionView]:
        """Every partition's readable ledgers now (managed-ledger znodes re-read, tails refreshed)."""
        from bkspark.pulsar.topics import managed_ledger_path

        opts = self.options
        listed: list[tuple[str, list[Any]]] = []
        for part in self.resolver.resolve(list(opts.topics), opts.topics_pattern):
            path = managed_ledger_path(self.resolver.root, part.topic)
            self._watch(path)
            ledgers = self.resolver.ledgers(part) or []
            listed.append((str(part.topic), ledgers))
        wanted = {ledgers[-1].ledger_id for _, ledgers in listed if ledgers}
        for ledger_id in list(self.tails):
            if ledger_id not in wanted:
                self.tails.pop(ledger_id)
        for ledger_id in wanted - set(self.tails):
            self._open_tail(ledger_id)
        tails = list(self.tails.items())
        for (ledger_id, _tail), result in zip(tails, self.bk.refresh_tails([t for _, t in tails])):
            if isinstance(result, BaseException):
                log.warning("ledger %s: could not refresh its LAC (%s); keeping the last known one", ledger_id, result)
        out = []
        for topic, ledgers in listed:
            readable = []
            for index, ledger in enumerate(ledgers):
                if ledger.bookkeeper_deleted:
                    continue  # offloaded: the bookies have none of it (admission skips it; planning reports it)
                tail = self.tails.get(ledger.ledger_id) if index == len(ledgers) - 1 else None
                size = (ledger.size / ledger.entries) if ledger.entries and ledger.size else 1024.0
                if ledger.entries is not None:
                    self.closed_last[ledger.ledger_id] = ledger.entries - 1
                    readable.append(ReadableLedger(ledger.ledger_id, ledger.entries, True, size))
                elif tail is not None:
                    if tail.closed:
                        self.closed_last[ledger.ledger_id] = tail.lac
                    readable.append(ReadableLedger(ledger.ledger_id, tail.lac + 1, bool(tail.closed),
                                                   float(tail.last_entry_size or size)))
            out.append(PartitionView(topic, tuple(readable)))
        self.last_views = out
        return out

    def _open_tail(self, ledger_id: int) -> None:
        from bkspark.errors import NoSuchLedgerMetadataError

        try:
            self.tails[ledger_id] = self.bk.open_tail(
                ledger_id, password=self.options.password, digest_type=self.options.digest_type
            )
        except NoSuchLedgerMetadataError:
            log.info("ledger %s is listed but has no metadata (deleted); not followed", ledger_id)

    def _watch(self, path: str) -> None:
        """One ZooKeeper watch (a read) armed per managed-ledger znode; it wakes :meth:`wait_for_change`."""
        if path in self._watched:
            return
        self._watched.add(path)

        def fired(_event: Any) -> None:  # kazoo's event thread
            self._watched.discard(path)
            self.bk.loop.call_soon_threadsafe(self.changed.set)

        self.zk.exists(path, watch=fired)

    def wait_for_change(self, timeout_ms: int) -> None:
        """Block until a followed ledger's LAC moves, a managed-ledger znode changes, or ``timeout_ms`` passes."""
        self.bk.wait_for_tails(list(self.tails.values()), timeout_ms, wake=self.changed)

    def message_counts(self, ledger_id: int, first: int, last: int) -> list[int]:
        """The messages of each entry ``first..last`` (read on the driver for ``maxMessagesPerTrigger``): a batch
        its ``num_messages_in_batch``, a marker none, a chunk one when it is its message's last (where the message
        is read: docs/pulsar.md, "Chunked messages"), else none; any other entry one."""
        from bkspark.pulsar.entry import parse_entry

        handle = self.bk.open_ledger(ledger_id, recovery=False, password=self.options.password,
                                     digest_type=self.options.digest_type)
        try:
            counts = []
            for entry in handle.read_unconfirmed(first, last):
                parsed = parse_entry(entry.payload)
                md = parsed.metadata
                counts.append(0 if parsed.is_marker else
                              int(md.chunk_id + 1 == md.num_chunks_from_msg) if parsed.is_chunk else
                              md.num_messages_in_batch if parsed.is_batch else 1)
            return counts
        finally:
            handle.close()

    def close(self) -> None:
        self.tails.clear()


def _cut_messages(d: _Driver, view: PartitionView, start: Position, end: Position, budget: int) -> Position:
    """``end``, or the position where ``budget`` messages from ``start`` run out before it (inside a batch when
    the budget ends there)."""
    from bkspark.datasource.pulsar_stream_offsets import grant_entries

    left = budget
    for ledger_id, first, last in entries_waiting(view, start, end if end > start else None):
        entry = first
        while entry <= last:
            chunk_last = min(last, entry + COUNT_READ_CHUNK - 1)
            for entry_id, count in zip(range(entry, chunk_last + 1), d.message_counts(ledger_id, entry, chunk_last)):
                skip = start[2] if (ledger_id, entry_id) == start[:2] and start[2] > 0 else 0
                count -= skip
                if count > left:
                    if left == 0:
                        return (ledger_id, entry_id, ENTRY_START) if skip == 0 else (ledger_id, entry_id, skip)
                    return (ledger_id, entry_id, skip + left)
                left -= count
            entry = chunk_last + 1
    return end


def _seen_entries(start: Position, end: Position) -> bool:
    return end > start


class PulsarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader of Pulsar topics (docs/pulsar.md, "Streaming")."""

    def __init__(self, options: PulsarReadOptions, stream: PulsarStreamOptions) -> None:
        self.options = options
        self.stream = stream
        #: Types ``value`` by the topics' schema (``pulsar_reader.value_decoder_of``); None: ``value`` is bytes.
        self.decoder: Any = None
        self._driver: _Driver | None = None

    def __getstate__(self) -> dict[str, Any]:
        """The options and the value decoder only: the driver's client, tails and watches stay in the process
        that made them."""
        return {"options": self.options, "stream": self.stream, "decoder": self.decoder, "_driver": None}

    def _state(self) -> _Driver:
        driver = self._driver
        if driver is None:
            driver = self._driver = _Driver(self.options)
        return driver

    # -- offsets (driver) ------------------------------------------------------------------
    def initialOffset(self) -> dict:  # noqa: N802 - Spark's names
        return dict(self.stream.starting_offsets)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        """A limit when any budget is set (Spark hands it back to ``latestOffset``, which applies every budget the
        options set: rows are messages here, not entries), else everything available."""
        s = self.stream
        rows = s.max_messages_per_trigger or s.max_entries_per_trigger
        if rows:
            return ReadMaxRows(rows)
        return ReadMaxBytes(s.max_bytes_per_trigger) if s.max_bytes_per_trigger else ReadAllAvailable()

    def _starts(self, d: _Driver, start: Mapping[str, Any], views: list[PartitionView]) -> dict[str, Position]:
        """Each partition's start: the offset's, else its latest (``-1`` in JSON startingOffsets) or earliest;
        a start in a ledger gone from the managed ledger is data loss unless it was read to its end."""
        from bkspark.datasource.pulsar_reader import data_loss

        begin = positions_of(start)
        out: dict[str, Position] = {}
        for view in views:
            at = begin.get(view.topic)
            if at is None:
                if view.topic in self.stream.start_latest and not start.get("topics", {}).get(view.topic):
                    at = readable_end(view)
                if at is None:
                    continue
            ids = [ledger.ledger_id for ledger in view.ledgers]
            if ids and at[0] not in ids and at[0] < ids[-1]:
                read_to_end = d.closed_last.get(at[0], at[1]) < at[1]
                if not read_to_end:
                    error = data_loss(self.options, view.topic, at[0],
                                      "was deleted (retention) or offloaded before the stream read it to its end")
                    if error is not None:
                        raise error
                    log.warning("ledger %s of %s was lost before the stream read it: skipped", at[0], view.topic)
                at = next((lid, 0, ENTRY_START) for lid in ids if lid > at[0])
            out[view.topic] = at
        return out

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        d = self._state()
        admission = Admission() if isinstance(limit, ReadAllAvailable) else Admission(
            self.stream.max_entries_per_trigger, self.stream.max_bytes_per_trigger)
        end = self._end(d, start, admission, limit)
        if end == self._unchanged(start) and d.target is None and not start.get("latest"):
            d.wait_for_change(self.stream.long_poll_timeout_ms)
            end = self._end(d, start, admission, limit)
        return end

    @staticmethod
    def _unchanged(start: Mapping[str, Any]) -> dict[str, Any]:
        return canonical(positions_of(start))

    def _end(self, d: _Driver, start: Mapping[str, Any], admission: Admission, limit: ReadLimit) -> dict[str, Any]:
        views = d.views()
        if start.get("latest"):
            return canonical({v.topic: p for v in views if (p := readable_end(v)) is not None})
        starts = self._starts(d, start, views)
        ends = admit(views, starts, admission, d.target)
        budget = None if isinstance(limit, ReadAllAvailable) else self.stream.max_messages_per_trigger
        if budget is not None:
            ends = self._messages_budget(d, views, starts, ends, budget)
        for topic, at in positions_of(start).items():
            ends.setdefault(topic, at)  # a partition gone from the listing keeps its position
        return canonical(ends)

    def _messages_budget(self, d: _Driver, views: list[PartitionView], starts: dict[str, Position],
                         ends: dict[str, Position], budget: int) -> dict[str, Position]:
        """``ends`` cut so that at most ``budget`` messages are admitted, shared across partitions in proportion
        to the entries each was granted (at least one message when any is waiting)."""
        from bkspark.datasource.stream_offsets import _prorate

        moving = [v for v in views if v.topic in ends and ends[v.topic] != starts.get(v.topic)
                  and _seen_entries(starts.get(v.topic) or earliest(v) or (0, 0, -1), ends[v.topic])]
        weights = [float(sum(last - first + 1 for _, first, last in entries_waiting(
            v, starts.get(v.topic) or earliest(v), ends[v.topic]))) for v in moving]  # type: ignore[arg-type]
        shares = _prorate([budget] * len(moving), weights, budget) if moving else []
        if moving and sum(shares) == 0:
            shares[0] = 1
        out = dict(ends)
        for view, share in zip(moving, shares):
            begin = starts.get(view.topic) or earliest(view)
            assert begin is not None
            cut = _cut_messages(d, view, begin, ends[view.topic], share)
            if cut == begin and view.topic not in starts:
                out.pop(view.topic)
            else:
                out[view.topic] = cut
        return out

    def reportLatestOffset(self) -> dict | None:  # noqa: N802
        """Where every partition's readable messages end now (Spark's progress shows it as ``latestOffset``)."""
        d = self._driver
        if d is None:
            return None
        return canonical({v.topic: p for v in d.last_views if (p := readable_end(v)) is not None})

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """Freeze the target: what is readable now, in the partitions the topics have now."""
        d = self._state()
        d.target = {v.topic: p for v in d.views() if (p := readable_end(v)) is not None}

    # -- planning (driver) and reading (executors) -------------------------------------------------
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        from bkspark.datasource.planning import LedgerSlice, plan_partitions, split_ledger
        from bkspark.datasource.pulsar_reader import PulsarSlice, data_loss, previous_ledgers

        if start.get("latest"):
            return []  # batch 0 of startingOffsets=latest only fixes where to begin
        d = self._state()
        opts = self.options
        begin = positions_of(start)
        slices: list[LedgerSlice] = []
        parts = {str(p.topic): p for p in d.resolver.resolve(list(opts.topics), opts.topics_pattern)}
        for topic, stop in positions_of(end).items():
            part = parts.get(topic)
            listed = (d.resolver.ledgers(part) or []) if part is not None else []
            first_pos = begin.get(topic) or ((listed[0].ledger_id, 0, ENTRY_START) if listed else None)
            if first_pos is None or stop <= first_pos:
                continue
            ids = sorted({l.ledger_id for l in listed if first_pos[0] <= l.ledger_id <= stop[0]}
                         | {first_pos[0]} | ({stop[0]} if stop[1] > 0 or stop[2] > 0 else set()))
            offloaded = {l.ledger_id for l in listed if l.bookkeeper_deleted}
            for _, ledger_id, versioned in d.bk.store.read_many_ledger_metadata([(0, i) for i in ids]):
                last_wanted = stop[1] - (1 if stop[2] == ENTRY_START else 0) if ledger_id == stop[0] else None
                first = first_pos[1] if ledger_id == first_pos[0] else 0
                if versioned is None or ledger_id in offloaded:
                    if ledger_id == first_pos[0] and d.closed_last.get(ledger_id, first) < first:
                        continue  # read to its end before it was deleted: nothing lost
                    why = ("was offloaded and deleted from BookKeeper" if ledger_id in offloaded
                           else "no longer exists (deleted by retention?)")
                    error = data_loss(opts, topic, ledger_id, why)
                    if error is not None:
                        raise error
                    continue
                md = versioned.metadata
                closed = md.state.name == "CLOSED"
                last = last_wanted
                if last is None:
                    last = md.last_entry_id if closed and md.last_entry_id is not None else d.closed_last.get(ledger_id, -1)
                if last < first:
                    continue
                for piece in split_ledger(
                    0, ledger_id, first, last, opts.max_entries_per_partition, ledger_open=not closed,
                    entry_bytes=None, max_bytes_per_partition=opts.max_bytes_per_partition,
                ):
                    base = {f.name: getattr(piece, f.name) for f in fields(LedgerSlice)}
                    slices.append(PulsarSlice(**base, topic=topic, partition=part.partition if part else -1,
                                              start=first_pos, end=stop,
                                              previous_ledgers=previous_ledgers(listed, ledger_id)))
        return plan_partitions(slices, opts.max_entries_per_partition, min_partitions=opts.min_partitions,
                               max_partitions=opts.max_partitions, max_bytes_per_partition=opts.max_bytes_per_partition)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from bkspark.datasource.pulsar_reader import PulsarReader

        reader = PulsarReader(self.options)
        reader.decoder = self.decoder
        return reader.read(partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: the stream holds no subscription or cursor (Spark's checkpoint is the cursor)."""

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()
            self._driver = None
