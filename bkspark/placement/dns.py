"""DNS-to-switch mappings: turn bookie host names into network locations.

The contract is BookKeeper's ``DNSToSwitchMapping``: ``resolve(names)`` returns
one location per name, ``None`` where a name cannot be resolved (the policy
then uses its default rack, or better, the bookie's last known location).
Mappings are pluggable by import path through ``reppDnsResolverClass``; a
class is built with the configuration mapping as its only argument.
"""

from __future__ import annotations

import abc
import importlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from bkspark.errors import InvalidOptionError
from bkspark.placement.base import conf_float, conf_get, conf_int, conf_str

__all__ = [
    "DNS_RESOLVER_CLASS_KEY",
    "SCRIPT_FILENAME_KEY",
    "SCRIPT_ARG_COUNT_KEY",
    "STATIC_MAPPING_KEY",
    "DNSToSwitchMapping",
    "CachedDNSToSwitchMapping",
    "ScriptBasedMapping",
    "StaticMapping",
    "DefaultRackMapping",
    "dns_resolver_from_conf",
    "host_of",
]

log = logging.getLogger(__name__)

DNS_RESOLVER_CLASS_KEY = "reppDnsResolverClass"
SCRIPT_FILENAME_KEY = "networkTopologyScriptFileName"
SCRIPT_ARG_COUNT_KEY = "networkTopologyScriptNumberArgs"
SCRIPT_TIMEOUT_KEY = "networkTopologyScriptTimeoutSeconds"  # bkspark: Java has no timeout
STATIC_MAPPING_KEY = "networkTopologyStaticMapping"  # bkspark: host=/loc,... table
DEFAULT_ARG_COUNT = 100  # ScriptBasedMapping.DEFAULT_ARG_COUNT
MIN_ALLOWABLE_ARGS = 1


def host_of(bookie_id: str) -> str:
    """The host part of a ``host:port`` BookieId (a BP-41 name without a port is kept whole)."""
    host, sep, port = bookie_id.rpartition(":")
    if sep and port.isdigit() and host:
        return host.strip("[]")
    return bookie_id


class DNSToSwitchMapping(abc.ABC):
    """Resolve host names / addresses to network locations (``/region/rack``)."""

    @abc.abstractmethod
    def resolve(self, names: Sequence[str]) -> list[str | None]:
        """One location per name, in order; ``None`` where a name is unknown."""

    def reload_cached_mappings(self) -> None:
        """Forget cached answers so that the next resolve asks again."""


class CachedDNSToSwitchMapping(DNSToSwitchMapping):
    """Caches successful answers of a slow mapping (a script), like Java's ``CachedDNSToSwitchMapping``."""

    def __init__(self, raw: DNSToSwitchMapping) -> None:
        self.raw = raw
        self._cache: dict[str, str] = {}

    def resolve(self, names: Sequence[str]) -> list[str | None]:
        missing = [n for n in dict.fromkeys(names) if n not in self._cache]
        if missing:
            answers = self.raw.resolve(missing)
            for name, loc in zip(missing, answers):
                if loc is not None:
                    self._cache[name] = loc
        return [self._cache.get(n) for n in names]

    def reload_cached_mappings(self) -> None:
        self._cache.clear()
        self.raw.reload_cached_mappings()


def _run_script(argv: list[str], timeout: float) -> str:
    """The script's standard output; ``TimeoutExpired`` once ``timeout`` seconds have passed, ``CalledProcessError``
    when it exits non-zero.

    It runs in a process group of its own, and a timeout kills the whole group: a child the script started (a
    ``dig`` or a ``sleep`` not run with ``exec``) would otherwise outlive it, left running in the client's process
    (a Spark executor, a bookie)."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=os.getcwd(), start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, argv, stdout, stderr)
    return stdout


class _RawScriptMapping(DNSToSwitchMapping):
    """Runs the topology script: host names as arguments, whitespace-separated locations out."""

    def __init__(self, script: str, max_args: int, timeout: float) -> None:
        self.script = script
        self.max_args = max_args
        self.timeout = timeout

    def resolve(self, names: Sequence[str]) -> list[str | None]:
        if not names:
            return []
        if self.max_args < MIN_ALLOWABLE_ARGS:
            log.warning("%s=%d is below %d; not running the script", SCRIPT_ARG_COUNT_KEY, self.max_args, MIN_ALLOWABLE_ARGS)
            return [None] * len(names)
        tokens: list[str] = []
        for start in range(0, len(names), self.max_args):
            batch = list(names[start : start + self.max_args])
            try:
                stdout = _run_script([self.script, *batch], self.timeout)
            except (OSError, subprocess.SubprocessError) as exc:
                log.warning("network topology script %s failed: %s", self.script, exc)
                return [None] * len(names)
            tokens.extend(stdout.split())
        if len(tokens) != len(names):
            log.error(
                "network topology script %s returned %d values for %d names", self.script, len(tokens), len(names)
            )
            return [None] * len(names)
        return list(tokens)


class ScriptBasedMapping(CachedDNSToSwitchMapping):
    """BookKeeper's ``ScriptBasedMapping``: ask ``networkTopologyScriptFileName``.

    The script gets up to ``networkTopologyScriptNumberArgs`` (default 100) names
    per run and prints one location per name.  A failed run, a wrong number of
    answers, or no script at all resolves every name to ``None`` (default rack).
    """

    def __init__(self, conf: Mapping[str, Any] | None = None) -> None:
        conf = conf or {}
        self.script = conf_str(conf, SCRIPT_FILENAME_KEY)
        max_args = conf_int(conf, SCRIPT_ARG_COUNT_KEY, DEFAULT_ARG_COUNT)
        timeout = conf_float(conf, SCRIPT_TIMEOUT_KEY, 30.0)
        super().__init__(_RawScriptMapping(self.script or "", max_args, timeout))

    def resolve(self, names: Sequence[str]) -> list[str | None]:
        if not self.script:
            return [None] * len(names)
        return super().resolve(names)


class StaticMapping(DNSToSwitchMapping):
    """A fixed table of host -> location (``networkTopologyStaticMapping``, or given directly).

    The table may be a mapping or a string ``"host1=/r1,host2=/r2"`` (as a Spark
    option would carry it).  Keys are what the policy resolves: the host part
    of ``host:port`` BookieIds (or whatever ``set_bookie_address_resolver`` gives).
    """

    def __init__(self, conf: Mapping[str, Any] | None = None, table: Mapping[str, str] | None = None) -> None:
        self.table: dict[str, str] = {}
        raw = conf_get(conf or {}, STATIC_MAPPING_KEY) if table is None else table
        if isinstance(raw, str):
            for item in raw.replace(";", ",").split(","):
                if not item.strip():
                    continue
                host, sep, loc = item.partition("=")
                if not sep:
                    raise InvalidOptionError("expected host=/location", key=STATIC_MAPPING_KEY, value=item)
                self.table[host.strip()] = loc.strip()
        elif isinstance(raw, Mapping):
            self.table = {str(k): str(v) for k, v in raw.items()}
        elif raw is not None:
            raise InvalidOptionError("expected a mapping or host=/location list", key=STATIC_MAPPING_KEY, value=raw)

    def add(self, name: str, location: str) -> None:
        """Add or change one entry (a rack move)."""
        self.table[name] = location

    def resolve(self, names: Sequence[str]) -> list[str | None]:
        return [self.table.get(n) for n in names]


class DefaultRackMapping(DNSToSwitchMapping):
    """Every name in one rack (what Java falls back to when the configured resolver cannot be built)."""

    def __init__(self, default_rack: str) -> None:
        self.default_rack = default_rack

    def resolve(self, names: Sequence[str]) -> list[str | None]:
        return [self.default_rack] * len(names)


_SHORT_NAMES = {
    "org.apache.bookkeeper.net.ScriptBasedMapping": ScriptBasedMapping,
    "script": ScriptBasedMapping,
    "static": StaticMapping,
}


def dns_resolver_from_conf(conf: Mapping[str, Any]) -> DNSToSwitchMapping:
    """The mapping ``reppDnsResolverClass`` names (default: :class:`ScriptBasedMapping`).

    Accepts an instance, a class, BookKeeper's ScriptBasedMapping class name, the
    short names ``script``/``static``, or a Python ``module:Class`` / ``module.Class``
    path whose constructor takes the configuration mapping.
    """
    value = conf_get(conf, DNS_RESOLVER_CLASS_KEY)
    if isinstance(value, DNSToSwitchMapping):
        return value
    if value is None or (isinstance(value, str) and not value.strip()):
        return ScriptBasedMapping(conf)
    cls: Any = value
    if isinstance(value, str):
        text = value.strip()
        cls = _SHORT_NAMES.get(text)
        if cls is None:
            if ":" in text:
                module_name, _, attr = text.partition(":")
            else:
                module_name, _, attr = text.rpartition(".")
            try:
                cls = getattr(importlib.import_module(module_name), attr) if module_name else None
            except ImportError:
                cls = None
    if not (isinstance(cls, type) and issubclass(cls, DNSToSwitchMapping)):
        raise InvalidOptionError(
            "unknown DNS-to-switch mapping",
            key=DNS_RESOLVER_CLASS_KEY,
            value=value,
            choices=sorted(_SHORT_NAMES) + ["<python.module:Class>"],
        )
    return cls(conf)
