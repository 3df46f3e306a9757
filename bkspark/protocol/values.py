"""Value rules of the wire: Java's integer ranges and protobuf varints.

Sans-IO and dependency-free, so the protocol codecs, the metadata store, the
client, the connector and the bookie import them from here instead of
restating them.  Configuration booleans and "an int, not a bool" live one layer
down, in :mod:`bkspark.config.typed`; ``parse_bool``, ``TRUE_WORDS`` and
``FALSE_WORDS`` are re-exported here for the callers that import them from this module.
"""

from __future__ import annotations

from bkspark.config.typed import FALSE_WORDS, TRUE_WORDS, is_int, parse_bool
from bkspark.errors import InvalidOptionError

__all__ = [
    "INT32_MIN",
    "INT32_MAX",
    "INT64_MIN",
    "INT64_MAX",
    "INT32_RANGE",
    "INT64_RANGE",
    "is_int64",
    "check_int",
    "encode_varint",
    "is_int",
    "TRUE_WORDS",
    "FALSE_WORDS",
    "parse_bool",
]

#: Java's ``int`` and ``long`` (ids, lengths, scope ids are ``long``s everywhere in BookKeeper).
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_RANGE = (INT32_MIN, INT32_MAX)
INT64_RANGE = (INT64_MIN, INT64_MAX)


def is_int64(value: object) -> bool:
    """Whether ``value`` is an ``int`` (not a bool) that fits a Java ``long``."""
    return is_int(value) and INT64_MIN <= value <= INT64_MAX  # type: ignore[operator]


def check_int(value: object, what: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    """``value`` if it is an int in ``[lo, hi]``: a ``TypeError`` for a non-int (or bool), else
    :class:`InvalidOptionError` (a ``ValueError``) out of range.  For eager API argument checks."""
    if not is_int(value):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise InvalidOptionError(f"{what} {value} out of range [{lo}, {hi}]")
    return value


def encode_varint(value: int) -> bytes:
    """A non-negative int as a protobuf base-128 varint (what ``CodedOutputStream.writeUInt64`` writes)."""
    if value < 0:
        raise ValueError(f"varints here are unsigned, not {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
