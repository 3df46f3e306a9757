"""The BP-44 codec: ledger create and close contexts, their builders and their customMetadata encoding.

Apache BookKeeper has nothing of this, so the context must live where Java
keeps what it does not understand *intact*: the ledger's ``customMetadata``.
Every Java metadata update (close, recovery, ensemble change, re-replication)
copies ``customMetadata`` as it found it, while a new protobuf field would be
dropped.  Three keys, all under the ``bkspark.ctx.`` prefix:

* ``bkspark.ctx.create`` -- the :class:`LedgerCreateContext`, compact UTF-8 JSON,
  written once with the ledger's first metadata;
* ``bkspark.ctx.close`` -- the :class:`LedgerCloseContext`, compact UTF-8 JSON,
  written by :func:`close_with_context` right after the ledger is CLOSED;
* ``bkspark.ctx.sealTime`` -- when the ledger was closed, ASCII decimal ms since
  the epoch (the companion of the metadata's ``ctime``).

Every JSON value carries ``"v": 1``; readers ignore fields they do not know, so
later versions can add fields.  Sizes are bounded by construction (every
string <= 256 bytes) and refused above :data:`MAX_VALUE_BYTES` when read.
docs/context-and-audit.md is the reference for the encoding.

Builders are immutable (every method returns a new builder) and validate each
argument as it is given; the contexts themselves are frozen dataclasses that
validate again on construction.  A context someone else stored that we cannot
read raises :class:`~bkspark.errors.BadLedgerContextError`, never anything else.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from bkspark.config.typed import is_finite_number, is_int
from bkspark.protocol.values import INT64_MAX, is_int64
from bkspark.errors import BadLedgerContextError, InvalidOptionError
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState

__all__ = [
    "CREATE_KEY",
    "CLOSE_KEY",
    "SEAL_TIME_KEY",
    "CONTEXT_PREFIX",
    "MAX_NAME_BYTES",
    "MAX_ERROR_MESSAGE_CHARS",
    "MAX_VALUE_BYTES",
    "ENCODING_VERSION",
    "Party",
    "LedgerLink",
    "EntrySizeHint",
    "CloseReason",
    "LedgerCreateContext",
    "LedgerCreateContextBuilder",
    "LedgerCloseContext",
    "LedgerCloseContextBuilder",
    "LedgerContext",
    "read_context",
    "read_create_context",
    "read_close_context",
    "read_seal_time",
]

CONTEXT_PREFIX = "bkspark.ctx."
CREATE_KEY = CONTEXT_PREFIX + "create"
CLOSE_KEY = CONTEXT_PREFIX + "close"
SEAL_TIME_KEY = CONTEXT_PREFIX + "sealTime"
#: The seed's bound on a data set name, used for every identifying string (UTF-8 bytes).
MAX_NAME_BYTES = 256
#: The seed's bound on ``closingAbnormally``'s message (characters).
MAX_ERROR_MESSAGE_CHARS = 256
#: The largest stored value a reader accepts; what we write is always well below.
MAX_VALUE_BYTES = 8192
#: The ``"v"`` we write.
ENCODING_VERSION = 1

_MAX_SEAL_DIGITS = 19


def _check_name(value: object, what: str, max_bytes: int = MAX_NAME_BYTES) -> str:
    if not isinstance(value, str):
        raise InvalidOptionError(f"{what} must be a string, not {type(value).__name__}")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise InvalidOptionError(f"{what} is {size} bytes in UTF-8; at most {max_bytes} allowed")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidOptionError(f"{what} is not valid Unicode (lone surrogate)") from None
    return value


def _check_count(value: object, what: str, minimum: int = 0) -> int:
    if not is_int(value):
        raise InvalidOptionError(f"{what} must be an integer, not {type(value).__name__}")
    if not minimum <= value <= INT64_MAX:
        raise InvalidOptionError(f"{what} {value} out of range [{minimum}, {INT64_MAX}]")
    return value


def _check_scope(value: object) -> int:
    if not is_int64(value):
        raise InvalidOptionError(f"scope id {value!r} is not an int64")
    return value  # type: ignore[return-value]


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _to_ms(instant: datetime) -> int:
    """Exact milliseconds since the epoch (no float rounding)."""
    return (instant - _EPOCH) // timedelta(milliseconds=1)


def _check_instant(value: object, what: str) -> datetime:
    """An aware datetime, normalised to UTC and millisecond precision (what the encoding keeps)."""
    if isinstance(value, bool) or not isinstance(value, datetime):
        raise InvalidOptionError(f"{what} must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidOptionError(f"{what} must be timezone-aware (a naive datetime names no instant)")
    utc = value.astimezone(timezone.utc)
    utc = utc.replace(microsecond=utc.microsecond - utc.microsecond % 1000)
    ms = _to_ms(utc)
    if not 0 <= ms <= INT64_MAX:
        raise InvalidOptionError(f"{what} {value.isoformat()} is before the epoch")
    return utc


def _from_ms(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


@dataclass(frozen=True)
class Party:
    """Who created a ledger, or on whose behalf: the seed's ``(enterprise, system, service, instance)``."""

    enterprise: str
    system: str
    service: str
    instance: str

    def __post_init__(self) -> None:
        for name in ("enterprise", "system", "service", "instance"):
            _check_name(getattr(self, name), name)

    def to_json(self) -> dict[str, str]:
        return {"enterprise": self.enterprise, "system": self.system, "service": self.service, "instance": self.instance}


@dataclass(frozen=True)
class LedgerLink:
    """A reference to another ledger (``followsLedger``/``childOfLedger``); ``scope_id`` for BP-35 ledgers."""

    ledger_id: int
    scope_id: int = 0

    def __post_init__(self) -> None:
        _check_count(self.ledger_id, "ledger id")
        _check_scope(self.scope_id)

    def to_json(self) -> dict[str, int]:
        return {"ledgerId": self.ledger_id, "scopeId": self.scope_id}


@dataclass(frozen=True)
class EntrySizeHint:
    """``expectedAverageEntrySize(sizeInBytes, standardDeviation)``."""

    size_in_bytes: int
    standard_deviation: float = 0.0

    def __post_init__(self) -> None:
        _check_count(self.size_in_bytes, "expected average entry size")
        sd = self.standard_deviation
        if not is_finite_number(sd) or sd < 0:
            raise InvalidOptionError(f"standard deviation must be a finite number >= 0, not {sd!r}")
        object.__setattr__(self, "standard_deviation", float(sd))

    def to_json(self) -> dict[str, Any]:
        return {"sizeInBytes": self.size_in_bytes, "standardDeviation": self.standard_deviation}


class CloseReason(str, enum.Enum):
    """Why a ledger was closed (one of the seed's ``because...()`` calls)."""

    CLIENT_SHUTDOWN = "CLIENT_SHUTDOWN"
    MAX_LENGTH_REACHED = "MAX_LENGTH_REACHED"
    MAX_ENTRY_COUNT_REACHED = "MAX_ENTRY_COUNT_REACHED"
    NO_MORE_DATA = "NO_MORE_DATA"
    INACTIVE = "INACTIVE"
    TIME_ROTATION = "TIME_ROTATION"


# ---------------------------------------------------------------------------------------------------------------
# Create context


@dataclass(frozen=True)
class LedgerCreateContext:
    """What a client says about a ledger when it creates it (all hints; BookKeeper enforces none)."""

    created_by: Party | None = None
    created_on_behalf_of: Party | None = None
    data_set: str | None = None
    expected_max_open_duration: timedelta | None = None
    expected_average_entry_size: EntrySizeHint | None = None
    expected_max_entries: int | None = None
    expected_max_length: int | None = None
    expected_average_entry_add_rate_per_second: int | None = None
    expected_maximum_entry_add_rate_per_second: int | None = None
    follows_ledger: LedgerLink | None = None
    child_of_ledger: LedgerLink | None = None

    def __post_init__(self) -> None:
        for name in ("created_by", "created_on_behalf_of"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Party):
                raise InvalidOptionError(f"{name} must be a Party")
        if self.data_set is not None:
            _check_name(self.data_set, "data set identifier")
        duration = self.expected_max_open_duration
        if duration is not None:
            if not isinstance(duration, timedelta):
                raise InvalidOptionError("expected max open duration must be a timedelta")
            if duration <= timedelta(0):
                raise InvalidOptionError(f"expected max open duration must be positive, not {duration}")
            if duration // timedelta(milliseconds=1) > INT64_MAX:
                raise InvalidOptionError("expected max open duration is too long")
            object.__setattr__(self, "expected_max_open_duration", timedelta(milliseconds=duration // timedelta(milliseconds=1)))
        if self.expected_average_entry_size is not None and not isinstance(self.expected_average_entry_size, EntrySizeHint):
            raise InvalidOptionError("expected average entry size must be an EntrySizeHint")
        for name in (
            "expected_max_entries",
            "expected_max_length",
            "expected_average_entry_add_rate_per_second",
            "expected_maximum_entry_add_rate_per_second",
        ):
            value = getattr(self, name)
            if value is not None:
                _check_count(value, name.replace("_", " "))
        avg, peak = self.expected_average_entry_add_rate_per_second, self.expected_maximum_entry_add_rate_per_second
        if avg is not None and peak is not None and avg > peak:
            raise InvalidOptionError(f"expected average add rate {avg}/s is above the expected maximum {peak}/s")
        for name in ("follows_ledger", "child_of_ledger"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, LedgerLink):
                raise InvalidOptionError(f"{name} must be a LedgerLink")

    @staticmethod
    def builder() -> "LedgerCreateContextBuilder":
        """An empty builder (the seed's ``LedgerCreateContext.builder()``)."""
        return LedgerCreateContextBuilder()

    # -- encoding ------------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The stored JSON object (fields that are not set are left out)."""
        out: dict[str, Any] = {"v": ENCODING_VERSION}
        if self.created_by is not None:
            out["createdBy"] = self.created_by.to_json()
        if self.created_on_behalf_of is not None:
            out["onBehalfOf"] = self.created_on_behalf_of.to_json()
        if self.data_set is not None:
            out["dataSet"] = self.data_set
        if self.expected_max_open_duration is not None:
            out["expectedMaxOpenDurationMs"] = self.expected_max_open_duration // timedelta(milliseconds=1)
        if self.expected_average_entry_size is not None:
            out["expectedAverageEntrySize"] = self.expected_average_entry_size.to_json()
        for attr, key in _CREATE_COUNTS:
            value = getattr(self, attr)
            if value is not None:
                out[key] = value
        if self.follows_ledger is not None:
            out["followsLedger"] = self.follows_ledger.to_json()
        if self.child_of_ledger is not None:
            out["childOfLedger"] = self.child_of_ledger.to_json()
        return out

    def to_bytes(self) -> bytes:
        """The value of :data:`CREATE_KEY`: compact, key-sorted UTF-8 JSON."""
        return _dump(self.to_json())

    @classmethod
    def from_bytes(cls, data: bytes) -> "LedgerCreateContext":
        """Parse a stored value; :class:`BadLedgerContextError` for anything we cannot read."""
        obj = _load(data, CREATE_KEY)
        try:
            return cls(
                created_by=_party(obj, "createdBy"),
                created_on_behalf_of=_party(obj, "onBehalfOf"),
                data_set=_opt(obj, "dataSet", str),
                expected_max_open_duration=(
                    None
                    if (ms := _opt(obj, "expectedMaxOpenDurationMs", int)) is None
                    else timedelta(milliseconds=ms)
                ),
                expected_average_entry_size=_entry_size(obj),
                follows_ledger=_link(obj, "followsLedger"),
                child_of_ledger=_link(obj, "childOfLedger"),
                **{attr: _opt(obj, key, int) for attr, key in _CREATE_COUNTS},
            )
        except (InvalidOptionError, OverflowError) as exc:
            raise BadLedgerContextError(f"bad create context in {CREATE_KEY}: {exc}") from None

    def to_custom_metadata(self, base: Mapping[str, bytes] | None = None) -> dict[str, bytes]:
        """``base`` (the caller's own custom metadata) plus this context, for ``create_ledger(custom_metadata=...)``.

        Keys of ours already in ``base`` are refused: a context is written by
        this module, never smuggled in by hand.
        """
        out = dict(base or {})
        clash = sorted(k for k in out if k.startswith(CONTEXT_PREFIX))
        if clash:
            raise InvalidOptionError(f"custom metadata keys {clash} are reserved for the ledger context")
        out[CREATE_KEY] = self.to_bytes()
        return out

    # -- views -----------------------------------------------------------------------------------------------------

    def owner(self) -> dict[str, Any]:
        """The seed's ``showowner`` document: createdBy, onBehalfOf, dataSet."""
        return {
            "createdBy": None if self.created_by is None else self.created_by.to_json(),
            "onBehalfOf": None if self.created_on_behalf_of is None else self.created_on_behalf_of.to_json(),
            "dataSet": self.data_set,
        }


_CREATE_COUNTS: tuple[tuple[str, str], ...] = (
    ("expected_max_entries", "expectedMaxEntries"),
    ("expected_max_length", "expectedMaxLength"),
    ("expected_average_entry_add_rate_per_second", "expectedAverageEntryAddRatePerSecond"),
    ("expected_maximum_entry_add_rate_per_second", "expectedMaximumEntryAddRatePerSecond"),
)


@dataclass(frozen=True)
class LedgerCreateContextBuilder:
    """Immutable builder for :class:`LedgerCreateContext`: each call checks its input and returns a new builder.

    Method names are the seed's in snake_case; the seed's camelCase names are aliases.
    """

    _fields: tuple[tuple[str, Any], ...] = ()

    def _with(self, **changes: Any) -> "LedgerCreateContextBuilder":
        fields = dict(self._fields)
        fields.update(changes)
        return LedgerCreateContextBuilder(tuple(fields.items()))

    def created_by(self, enterprise: str, system: str, service: str, instance: str) -> "LedgerCreateContextBuilder":
        """The entity that created the ledger (each part <= 256 bytes of UTF-8)."""
        return self._with(created_by=Party(enterprise, system, service, instance))

    def created_on_behalf_of(
        self, enterprise: str, system: str, service: str, instance: str
    ) -> "LedgerCreateContextBuilder":
        """The original owner when the creator is itself multi-tenant."""
        return self._with(created_on_behalf_of=Party(enterprise, system, service, instance))

    def part_of_data_set(self, data_set_identifier: str) -> "LedgerCreateContextBuilder":
        """The named data set this ledger belongs to (<= 256 bytes of UTF-8)."""
        return self._with(data_set=_check_name(data_set_identifier, "data set identifier"))

    def expected_max_open_duration(self, duration: timedelta) -> "LedgerCreateContextBuilder":
        """Hint: the ledger closes on or before create time + ``duration`` (not enforced)."""
        LedgerCreateContext(expected_max_open_duration=duration)
        return self._with(expected_max_open_duration=duration)

    def expected_average_entry_size(self, size_in_bytes: int, standard_deviation: float) -> "LedgerCreateContextBuilder":
        """Hint: average entry size and its standard deviation."""
        return self._with(expected_average_entry_size=EntrySizeHint(size_in_bytes, standard_deviation))

    def expected_max_entries(self, entry_count: int) -> "LedgerCreateContextBuilder":
        """Hint: the ledger closes after at most this many entries."""
        return self._with(expected_max_entries=_check_count(entry_count, "expected max entries"))

    def expected_max_length(self, length: int) -> "LedgerCreateContextBuilder":
        """Hint: the ledger closes after at most this many bytes."""
        return self._with(expected_max_length=_check_count(length, "expected max length"))

    def expected_average_entry_add_rate_per_second(self, entry_count: int) -> "LedgerCreateContextBuilder":
        """Hint: average adds per second (not a rate limit)."""
        return self._with(
            expected_average_entry_add_rate_per_second=_check_count(entry_count, "expected average add rate")
        )

    def expected_maximum_entry_add_rate_per_second(self, entry_count: int) -> "LedgerCreateContextBuilder":
        """Hint: peak adds per second (not a rate limit)."""
        return self._with(
            expected_maximum_entry_add_rate_per_second=_check_count(entry_count, "expected maximum add rate")
        )

    def follows_ledger(self, preceding_ledger_id: int, scope_id: int = 0) -> "LedgerCreateContextBuilder":
        """This ledger directly follows another one in an ordered stream of ledgers."""
        return self._with(follows_ledger=LedgerLink(preceding_ledger_id, scope_id))

    def child_of_ledger(self, parent_ledger_id: int, scope_id: int = 0) -> "LedgerCreateContextBuilder":
        """This ledger is a child of another; the audit flags it once the parent is gone."""
        return self._with(child_of_ledger=LedgerLink(parent_ledger_id, scope_id))

    def build(self) -> LedgerCreateContext:
        """The immutable context (cross-field checks happen here)."""
        return LedgerCreateContext(**dict(self._fields))

    # The seed's (Java) names.
    createdBy = created_by
    createdOnBehalfOf = created_on_behalf_of
    partOfDataSet = part_of_data_set
    expectedMaxOpenDuration = expected_max_open_duration
    expectedAverageEntrySize = expected_average_entry_size
    expectedMaxEntries = expected_max_entries
    expectedMaxLength = expected_max_length
    expectedAverageEntryAddRatePerSecond = expected_average_entry_add_rate_per_second
    expectedMaximumEntryAddRatePerSecond = expected_maximum_entry_add_rate_per_second
    followsLedger = follows_ledger
    childOfLedger = child_of_ledger


# ---------------------------------------------------------------------------------------------------------------
# Close context


@dataclass(frozen=True)
class LedgerCloseContext:
    """What a client says about a ledger when it closes it.

    At most one ``reason``; ``abnormal`` (with an optional message of at most
    256 characters) may accompany any reason, e.g. an unexpected shutdown.
    """

    reason: CloseReason | None = None
    abnormal: bool = False
    error_message: str | None = None
    expect_delete_after: datetime | None = None
    expect_reads_until: datetime | None = None

    def __post_init__(self) -> None:
        if self.reason is not None:
            try:
                object.__setattr__(self, "reason", CloseReason(self.reason))
            except ValueError:
                raise InvalidOptionError(f"unknown close reason {self.reason!r}") from None
        if not isinstance(self.abnormal, bool):
            raise InvalidOptionError("abnormal must be a bool")
        if self.error_message is not None:
            if not self.abnormal:
                raise InvalidOptionError("an error message needs closing_abnormally()")
            if not isinstance(self.error_message, str):
                raise InvalidOptionError("error message must be a string")
            if len(self.error_message) > MAX_ERROR_MESSAGE_CHARS:
                raise InvalidOptionError(
                    f"error message is {len(self.error_message)} characters; at most {MAX_ERROR_MESSAGE_CHARS} allowed"
                )
            _check_name(self.error_message, "error message", max_bytes=4 * MAX_ERROR_MESSAGE_CHARS)
        for name in ("expect_delete_after", "expect_reads_until"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _check_instant(value, name.replace("_", " ")))
        if (
            self.expect_delete_after is not None
            and self.expect_reads_until is not None
            and self.expect_reads_until > self.expect_delete_after
        ):
            raise InvalidOptionError("reads cannot be expected after the ledger is expected to be deleted")

    @staticmethod
    def builder() -> "LedgerCloseContextBuilder":
        """An empty builder (the seed's ``LedgerCloseContext.builder()``)."""
        return LedgerCloseContextBuilder()

    def to_json(self) -> dict[str, Any]:
        """The stored JSON object (fields that are not set are left out; ``abnormal`` always present)."""
        out: dict[str, Any] = {"v": ENCODING_VERSION, "abnormal": self.abnormal}
        if self.reason is not None:
            out["reason"] = self.reason.value
        if self.error_message is not None:
            out["errorMessage"] = self.error_message
        if self.expect_delete_after is not None:
            out["expectDeleteAfterMs"] = _to_ms(self.expect_delete_after)
        if self.expect_reads_until is not None:
            out["expectReadsUntilMs"] = _to_ms(self.expect_reads_until)
        return out

    def to_bytes(self) -> bytes:
        """The value of :data:`CLOSE_KEY`: compact, key-sorted UTF-8 JSON."""
        return _dump(self.to_json())

    @classmethod
    def from_bytes(cls, data: bytes) -> "LedgerCloseContext":
        """Parse a stored value; :class:`BadLedgerContextError` for anything we cannot read."""
        obj = _load(data, CLOSE_KEY)
        try:
            reason = _opt(obj, "reason", str)
            delete_ms = _opt(obj, "expectDeleteAfterMs", int)
            reads_ms = _opt(obj, "expectReadsUntilMs", int)
            abnormal = _opt(obj, "abnormal", bool)
            return cls(
                reason=None if reason is None else CloseReason(reason),
                abnormal=bool(abnormal),
                error_message=_opt(obj, "errorMessage", str),
                expect_delete_after=None if delete_ms is None else _from_ms(_check_count(delete_ms, "expectDeleteAfterMs")),
                expect_reads_until=None if reads_ms is None else _from_ms(_check_count(reads_ms, "expectReadsUntilMs")),
            )
        except ValueError as exc:  # InvalidOptionError is one; so is an unknown CloseReason
            raise BadLedgerContextError(f"bad close context in {CLOSE_KEY}: {exc}") from None
        except (OverflowError, OSError) as exc:
            raise BadLedgerContextError(f"bad close context in {CLOSE_KEY}: instant out of range ({exc})") from None


@dataclass(frozen=True)
class LedgerCloseContextBuilder:
    """Immutable builder for :class:`LedgerCloseContext` (snake_case methods, the seed's camelCase aliases)."""

    _fields: tuple[tuple[str, Any], ...] = ()

    def _with(self, **changes: Any) -> "LedgerCloseContextBuilder":
        fields = dict(self._fields)
        fields.update(changes)
        return LedgerCloseContextBuilder(tuple(fields.items()))

    def _because(self, reason: CloseReason) -> "LedgerCloseContextBuilder":
        current = dict(self._fields).get("reason")
        if current is not None and current != reason:
            raise InvalidOptionError(f"close reason already set to {current.value}; cannot also be {reason.value}")
        return self._with(reason=reason)

    def because_client_shutdown(self) -> "LedgerCloseContextBuilder":
        """Closed because the client is shutting down."""
        return self._because(CloseReason.CLIENT_SHUTDOWN)

    def because_max_length_reached(self) -> "LedgerCloseContextBuilder":
        """Closed because the client's maximum ledger length was reached."""
        return self._because(CloseReason.MAX_LENGTH_REACHED)

    def because_max_entry_count_reached(self) -> "LedgerCloseContextBuilder":
        """Closed because the client's maximum entry count was reached."""
        return self._because(CloseReason.MAX_ENTRY_COUNT_REACHED)

    def because_no_more_data(self) -> "LedgerCloseContextBuilder":
        """Closed because everything there was to write is written."""
        return self._because(CloseReason.NO_MORE_DATA)

    def because_inactive(self) -> "LedgerCloseContextBuilder":
        """Closed because the writer hit its inactivity timeout."""
        return self._because(CloseReason.INACTIVE)

    def because_time_rotation(self) -> "LedgerCloseContextBuilder":
        """Closed because it was open longer than the client's limit."""
        return self._because(CloseReason.TIME_ROTATION)

    def closing_abnormally(self, error_message: str | None = None) -> "LedgerCloseContextBuilder":
        """Closed under abnormal circumstances, optionally with a message of at most 256 characters."""
        LedgerCloseContext(abnormal=True, error_message=error_message)
        return self._with(abnormal=True, error_message=error_message)

    def expect_delete_after(self, instant: datetime) -> "LedgerCloseContextBuilder":
        """Hint: the ledger will be deleted after ``instant`` (not enforced; the audit flags it if it is not)."""
        return self._with(expect_delete_after=_check_instant(instant, "expect delete after"))

    def expect_reads_until(self, instant: datetime) -> "LedgerCloseContextBuilder":
        """Hint: no reads are expected after ``instant`` (reads are still served)."""
        return self._with(expect_reads_until=_check_instant(instant, "expect reads until"))

    def build(self) -> LedgerCloseContext:
        """The immutable context (cross-field checks happen here)."""
        return LedgerCloseContext(**dict(self._fields))

    becauseClientShutdown = because_client_shutdown
    becauseMaxLengthReached = because_max_length_reached
    becauseMaxEntryCountReached = because_max_entry_count_reached
    becauseNoMoreData = because_no_more_data
    becauseInactive = because_inactive
    becauseTimeRotation = because_time_rotation
    closingAbnormally = closing_abnormally
    expectDeleteAfter = expect_delete_after
    expectReadsUntil = expect_reads_until


# ---------------------------------------------------------------------------------------------------------------
# Defensive decoding helpers


def _dump(obj: Mapping[str, Any]) -> bytes:
    data = json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if len(data) > MAX_VALUE_BYTES:  # impossible with the field bounds; a guard against future fields
        raise InvalidOptionError(f"encoded context is {len(data)} bytes; at most {MAX_VALUE_BYTES} allowed")
    return data


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _load(data: object, key: str) -> dict[str, Any]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BadLedgerContextError(f"{key} must hold bytes")
    raw = bytes(data)
    if len(raw) > MAX_VALUE_BYTES:
        raise BadLedgerContextError(f"{key} is {len(raw)} bytes; at most {MAX_VALUE_BYTES} accepted")
    try:
        obj = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadLedgerContextError(f"{key} is not UTF-8 JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadLedgerContextError(f"{key} must hold a JSON object, not {type(obj).__name__}")
    version = obj.get("v")
    if not is_int(version) or version < 1:
        raise BadLedgerContextError(f"{key} has no valid encoding version 'v' (got {version!r})")
    return obj


def _opt(obj: Mapping[str, Any], key: str, kind: type) -> Any:
    value = obj.get(key)
    if value is None:
        return None
    if kind is int and not is_int(value):
        raise InvalidOptionError(f"{key} must be an integer")
    if kind is not int and not isinstance(value, kind):
        raise InvalidOptionError(f"{key} must be a {kind.__name__}")
    return value


def _party(obj: Mapping[str, Any], key: str) -> Party | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidOptionError(f"{key} must be an object")
    return Party(*(value.get(part) for part in ("enterprise", "system", "service", "instance")))


def _link(obj: Mapping[str, Any], key: str) -> LedgerLink | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidOptionError(f"{key} must be an object")
    scope = value.get("scopeId", 0)
    return LedgerLink(value.get("ledgerId"), scope)  # type: ignore[arg-type]


def _entry_size(obj: Mapping[str, Any]) -> EntrySizeHint | None:
    value = obj.get("expectedAverageEntrySize")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidOptionError("expectedAverageEntrySize must be an object")
    return EntrySizeHint(value.get("sizeInBytes"), value.get("standardDeviation", 0.0))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# Reading a ledger's context


def read_create_context(custom_metadata: Mapping[str, bytes]) -> LedgerCreateContext | None:
    """The create context in ``custom_metadata``, ``None`` if there is none."""
    data = custom_metadata.get(CREATE_KEY)
    return None if data is None else LedgerCreateContext.from_bytes(data)


def read_close_context(custom_metadata: Mapping[str, bytes]) -> LedgerCloseContext | None:
    """The close context in ``custom_metadata``, ``None`` if there is none."""
    data = custom_metadata.get(CLOSE_KEY)
    return None if data is None else LedgerCloseContext.from_bytes(data)


def read_seal_time(custom_metadata: Mapping[str, bytes]) -> int | None:
    """The seal time (ms since the epoch) in ``custom_metadata``, ``None`` if there is none."""
    data = custom_metadata.get(SEAL_TIME_KEY)
    if data is None:
        return None
    if not isinstance(data, (bytes, bytearray)) or not 0 < len(data) <= _MAX_SEAL_DIGITS or not bytes(data).isdigit():
        raise BadLedgerContextError(f"{SEAL_TIME_KEY} must be decimal milliseconds, got {bytes(data)[:40]!r}")
    value = int(data)
    if value > INT64_MAX:
        raise BadLedgerContextError(f"{SEAL_TIME_KEY} {value} is out of range")
    return value


@dataclass(frozen=True)
class LedgerContext:
    """Everything BP-44 knows about one ledger, read from its metadata."""

    create: LedgerCreateContext | None
    close: LedgerCloseContext | None
    ctime_ms: int | None
    seal_time_ms: int | None
    closed: bool

    def lifespan(self) -> dict[str, int | None]:
        """The seed's ``predictlifespan`` document (seconds since the epoch, or null)."""
        create_s = None if self.ctime_ms is None else self.ctime_ms // 1000
        expected_seal = None
        if self.ctime_ms is not None and self.create is not None and self.create.expected_max_open_duration is not None:
            expected_seal = (self.ctime_ms + self.create.expected_max_open_duration // timedelta(milliseconds=1)) // 1000
        close = self.close
        return {
            "createTime": create_s,
            "expectedSealTime": expected_seal,
            "actualSealTime": None if self.seal_time_ms is None else self.seal_time_ms // 1000,
            "expectedReadUntilTime": (
                None if close is None or close.expect_reads_until is None else _to_ms(close.expect_reads_until) // 1000
            ),
            "expectedDeleteTime": (
                None if close is None or close.expect_delete_after is None else _to_ms(close.expect_delete_after) // 1000
            ),
        }

    def owner(self) -> dict[str, Any]:
        """The seed's ``showowner`` document (all null when the ledger has no create context)."""
        if self.create is None:
            return {"createdBy": None, "onBehalfOf": None, "dataSet": None}
        return self.create.owner()


def read_context(metadata: LedgerMetadata) -> LedgerContext:
    """The ledger's context; :class:`BadLedgerContextError` if any part of it is malformed."""
    custom = metadata.custom_metadata
    return LedgerContext(
        create=read_create_context(custom),
        close=read_close_context(custom),
        ctime_ms=metadata.ctime if metadata.ctime > 0 else None,
        seal_time_ms=read_seal_time(custom),
        closed=metadata.state == LedgerState.CLOSED,
    )
