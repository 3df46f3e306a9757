"""Typed configuration: one home for how bkspark reads a BookKeeper-style key/value mapping.

The client (:class:`bkspark.client.conf.ClientConf`), the bookie (:class:`bkspark.config.bookie.BookieConfig`),
the security settings (:mod:`bkspark.security`) and the placement policies read their settings from a mapping of
Apache BookKeeper key names (``addEntryTimeoutSec``, ``bookiePort``, ``tlsClientAuthentication``...), given as a
properties file, a Python ``dict`` or a Spark option map (Spark lower-cases option keys).  The rules they share:

* **keys** compare without regard to case, and a dataclass field also answers to its snake_case spelling
  (``add_entry_timeout_sec``) and to the aliases its class names (:class:`KeyIndex`);
* **booleans** are one rule set (:func:`parse_bool`): a bool, an int, or ``true/false``, ``yes/no``,
  ``on/off``, ``1/0`` in any case;
* **conversion** of a value to its field's type (:func:`coerce`): ``bool``, ``int``, ``float``, a
  comma-separated ``list[str]``, or a string (an optional string left empty is ``None``); a value that does not
  convert is an :class:`~bkspark.errors.InvalidOptionError` naming the key;
* **"an int, not a bool"** (:func:`is_int`): Python's ``True`` is an ``int``, a setting's or an argument's never is;
* **ledger defaults**: the ensemble, write quorum and ack quorum a ledger gets when the caller names none.

Bottom layer: imports :mod:`bkspark.errors` only (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from bkspark.errors import InvalidOptionError

__all__ = [
    "TRUE_WORDS",
    "FALSE_WORDS",
    "DEFAULT_ENSEMBLE_SIZE",
    "DEFAULT_WRITE_QUORUM_SIZE",
    "DEFAULT_ACK_QUORUM_SIZE",
    "parse_bool",
    "is_int",
    "is_finite_number",
    "lookup",
    "flag",
    "snake_case",
    "KeyIndex",
    "coerce",
]

#: How a boolean may be spelled in a configuration file or option map (case-insensitive).
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})

#: A ledger's ensemble, write quorum and ack quorum when the caller names none (the client's ``create_ledger``,
#: the connector's ``ensembleSize``/``writeQuorumSize``/``ackQuorumSize``, the shell's ``-e/-w/-a``).
DEFAULT_ENSEMBLE_SIZE = 3
DEFAULT_WRITE_QUORUM_SIZE = 2
DEFAULT_ACK_QUORUM_SIZE = 2


def is_int(value: object) -> bool:
    """Whether ``value`` is an ``int`` and not a ``bool`` (``True`` is an ``int`` to Python, never to a setting)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """Whether ``value`` is a finite ``int`` or ``float`` and not a ``bool`` (seconds, a standard deviation)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_bool(value: Any, key: str = "value") -> bool:
    """A configuration boolean: a bool, an int (non-zero is true) or one of :data:`TRUE_WORDS`/:data:`FALSE_WORDS`.

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


def lookup(conf: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """``conf[key]`` whatever the case (Spark lower-cases option keys); ``default`` when absent or empty."""
    if key in conf and conf[key] not in (None, ""):
        return conf[key]
    low = key.lower()
    for k, v in conf.items():
        if str(k).lower() == low and v not in (None, ""):
            return v
    return default


def flag(conf: Mapping[str, Any], key: str, default: bool) -> bool:
    """The boolean setting ``key`` of ``conf`` (any case; absent or empty: ``default``), by :func:`parse_bool`."""
    raw = lookup(conf, key)
    return default if raw is None else parse_bool(raw, key)


def snake_case(name: str) -> str:
    """``addEntryTimeoutSec`` -> ``add_entry_timeout_sec``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class KeyIndex:
    """Which field a configuration key names: the exact name, any case, the snake_case spelling, or an alias."""

    def __init__(self, names: Iterable[str], aliases: Mapping[str, str] | None = None) -> None:
        self.names = frozenset(names)
        self.aliases = dict(aliases or {})
        self._folded: dict[str, str] = {snake_case(n): n for n in self.names}
        self._folded.update({n.lower(): n for n in self.names})
        self._folded.update({a.lower(): n for a, n in self.aliases.items()})
        self._folded.update({snake_case(a): n for a, n in self.aliases.items()})

    @classmethod
    def of_dataclass(cls, datacls: type, aliases: Mapping[str, str] | None = None, *, skip: Iterable[str] = ("extra",)) -> "KeyIndex":
        """The index of a configuration dataclass's fields (``extra``, the unknown keys' home, left out)."""
        skipped = set(skip)
        return cls((f.name for f in dataclasses.fields(datacls) if f.name not in skipped), aliases)

    def field_for(self, key: str) -> str | None:
        """The field ``key`` names, or None for a key this index does not know."""
        if key in self.names:
            return key
        return self.aliases.get(key) or self._folded.get(str(key).lower())


def _type_text(ftype: object) -> str:
    return ftype if isinstance(ftype, str) else getattr(ftype, "__name__", str(ftype))


def coerce(key: str, ftype: object, value: Any) -> Any:
    """``value`` converted to a configuration field's type (its annotation, a string under postponed annotations).

    ``bool`` by :func:`parse_bool`; ``int``/``float`` by Python's constructors; ``list[...]`` from a
    comma-separated string (items trimmed, empty ones dropped); anything else a trimmed string, ``None`` for an
    optional one left empty.  A value that does not convert is an :class:`InvalidOptionError` naming ``key``.
    """
    text = _type_text(ftype)
    try:
        if text.startswith("list"):
            if isinstance(value, (list, tuple)):
                return [str(v) for v in value]
            return [part.strip() for part in str(value).split(",") if part.strip()]
        if text.startswith("bool"):
            return parse_bool(value, key)
        if text.startswith("int"):
            return int(value)
        if text.startswith("float"):
            return float(value)
        optional = "None" in text
        if value is None:
            if optional:
                return None
            raise TypeError("None")
        out = str(value).strip()
        return (out or None) if optional else out
    except (TypeError, ValueError):
        raise InvalidOptionError("bad configuration value", key=key, value=value) from None
