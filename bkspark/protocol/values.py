"""Value rules every layer shares: Java's integer ranges, protobuf varints, and configuration booleans.

Sans-IO and dependency-free, so the protocol codecs, the metadata store, the
client, the connector and the bookie import them from here instead of
restating them.
"""

from __future__ import annotations

from typing import Any

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
    return isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX


def check_int(value: object, what: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    """``value`` if it is an int in ``[lo, hi]``: a ``TypeError`` for a non-int (or bool), else
    :class:`InvalidOptionError` (a ``ValueError``) out of range.  For eager API argument checks."""
    if not isinstance(value, int) or isinstance(value, bool):
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


#: How a boolean may be spelled in a configuration file or option map (case-insensitive).
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})


def parse_bool(value: Any, key: str = "value") -> bool:
    """A configuration boolean: a bool, an int (non-zero is true) or one of the words above.

    Anything else is an :class:`InvalidOptionError` naming ``key``.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise InvalidOptionError("expected true or false", key=key, value=value)
