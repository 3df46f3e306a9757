"""Offsets of a Pulsar stream (docs/pulsar.md, "Streaming"), and its admission control: pure functions, no I/O.

An offset names, for every topic partition the query follows, the position of the next message to read, as
Pulsar orders messages (ledger id, entry id, batch index)::

    {"topics": {"persistent://public/default/t-partition-0": {"ledgerId": 12, "entryId": 40, "batchIndex": -1}}}

``batchIndex`` -1 is the start of the entry (every message of it is still to read, Pulsar's own id of a message
that is not in a batch); ``b >= 1`` is inside a batch: its messages ``b..`` are still to read (a messages budget
may end a micro-batch there).  A partition not named starts at its earliest message.  Spark compares offsets as
JSON text, so every offset is built in one order (:func:`canonical`, partitions by name).  ``{"latest": true}``
(:data:`LATEST`) is the initial offset of ``startingOffsets=latest``: the first ``latestOffset`` resolves it to
where every partition ends, and batch 0 reads nothing (a replay of batch 0 after a restart asks for the same
initial offset, so nothing is skipped or repeated).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from bkspark.datasource.stream_offsets import Admission, LedgerPosition, _shares
from bkspark.errors import InvalidOptionError

#: The options only a Pulsar stream takes (docs/pulsar.md, "Streaming"), by their names; aliases map to them.
STREAM_OPTIONS = ("startingOffsets", "maxEntriesPerTrigger", "maxBytesPerTrigger", "maxMessagesPerTrigger",
                  "longPollTimeoutMs")
STREAM_ALIASES = {"maxOffsetsPerTrigger": "maxEntriesPerTrigger"}

__all__ = [
    "LATEST", "ENTRY_START", "Position", "ReadableLedger", "PartitionView", "canonical", "positions_of",
    "parse_stream_starting_offsets", "readable_end", "entries_waiting", "grant_entries", "admit",
    "STREAM_OPTIONS", "STREAM_ALIASES", "pulsar_schema_of_any",
]

#: The initial offset of ``startingOffsets=latest``.
LATEST: dict[str, Any] = {"latest": True}
#: The batch index of a position at the start of an entry.
ENTRY_START = -1

#: (ledger id, entry id, batch index) of the next message to read.
Position = tuple[int, int, int]


@dataclass(frozen=True)
class ReadableLedger:
    """One ledger of a partition as the driver sees it now: entries ``0..available-1`` are readable (a closed
    ledger's entries, an open one's up to its LAC)."""

    ledger_id: int
    available: int
    closed: bool
    entry_size: float = 1024.0


@dataclass(frozen=True)
class PartitionView:
    """A partition's readable ledgers now, in the topic's order (ledger ids grow)."""

    topic: str
    ledgers: tuple[ReadableLedger, ...]


def canonical(positions: Mapping[str, Position]) -> dict[str, Any]:
    """The offset of these partition positions, partitions by name."""
    return {"topics": {name: {"ledgerId": int(p[0]), "entryId": int(p[1]), "batchIndex": int(p[2])}
                       for name, p in sorted(positions.items())}}


def positions_of(offset: Mapping[str, Any]) -> dict[str, Position]:
    """The positions of an offset (empty for :data:`LATEST`)."""
    return {name: (int(p["ledgerId"]), int(p["entryId"]), int(p["batchIndex"]))
            for name, p in (offset.get("topics") or {}).items()}


def _bad(raw: str) -> InvalidOptionError:
    return InvalidOptionError(
        f"[BOOKKEEPER_INVALID_OPTION] option 'startingOffsets'={raw!r} is invalid: expected 'earliest', 'latest' "
        "or a JSON object of topic (a partition by its own name) to a message id (the bytes of "
        "MessageId.toByteArray() as a JSON array, or {\"ledgerId\": L, \"entryId\": E, \"batchIndex\": B} as a "
        "stream's offset shows it), -2 (earliest) or -1 (latest)"
    )


def parse_stream_starting_offsets(raw_text: str | None) -> tuple[dict[str, Any], dict[str, str]]:
    """``startingOffsets`` of a stream -> (initial offset, partitions to start at their latest).

    ``earliest`` (default), ``latest``, or JSON per topic or partition: a message id's bytes (StreamNative's
    form, as the batch read takes them), a position as the stream's own offsets show it (an offset copied from a
    progress report, with its ``{"topics": ...}`` wrapper or without), ``-2`` earliest or ``-1`` latest."""
    from bkspark.pulsar.proto.PulsarApi_pb2 import MessageIdData
    from bkspark.pulsar.topics import parse_topic_name

    raw = (raw_text or "earliest").strip()
    if raw.lower() == "earliest":
        return canonical({}), {}
    if raw.lower() == "latest":
        return dict(LATEST), {}
    try:
        spec = json.loads(raw)
    except ValueError:
        raise _bad(raw) from None
    if isinstance(spec, dict) and set(spec) == {"topics"} and isinstance(spec["topics"], dict):
        spec = spec["topics"]
    if not isinstance(spec, dict):
        raise _bad(raw)
    positions: dict[str, Position] = {}
    latest: dict[str, str] = {}
    for topic, value in spec.items():
        name = str(parse_topic_name(str(topic)))
        if value == -2:
            continue
        if value == -1:
            latest[name] = "latest"
        elif isinstance(value, dict):
            try:
                position = (int(value["ledgerId"]), int(value["entryId"]), int(value.get("batchIndex", -1)))
            except (KeyError, TypeError, ValueError):
                raise _bad(raw) from None
            if min(position[:2]) < 0 or position[2] < ENTRY_START:
                raise _bad(raw)
            positions[name] = _entry_start_if_first(position)
        elif isinstance(value, list) and all(isinstance(b, int) and -128 <= b <= 255 for b in value):
            data = MessageIdData()
            try:
                data.ParseFromString(bytes(b & 0xFF for b in value))
            except Exception:  # noqa: BLE001 - protobuf's DecodeError
                raise _bad(raw) from None
            if not data.IsInitialized():
                raise _bad(raw)
            positions[name] = _entry_start_if_first((data.ledgerId, data.entryId, data.batch_index))
        else:
            raise _bad(raw)
    return canonical(positions), latest


def _entry_start_if_first(position: Position) -> Position:
    """Batch index 0 and -1 both start at the entry's first message: one spelling, so offsets compare equal."""
    ledger, entry, index = position
    return (ledger, entry, ENTRY_START if index <= 0 else index)


def earliest(view: PartitionView) -> Position | None:
    return (view.ledgers[0].ledger_id, 0, ENTRY_START) if view.ledgers else None


def readable_end(view: PartitionView) -> Position | None:
    """Where a partition's readable messages end (exclusive): after the last readable entry of its last ledger."""
    if not view.ledgers:
        return None
    last = view.ledgers[-1]
    return (last.ledger_id, last.available, ENTRY_START)


def entries_waiting(view: PartitionView, start: Position, limit: Position | None = None) -> list[tuple[int, int, int]]:
    """``(ledger id, first entry, last entry)`` of the readable entries from ``start`` on (the entry ``start`` is
    inside, when it is inside a batch, counts), stopping before ``limit`` (AvailableNow's frozen end)."""
    out = []
    for ledger in view.ledgers:
        if ledger.ledger_id < start[0]:
            continue
        first = start[1] if ledger.ledger_id == start[0] else 0
        last = ledger.available - 1
        if limit is not None:
            if ledger.ledger_id > limit[0]:
                break
            if ledger.ledger_id == limit[0]:
                last = min(last, limit[1] - (1 if limit[2] == ENTRY_START else 0))
        if last >= first:
            out.append((ledger.ledger_id, first, last))
    return out


def grant_entries(view: PartitionView, start: Position, granted: int, limit: Position | None = None) -> Position:
    """The position after ``granted`` of the entries waiting from ``start``; the next ledger's start when that
    is the end of a closed ledger the broker rolled from (so an offset never names a ledger read to its end)."""
    if granted <= 0:
        return start
    end = start
    left = granted
    for ledger_id, first, last in entries_waiting(view, start, limit):
        take = min(left, last - first + 1)
        end = (ledger_id, first + take, ENTRY_START)
        left -= take
        if left == 0:
            break
    return _rolled(view, end)


def _rolled(view: PartitionView, position: Position) -> Position:
    for index, ledger in enumerate(view.ledgers[:-1]):
        if ledger.ledger_id == position[0] and ledger.closed and position[1] >= ledger.available:
            return _rolled(view, (view.ledgers[index + 1].ledger_id, 0, ENTRY_START))
    return position


def entry_size(view: PartitionView) -> float:
    sizes = [ledger.entry_size for ledger in view.ledgers if ledger.entry_size > 0]
    return sum(sizes) / len(sizes) if sizes else 1024.0


def admit(
    views: Iterable[PartitionView], starts: Mapping[str, Position], admission: Admission,
    limits: Mapping[str, Position] | None = None,
) -> dict[str, Position]:
    """The end position of every partition for the next micro-batch: everything readable within the entries and
    bytes limits, split across partitions in proportion to what each has waiting (the ledger stream's rule,
    docs/streaming.md, "Admission control"); at least one entry when any is waiting.  A partition with nothing
    admitted keeps its start."""
    views = [v for v in views if v.ledgers]
    waiting = []
    for view in views:
        start = starts.get(view.topic) or earliest(view)
        assert start is not None
        limit = None if limits is None else limits.get(view.topic, start)
        room = sum(last - first + 1 for _, first, last in entries_waiting(view, start, limit))
        waiting.append((LedgerPosition(view.topic, 0, False, entry_size(view)), 0, room))
    grants = _shares(waiting, admission)
    out: dict[str, Position] = dict(starts)
    for view, grant in zip(views, grants):
        start = starts.get(view.topic) or earliest(view)
        assert start is not None
        if grant > 0:
            out[view.topic] = grant_entries(view, start, grant, None if limits is None else limits.get(view.topic))
        elif view.topic in starts:
            out[view.topic] = starts[view.topic]
    return out


def pulsar_schema_of_any(options: Mapping[str, str | None]) -> Any:
    """The columns of a Pulsar read or stream (Spark asks the data source for them before it knows which): the
    read options checked, the stream-only ones left to ``pulsar_stream.pulsar_stream_reader`` (a batch read
    refuses them when it is planned).  Here, not in ``pulsar_stream`` (which needs PySpark 4.2's streaming
    classes), so that a batch read works on every PySpark release."""
    from bkspark.datasource.pulsar_reader import pulsar_schema

    stream_only = {n.lower() for n in (*STREAM_OPTIONS, *STREAM_ALIASES)}
    return pulsar_schema({k: v for k, v in options.items() if str(k).lower() not in stream_only})
