"""BookieId (BP-41): an opaque bookie identity, validated as Java's ``BookieId.parse`` does.

Java (``net/BookieId.validateBookieId``, 4.12 to 4.17) accepts a string that
matches the regex ``[a-zA-Z0-9:-_.\\-]+`` and is not ``readonly`` in any case.
Inside that character class ``:-_`` is a *range* (0x3A..0x5F), so besides
letters, digits, ``.`` and ``-`` the characters ``: ; < = > ? @ [ \\ ] ^ _``
pass too; BP-41's prose is stricter, the code is what clusters run, so we
accept exactly what Java accepts.  There is no length limit.

Most ids are still the legacy ``host:port`` form, which Java turns into an
address with ``new BookieSocketAddress(id)``: split on ``:`` (trailing empty
parts dropped), at least two parts, host = part 0, port = ``Integer.parseInt``
of part 1 (later parts ignored).  :meth:`BookieId.host_port` does the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bkspark.errors import InvalidBookieIdError
from bkspark.protocol.values import INT32_MAX, INT32_MIN
from bkspark.protocol.zk_paths import READONLY

__all__ = ["BookieId", "validate_bookie_id", "java_split", "java_parse_int"]

_BOOKIE_ID_RE = re.compile(r"[a-zA-Z0-9:-_.\-]+")
_JAVA_INT_RE = re.compile(r"[+-]?[0-9]+")


def java_split(text: str, sep: str) -> list[str]:
    """Java's ``String.split(sep)`` for a literal one-char separator: trailing empties dropped."""
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts if parts else ([""] if text == "" else [])


def java_parse_int(text: str, lo: int = INT32_MIN, hi: int = INT32_MAX) -> int | None:
    """Java's ``Integer.parseInt`` / ``Long.parseLong`` over ASCII digits; ``None`` if Java would throw."""
    if not _JAVA_INT_RE.fullmatch(text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


#: Bookie ids already accepted (a cluster has few bookies, and every ledger's metadata names them again): a
#: planner parsing 100,000 ledgers' metadata checks each id once. Bounded; any thread may add (a set's add is atomic).
_ACCEPTED: set[str] = set()
_ACCEPTED_MAX = 4096


def validate_bookie_id(text: object) -> str:
    """Return ``text`` if Java's ``BookieId.parse`` accepts it, else raise :class:`InvalidBookieIdError`."""
    if type(text) is str and text in _ACCEPTED:
        return text
    if not isinstance(text, str):
        raise InvalidBookieIdError("a BookieId must be a string", bookie_id=text)
    if not _BOOKIE_ID_RE.fullmatch(text):
        bad = sorted({c for c in text if not _BOOKIE_ID_RE.fullmatch(c)})
        reason = "is empty" if not text else f"has characters outside [a-zA-Z0-9:-_.-]: {''.join(bad)!r}"
        raise InvalidBookieIdError(f"BookieId {text!r} is not valid: it {reason}")
    if text.lower() == READONLY:  # the znode read-only bookies register under
        raise InvalidBookieIdError(
            f"BookieId {text!r} is not valid: 'readonly' is reserved (it would collide with <root>/available/readonly)"
        )
    if type(text) is str and len(_ACCEPTED) < _ACCEPTED_MAX:
        _ACCEPTED.add(text)
    return text


@dataclass(frozen=True, slots=True)
class BookieId:
    """A validated bookie id; equality is string equality, as in Java."""

    id: str

    def __post_init__(self) -> None:
        validate_bookie_id(self.id)

    @classmethod
    def parse(cls, text: str) -> "BookieId":
        """Validate ``text`` as Java's ``BookieId.parse``; raises :class:`InvalidBookieIdError`."""
        return cls(text)

    def __str__(self) -> str:
        return self.id

    def _legacy_parts(self) -> tuple[str, int] | None:
        parts = java_split(self.id, ":")
        if len(parts) < 2:
            return None
        port = java_parse_int(parts[1])
        if port is None:
            return None
        return parts[0], port

    @property
    def is_legacy_address(self) -> bool:
        """Whether Java can read this id as a ``host:port`` address (``new BookieSocketAddress(id)``)."""
        return self._legacy_parts() is not None

    def host_port(self) -> tuple[str, int]:
        """``(host, port)`` of a legacy ``host:port`` id, parsed as Java does.

        Raises :class:`InvalidBookieIdError` when the id is not an address
        (a BP-41 custom id must be resolved through BookieServiceInfo instead).
        """
        parts = self._legacy_parts()
        if parts is None:
            raise InvalidBookieIdError(
                f"BookieId {self.id!r} is not a host:port address; resolve it through its BookieServiceInfo"
            )
        return parts
