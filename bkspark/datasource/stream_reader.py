"""``spark.readStream.format("bookkeeper")``: follow a dataset or a set of ledgers, open ones included.

Where each part runs (PySpark 4.3):

* ``initialOffset``, ``latestOffset``, ``partitions``, ``commit`` and
  ``reportLatestOffset`` run in one long-lived Python process on the driver:
  it keeps a :class:`_Driver` (a client, one long-poll :class:`LedgerTail` per
  open ledger, the immutable facts of closed ledgers).  The reader is also
  created in a planner process and pickled to the executors, so that state is
  created lazily and never pickled.
* ``read`` runs on executors, one task per partition: a :class:`LedgerSlice`
  or a group of small ones packed together (the batch planner's rule); a
  slice holds everything it needs (ledger, entry range, ledger columns), so a
  replayed batch (same start and end offsets) reads exactly the same rows.

``latestOffset`` first refreshes what it knows (a zero-timeout long poll per
open ledger, a metadata read when that shows nothing new, to see closes); when
there is nothing new it *waits* with long polls on every open ledger and a
ZooKeeper watch on the dataset's manifest, for at most ``longPollTimeoutMs``,
so a new entry reaches the query without a sleeping poll loop.  Offsets and
admission control are pure functions in :mod:`bkspark.datasource.stream_offsets`.
See docs/streaming.md.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from bkspark.datasource.options import ReadOptions, parse_read_options, selected_ledgers
from bkspark.datasource.planning import mean_entry_bytes
from bkspark.datasource.reader import BookKeeperReader
from bkspark.datasource.spark_features import ADMISSION_CONTROL, require
from bkspark.datasource.stream_offsets import (
    DONE,
    LATEST_ENTRY,
    Admission,
    LedgerPosition,
    canonical,
    lag,
    lag_per_ledger,
    ledger_key,
    next_offset,
    parse_key,
    parse_starting_offsets,
    positions_of,
)
from bkspark.errors import InvalidOptionError

__all__ = [
    "BookKeeperStreamReader",
    "StreamOptions",
    "parse_stream_read_options",
    "DEFAULT_LONG_POLL_TIMEOUT_MS",
]

log = logging.getLogger(__name__)

#: How long ``latestOffset`` waits for new entries when there are none (``longPollTimeoutMs``).
DEFAULT_LONG_POLL_TIMEOUT_MS = 2000
#: ``maxTriggerDelay`` default, as Kafka's source.
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
#: Bytes per entry assumed for ``maxBytesPerTrigger`` when nothing better is known.
DEFAULT_ENTRY_SIZE = 1024.0

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


@dataclass(frozen=True)
class StreamOptions:
    """The streaming-only options of the source."""

    starting_offsets: dict[str, Any]
    max_entries_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    min_entries_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    long_poll_timeout_ms: int = DEFAULT_LONG_POLL_TIMEOUT_MS


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return None
    text = str(raw).strip()
    if not text.isdigit() or int(text) < 1:
        raise InvalidOptionError(f"[BOOKKEEPER_INVALID_OPTION] option '{name}'={raw!r} is invalid: expected a whole number >= 1")
    return int(text)


def _duration_ms(opts: Mapping[str, str], name: str, default: int) -> int:
    raw = opts.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return default
    match = _DURATION.match(str(raw))
    if not match:
        raise InvalidOptionError(
            f"[BOOKKEEPER_INVALID_OPTION] option '{name}'={raw!r} is invalid: expected a duration such as '500ms', '30s', '15m' or milliseconds"
        )
    return int(match.group(1)) * _UNIT_MS[(match.group(2) or "ms").lower()]


def parse_stream_options(options: Mapping[str, str | None], scope_id: int) -> StreamOptions:
    """The streaming-only options (docs/streaming.md), aliases under their own names; each value checked."""
    from bkspark.datasource.options import _lower

    opts = _lower(options)
    return StreamOptions(
        starting_offsets=parse_starting_offsets(opts.get("startingoffsets"), scope_id),
        max_entries_per_trigger=_positive(opts, "maxEntriesPerTrigger"),
        max_bytes_per_trigger=_positive(opts, "maxBytesPerTrigger"),
        min_entries_per_trigger=_positive(opts, "minEntriesPerTrigger"),
        max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
        long_poll_timeout_ms=_duration_ms(opts, "longPollTimeoutMs", DEFAULT_LONG_POLL_TIMEOUT_MS),
    )


def parse_stream_read_options(options: Mapping[str, str | None]) -> tuple[ReadOptions, StreamOptions]:
    """Validate the options of ``readStream``: the read options that apply to streams, plus the streaming ones.

    ``includeOpenLedgers=false`` is refused: a stream always follows open ledgers up to their LAC (that is what
    it is for), so the option cannot apply; ``true`` is accepted and changes nothing."""
    batch = parse_read_options(options, stream=True)
    raw_open = {str(k).lower(): v for k, v in options.items()}.get("includeopenledgers")
    if raw_open is not None and str(raw_open).strip() != "" and not batch.include_open_ledgers:
        raise InvalidOptionError(
            f"[BOOKKEEPER_INVALID_OPTION] option 'includeOpenLedgers'={raw_open!r} is invalid: a stream always reads "
            "open ledgers up to their last-add-confirmed, as they grow; leave the option out"
        )
    stream = parse_stream_options(options, batch.scope_id)
    limits = [name for name, value in (
        ("maxEntriesPerTrigger", stream.max_entries_per_trigger), ("maxBytesPerTrigger", stream.max_bytes_per_trigger),
        ("minEntriesPerTrigger", stream.min_entries_per_trigger),
    ) if value is not None]
    if limits:
        require(ADMISSION_CONTROL, f"option '{limits[0]}' (admission control of Python streaming sources)", "4.2",
                "leave the per-trigger limits out; each micro-batch then reads every entry available")
    return batch, stream


@dataclass(frozen=True)
class _LedgerFacts:
    """What does not change about a ledger once known: its columns, and its end once closed."""

    ctime_ms: int | None
    custom_metadata: tuple[tuple[str, bytes], ...]
    closed_last: int | None  # last entry id of a closed ledger; None while open
    entry_size: float | None  # exact average for closed ledgers


class _Confirmed:
    """A read handle that may read up to ``last`` although its own LAC view is lower.

    The driver planned the slice from a LAC that a bookie reported, so entries
    up to ``last`` are confirmed; the executor's READ_LAC may have heard other
    bookies that lag behind.  Entries beyond the handle's LAC are read as
    "unconfirmed" reads, which is safe for these ids.
    """

    def __init__(self, handle: Any, last: int) -> None:
        self._handle = handle
        self._last = last

    def batch_read(self, start: int, max_count: int, max_size: int) -> Any:
        if start <= self._handle.last_add_confirmed:
            return self._handle.batch_read(start, max_count, max_size)
        return self._handle.read_unconfirmed(start, min(self._last, start + max(1, max_count) - 1))

    def read(self, first: int, last: int) -> Any:
        lac = self._handle.last_add_confirmed
        if last <= lac:
            return self._handle.read(first, last)
        return self._handle.read_unconfirmed(first, min(last, self._last))

    @property
    def last_add_confirmed(self) -> int:
        return max(self._handle.last_add_confirmed, self._last)

    def read_batches(self, first: int, last: int, *, batch_size: int, **options: Any) -> Iterator[Any]:
        """The client's pipelined ``read_batches`` up to the handle's LAC, then unconfirmed reads of
        ``batch_size`` entries each up to ``last`` (the planned, confirmed end)."""
        from bkspark.client.arrow import payload_batch

        last = min(last, self._last)
        lac = self._handle.last_add_confirmed
        if first <= lac:
            yield from self._handle.read_batches(first, min(last, lac), batch_size=batch_size, **options)
            first = lac + 1
        while first <= last:
            entries = self._handle.read_unconfirmed(first, min(last, first + max(1, batch_size) - 1))
            if not entries:
                return  # the caller's count check names what is missing
            yield payload_batch(first, [entry.payload for entry in entries])
            first += len(entries)


class _SliceReader(BookKeeperReader):
    """The batch reader's ``read`` (Arrow batches, data-loss rule), for slices of possibly open ledgers."""

    def _read_slice(self, handle: Any, part: Any) -> Iterator[Any]:
        return super()._read_slice(_Confirmed(handle, part.last_entry), part)


class _Driver:
    """Driver-side state of one query (lives in Spark's long-lived Python stream-reader process)."""

    def __init__(self, options: ReadOptions, stream: StreamOptions) -> None:
        from bkspark.datasource.clients import get_client
        from bkspark.datasource.reader import _client_settings

        self.options = options
        self.stream = stream
        self.bk = get_client(options.metadata_service_uri, _client_settings(options))
        self.facts: dict[str, _LedgerFacts] = {}
        #: Ledger creation times seen (``startingTimestamp``), by offset key.
        self.ctimes: dict[str, int | None] = {}
        self.tails: dict[str, Any] = {}
        #: AvailableNow: the positions frozen at the start of the query.
        self.target: dict[str, int] | None = None
        self.last_batch_at = time.monotonic()
        self.last_positions: list[LedgerPosition] = []
        self.last_end: dict[str, Any] | None = None
        #: Set on the client's loop when the manifest changed (one watch armed at a time).
        self.changed = asyncio.Event()
        self._watch_armed = False

    # -- what to follow ------------------------------------------------------------------
    def source_keys(self) -> list[str]:
        """The ledgers the query follows now: the dataset's manifest, or the ``ledgers`` option."""
        opts = self.options
        if opts.dataset is not None:
            manifest = self._registry().manifest(opts.dataset)
            return [] if manifest is None else self._created_within([ledger_key(s, l) for s, l in manifest.ledgers])
        assert opts.ledger_ranges is not None
        listed = selected_ledgers(
            opts.ledger_ranges, lambda first, last: self.bk.store.list_ledgers_between(first, last, opts.scope_id)
        )
        return self._created_within([ledger_key(opts.scope_id, lid) for lid in listed])

    def _created_within(self, keys: list[str]) -> list[str]:
        """``keys`` minus the ledgers created before ``startingTimestamp`` (a creation time never changes, so each
        ledger is looked at once; a ledger already gone stays, and :meth:`positions` reports it)."""
        from bkspark.datasource.planning import ctime_admitted

        since = self.options.starting_timestamp_ms
        if since is None:
            return keys
        out = []
        for key in keys:
            if key not in self.ctimes:
                facts = self.ledger_facts(key)
                if facts is None:
                    out.append(key)
                    continue
                self.ctimes[key] = facts.ctime_ms
            if ctime_admitted(self.ctimes[key], since, None):
                out.append(key)
        return out

    def _registry(self) -> Any:
        from bkspark.datasource.clients import client_root, client_zk
        from bkspark.datasource.datasets import DatasetRegistry

        return DatasetRegistry(client_zk(self.bk), client_root(self.bk))

    def arm_watch(self) -> None:
        """Keep one ZooKeeper watch on the dataset's manifest armed; it sets :attr:`changed` when it fires."""
        if self.options.dataset is None or self._watch_armed:
            return
        self._watch_armed = True
        self._registry().watch_manifest(self.options.dataset, self._on_manifest_event)

    def _on_manifest_event(self, _event: Any) -> None:  # kazoo's event thread
        self._watch_armed = False
        self.bk.loop.call_soon_threadsafe(self.changed.set)

    # -- ledger facts and positions ---------------------------------------------------------
    def ledger_facts(self, key: str) -> _LedgerFacts | None:
        """The ledger's immutable facts (None: its metadata is gone); a closed ledger is cached for good."""
        from bkspark.errors import NoSuchLedgerMetadataError

        known = self.facts.get(key)
        if known is not None and known.closed_last is not None:
            return known
        scope_id, ledger_id = parse_key(key)
        try:
            md = self.bk.get_ledger_metadata(ledger_id, scope_id=scope_id)
        except NoSuchLedgerMetadataError:
            return None
        facts = self._facts_of(md)
        self.facts[key] = facts
        return facts

    @staticmethod
    def _facts_of(md: Any) -> _LedgerFacts:
        custom = tuple(sorted((k, bytes(v)) for k, v in (md.custom_metadata or {}).items()))
        last = md.last_entry_id if md.state.name == "CLOSED" else None
        return _LedgerFacts(md.ctime if md.ctime else None, custom, last, mean_entry_bytes(md))

    def _open_tail(self, key: str) -> Any:
        from bkspark.client.tail import LedgerTail

        scope_id, ledger_id = parse_key(key)
        handle = self.bk.open_ledger(
            ledger_id, scope_id=scope_id, recovery=False, password=self.options.password,
            digest_type=self.options.digest_type,
        )
        return LedgerTail(self.bk, handle, 0)

    def positions(self, keys: Sequence[str]) -> list[LedgerPosition]:
        """Where every ledger of ``keys`` stands now (open ones refreshed with a zero-timeout long poll)."""
        from bkspark.errors import NoSuchLedgerMetadataError

        missing: set[str] = set()
        for key in keys:
            if key in self.tails or key in missing:
                continue
            facts = self.ledger_facts(key)
            if facts is None:
                missing.add(key)
            elif facts.closed_last is None:
                try:
                    self.tails[key] = self._open_tail(key)
                except NoSuchLedgerMetadataError:
                    missing.add(key)
        wanted = [k for k in keys if k in self.tails]
        results = self.bk.refresh_tails([self.tails[k] for k in wanted])
        for key, result in zip(wanted, results):
            if isinstance(result, NoSuchLedgerMetadataError):
                missing.add(key)
                self.tails.pop(key, None)
            elif isinstance(result, BaseException):
                log.warning("ledger %s: could not refresh its LAC (%s); keeping the last known one", key, result)
        closed_sizes = [f.entry_size for f in self.facts.values() if f.entry_size]
        default_size = sum(closed_sizes) / len(closed_sizes) if closed_sizes else DEFAULT_ENTRY_SIZE
        out: list[LedgerPosition] = []
        for key in dict.fromkeys(keys):
            if key in missing:
                out.append(LedgerPosition(key, 0, False, missing=True))
                continue
            tail = self.tails.get(key)
            if tail is not None:
                if tail.closed:  # closed since we last looked: its facts are final now
                    self.tails.pop(key)
                    self.facts.pop(key, None)
                    facts = self.ledger_facts(key)
                    if facts is None:
                        out.append(LedgerPosition(key, 0, False, missing=True))
                        continue
                    out.append(LedgerPosition(key, facts.closed_last + 1, True, facts.entry_size or default_size))  # type: ignore[operator]
                else:
                    out.append(LedgerPosition(key, tail.lac + 1, False, float(tail.last_entry_size or default_size)))
                continue
            facts = self.facts[key]
            out.append(LedgerPosition(key, facts.closed_last + 1, True, facts.entry_size or default_size))  # type: ignore[operator]
        return out

    def wait_for_change(self, timeout_ms: int) -> None:
        """Block until an open ledger's LAC moves, the manifest changes, or ``timeout_ms`` passes."""
        self.arm_watch()
        tails = list(self.tails.values())
        self.bk.wait_for_tails(tails, timeout_ms, wake=self.changed)

    def close(self) -> None:
        self.tails.clear()


def _count_new(start: Mapping[str, Any], end: Mapping[str, Any], positions: list[LedgerPosition], start_entry: int) -> int:
    begin = positions_of(start)
    available = {p.key: p.available for p in positions}
    total = 0
    for key, stop in positions_of(end).items():
        first = begin.get(key, start_entry)
        if first == DONE or first == LATEST_ENTRY:
            continue
        if stop == DONE:
            stop = available.get(key, first)
        total += max(0, int(stop) - int(first))
    return total


class _StreamReader(DataSourceStreamReader):
    """Micro-batch reader of ledgers (``ledgers``) or of a dataset's ledgers (``dataset``), open ones included;
    :class:`BookKeeperStreamReader` adds the ``latestOffset`` of the installed PySpark's API."""

    def __init__(self, options: ReadOptions, stream: StreamOptions) -> None:
        self.options = options
        self.stream = stream
        self._slices = _SliceReader(options)
        self._driver: _Driver | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_driver"] = None  # sockets and threads never travel to the executors
        return state

    def _state(self) -> _Driver:
        if self._driver is None:
            self._driver = _Driver(self.options, self.stream)
        return self._driver

    # -- offsets (driver) ---------------------------------------------------------------------
    def initialOffset(self) -> dict:  # noqa: N802 - Spark's names
        return dict(self.stream.starting_offsets)

    def _keys(self, d: _Driver, start: Mapping[str, Any]) -> list[str]:
        if d.target is not None:
            return list(dict.fromkeys([*d.target, *positions_of(start)]))
        return list(dict.fromkeys([*d.source_keys(), *positions_of(start)]))

    def _clip(self, d: _Driver, positions: list[LedgerPosition]) -> list[LedgerPosition]:
        """AvailableNow: nothing beyond the positions frozen at the query's start."""
        if d.target is None:
            return positions
        out = []
        for pos in positions:
            stop = d.target.get(pos.key)
            if pos.missing:  # deleted: next_offset decides whether that lost anything
                out.append(pos)
            elif stop is None:
                continue
            elif stop == DONE:
                out.append(pos)
            else:
                out.append(LedgerPosition(pos.key, min(pos.available, stop), False, pos.entry_size))
        return out

    def _end(self, d: _Driver, start: Mapping[str, Any], admission: Admission) -> tuple[dict[str, Any], list[LedgerPosition]]:
        positions = self._clip(d, d.positions(self._keys(d, start)))
        end, lost = next_offset(start, positions, start_entry=self.options.start_entry, admission=admission)
        if lost:
            self._data_loss(lost)
        return end, positions

    def _data_loss(self, lost: list[str]) -> None:
        from bkspark.errors import NoSuchLedgerMetadataError

        where = f"dataset {self.options.dataset!r}" if self.options.dataset else "the 'ledgers' option"
        if self.options.fail_on_data_loss:
            raise NoSuchLedgerMetadataError(
                f"[BOOKKEEPER_DATA_LOSS] ledger(s) {', '.join(lost)} of {where} were deleted before the stream read "
                "them to their end; set .option('failOnDataLoss', 'false') to skip them and go on"
            )
        log.warning("ledgers %s of %s were deleted before they were read to their end: skipped", lost, where)

    def _latest_offset(self, start: dict, admission: Admission, check_min: bool) -> dict:
        """The end of the next micro-batch from ``start``: within ``admission``; with ``check_min``, waiting
        (up to ``maxTriggerDelay``) for ``minEntriesPerTrigger`` new entries."""
        d = self._state()
        end, positions = self._end(d, start, admission)
        waited = False
        if d.target is None and not start.get("latest"):
            minimum = self.stream.min_entries_per_trigger
            check_min = check_min and minimum is not None
            new = _count_new(start, end, positions, self.options.start_entry)
            elapsed_ms = (time.monotonic() - d.last_batch_at) * 1000
            if new == 0 or (check_min and new < minimum and elapsed_ms < self.stream.max_trigger_delay_ms):  # type: ignore[operator]
                timeout = self.stream.long_poll_timeout_ms
                if new > 0:
                    timeout = int(min(timeout, max(0, self.stream.max_trigger_delay_ms - elapsed_ms)))
                d.wait_for_change(timeout)
                waited = True
                end, positions = self._end(d, start, admission)
                new = _count_new(start, end, positions, self.options.start_entry)
                elapsed_ms = (time.monotonic() - d.last_batch_at) * 1000
                if check_min and new < minimum and elapsed_ms < self.stream.max_trigger_delay_ms:  # type: ignore[operator]
                    end = canonical(positions_of(start)) if not start.get("latest") else end
        log.debug("latestOffset waited=%s start=%s end=%s", waited, start, end)
        if end != canonical(positions_of(start)) or start.get("latest"):
            d.last_batch_at = time.monotonic()
        d.last_positions = positions
        d.last_end = end
        return end

    def reportLatestOffset(self) -> dict | None:  # noqa: N802
        """The newest confirmed positions and the lag behind them (Spark's progress shows it as ``latestOffset``)."""
        d = self._driver
        if d is None or d.last_end is None:
            return None
        latest = {p.key: (DONE if p.closed else p.available) for p in d.last_positions if not p.missing}
        entries, size = lag(d.last_end, d.last_positions, self.options.start_entry)
        report = canonical(latest)
        report["lag"] = {"bytes": size, "entries": entries,
                         **lag_per_ledger(d.last_end, d.last_positions, self.options.start_entry)}
        return report

    # -- planning (driver) and reading (executors) ---------------------------------------------------
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        from bkspark.datasource.planning import LedgerSlice, plan_partitions, split_ledger

        if start.get("latest"):
            return []  # batch 0 of startingOffsets=latest reads nothing: it only fixes where to begin
        d = self._state()
        begin = positions_of(start)
        slices: list[LedgerSlice] = []
        lost: list[str] = []
        for key, stop in positions_of(end).items():
            first = begin.get(key, self.options.start_entry)
            if first == DONE or first == LATEST_ENTRY:
                continue  # LATEST_ENTRY: batch 0 only fixes where that ledger's latest is
            facts = d.ledger_facts(key)
            if facts is None:
                if stop == DONE and first != DONE:
                    lost.append(key)
                elif stop > first:
                    lost.append(key)
                continue
            if stop == DONE:
                stop = (facts.closed_last if facts.closed_last is not None else -1) + 1
            if stop <= first:
                continue
            scope_id, ledger_id = parse_key(key)
            slices.extend(
                split_ledger(
                    scope_id, ledger_id, first, stop - 1, self.options.max_entries_per_partition,
                    ctime_ms=facts.ctime_ms, custom_metadata=facts.custom_metadata,
                    ledger_open=facts.closed_last is None, entry_bytes=facts.entry_size,
                    max_bytes_per_partition=self.options.max_bytes_per_partition,
                )
            )
        if lost:
            self._data_loss(lost)
        opts = self._slices.options
        return plan_partitions(
            slices, opts.max_entries_per_partition,
            min_partitions=opts.min_partitions, max_partitions=opts.max_partitions,
            max_bytes_per_partition=opts.max_bytes_per_partition,
        )

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return self._slices.read(partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: the stream holds no server-side cursor (Spark's checkpoint is the cursor)."""

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()
            self._driver = None


if ADMISSION_CONTROL:  # PySpark 4.2+: Spark hands latestOffset the start and a read limit
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    class BookKeeperStreamReader(_StreamReader, SupportsTriggerAvailableNow):
        """The stream reader with admission control and ``Trigger.AvailableNow`` (docs/streaming.md)."""

        def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's names
            s = self.stream
            if s.max_entries_per_trigger is not None:
                return ReadMaxRows(s.max_entries_per_trigger)
            if s.max_bytes_per_trigger is not None:
                return ReadMaxBytes(s.max_bytes_per_trigger)
            if s.min_entries_per_trigger is not None:
                return ReadMinRows(s.min_entries_per_trigger)
            return ReadAllAvailable()

        def _admission(self, limit: ReadLimit) -> Admission:
            """The engine's limit, plus the option limits it could not carry (unless it asked for everything)."""
            if isinstance(limit, ReadAllAvailable):
                return Admission()
            s = self.stream
            rows = limit.max_rows if isinstance(limit, ReadMaxRows) else s.max_entries_per_trigger
            size = limit.max_bytes if isinstance(limit, ReadMaxBytes) else s.max_bytes_per_trigger
            return Admission(rows, size)

        def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
            return self._latest_offset(start, self._admission(limit), not isinstance(limit, ReadAllAvailable))

        def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
            """Freeze the target: what is confirmed now, in the ledgers the query follows now."""
            d = self._state()
            keys = list(dict.fromkeys(d.source_keys()))
            d.target = {p.key: (DONE if p.closed or p.missing else p.available) for p in d.positions(keys)}

else:  # PySpark 4.0 and 4.1 (bkspark/datasource/spark_features.py)

    class BookKeeperStreamReader(_StreamReader):  # type: ignore[no-redef]
        """The stream reader for a Spark that asks ``latestOffset()`` with no start and no limit: every batch
        reads all that is available from where the previous one ended (the per-trigger limits are refused by
        :func:`parse_stream_read_options`), and ``Trigger.AvailableNow`` is Spark's one batch to the offset it
        reads when the query starts."""

        def latestOffset(self) -> dict:  # type: ignore[override]  # noqa: N802 - PySpark 4.0's signature
            d = self._state()
            # This process lives as long as the query; a restarted query starts from the initial offset, which
            # reads everything available, never less than the checkpoint's end.
            start = d.last_end if d.last_end is not None else self.initialOffset()
            return self._latest_offset(start, Admission(), check_min=False)
