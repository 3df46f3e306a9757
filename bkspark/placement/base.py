"""The ensemble placement policy interface, and what every policy shares.

A policy is told which bookies exist (``on_cluster_changed``), picks bookies for
new ensembles and for ensemble changes, and orders the bookies of a write set for
reads.  It never does I/O of its own: the client feeds it the bookie registry it
watches in ZooKeeper.  The shape follows BookKeeper's ``EnsemblePlacementPolicy``
so that the Java vocabulary (and configuration keys) carry over.

Bookies are BookieId strings throughout.
"""

from __future__ import annotations

import abc
import enum
import random
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from bkspark.errors import InvalidOptionError, NotEnoughBookiesError
from bkspark.protocol.ledger_metadata import check_custom_metadata
from bkspark.config.typed import is_int
from bkspark.protocol.values import parse_bool

__all__ = [
    "EnsemblePlacementPolicy",
    "PlacementResult",
    "EnsembleRequest",
    "Replacement",
    "ReadCategory",
    "read_category",
    "order_for_read",
    "order_for_read_lac",
    "conf_get",
    "conf_int",
    "conf_float",
    "conf_bool",
    "conf_str",
    "conf_list",
    "check_quorums",
]

_P = TypeVar("_P", bound="EnsemblePlacementPolicy")

Clock = Callable[[], float]


# --------------------------------------------------------------------------
# Configuration readers.  Options arrive as Python values from the client and
# as strings from Spark options, so every reader accepts both.


def conf_get(conf: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """``conf[key]``, also trying BookKeeper's ``bkc.`` prefix that DistributedLog uses.

    An exact spelling wins; otherwise the key is matched case-insensitively,
    because Spark lower-cases option keys (``bookkeeper.networkTopologyScriptFileName``
    reaches the policy as ``networktopologyscriptfilename``).
    """
    if key in conf:
        return conf[key]
    prefixed = "bkc." + key
    if prefixed in conf:
        return conf[prefixed]
    wanted = {key.lower(), prefixed.lower()}
    for name, value in conf.items():
        if isinstance(name, str) and name.lower() in wanted:
            return value
    return default


def conf_int(conf: Mapping[str, Any], key: str, default: int) -> int:
    """An integer option; a bad value is the caller's error, named by key."""
    value = conf_get(conf, key, default)
    if isinstance(value, bool):
        raise InvalidOptionError("expected an integer", key=key, value=value)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidOptionError("expected an integer", key=key, value=value) from None


def conf_float(conf: Mapping[str, Any], key: str, default: float) -> float:
    """A number option (seconds and the like)."""
    value = conf_get(conf, key, default)
    if isinstance(value, bool):
        raise InvalidOptionError("expected a number", key=key, value=value)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidOptionError("expected a number", key=key, value=value) from None


def conf_bool(conf: Mapping[str, Any], key: str, default: bool) -> bool:
    """A boolean option; accepts Java's ``true``/``false`` spelling as strings."""
    value = conf_get(conf, key, default)
    if isinstance(value, str) and not value.strip():
        return False  # an empty value in a properties file reads as false, as Java's getBoolean does
    return parse_bool(value, key)


def conf_str(conf: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    """A string option (``None`` and empty strings both mean unset)."""
    value = conf_get(conf, key, default)
    if value is None:
        return None
    text = str(value).strip()
    return text or default


def conf_list(conf: Mapping[str, Any], key: str, sep: str = ";") -> list[str]:
    """A list option: a Python sequence, or a string split on ``sep`` (and commas)."""
    value = conf_get(conf, key, None)
    if value is None:
        return []
    if isinstance(value, str):
        parts = value.replace(",", sep).split(sep)
    elif isinstance(value, Iterable):
        parts = [str(v) for v in value]
    else:
        raise InvalidOptionError("expected a list", key=key, value=value)
    return [p.strip() for p in parts if p.strip()]


def check_quorums(ensemble_size: int, write_quorum_size: int, ack_quorum_size: int) -> None:
    """Reject E/Qw/Qa combinations no policy can honour (E >= Qw >= Qa >= 1): the one quorum check.

    A non-int (or a bool) is a ``TypeError``, a bad combination an :class:`InvalidOptionError`.
    """
    for name, value in (
        ("ensemble_size", ensemble_size), ("write_quorum_size", write_quorum_size), ("ack_quorum_size", ack_quorum_size)
    ):
        if not is_int(value):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not (ensemble_size >= write_quorum_size >= ack_quorum_size >= 1):
        raise InvalidOptionError(
            "need ensemble_size >= write_quorum_size >= ack_quorum_size >= 1",
            ensemble_size=ensemble_size,
            write_quorum_size=write_quorum_size,
            ack_quorum_size=ack_quorum_size,
        )


# --------------------------------------------------------------------------
# Read ordering shared by all policies.


class ReadCategory(enum.IntEnum):
    """Where a bookie of a write set goes in the read order (lower reads first).

    The ranks are BookKeeper's ``reorderReadSequenceWithRegion`` masks, minus
    the "slow bookie" rank that needs per-request load tracking.
    """

    LOCAL = 1
    LOCAL_FAIL = 2
    REMOTE = 3
    REMOTE_FAIL = 4
    READ_ONLY = 5
    UNAVAILABLE = 7


def read_category(
    bookie: str,
    writable: Collection[str],
    readonly: Collection[str],
    failure_history: Mapping[str, int],
    remote: bool = False,
) -> ReadCategory:
    """The read category of one bookie.

    A failure history value below zero means "no failure" (Java keeps -1 there).
    """
    if bookie not in writable:
        return ReadCategory.READ_ONLY if bookie in readonly else ReadCategory.UNAVAILABLE
    failed = failure_history.get(bookie, -1) >= 0
    if remote:
        return ReadCategory.REMOTE_FAIL if failed else ReadCategory.REMOTE
    return ReadCategory.LOCAL_FAIL if failed else ReadCategory.LOCAL


def order_for_read(
    ensemble: Sequence[str],
    write_set: Sequence[int],
    failure_history: Mapping[str, int],
    writable: Collection[str],
    readonly: Collection[str],
    is_remote: Callable[[str], bool] | None = None,
) -> list[int]:
    """Order ``write_set`` (ensemble indexes) for reads.

    Writable bookies without failures first, then writable bookies with failures
    (smallest failure-history value first: fewest failures, or the earliest
    failed entry id, whichever the caller counts), then read-only bookies, then
    bookies gone from the cluster.  Ties keep the write-set order.  With
    ``is_remote`` (region-aware), remote writable bookies rank after local ones.
    """
    keyed: list[tuple[int, int, int, int]] = []
    for pos, idx in enumerate(write_set):
        bookie = ensemble[idx]
        remote = bool(is_remote and bookie in writable and is_remote(bookie))
        cat = read_category(bookie, writable, readonly, failure_history, remote)
        fail = failure_history.get(bookie, -1)
        fail_key = fail if cat in (ReadCategory.LOCAL_FAIL, ReadCategory.REMOTE_FAIL) else 0
        keyed.append((int(cat), fail_key, pos, idx))
    keyed.sort()
    return [idx for _, _, _, idx in keyed]


def order_for_read_lac(ensemble_size: int, ordered_write_set: Sequence[int]) -> list[int]:
    """Append the ensemble indexes missing from a reordered write set (LAC reads ask everyone)."""
    seen = set(ordered_write_set)
    return list(ordered_write_set) + [i for i in range(ensemble_size) if i not in seen]


# --------------------------------------------------------------------------
# Results and the interface.


class PlacementResult(enum.Enum):
    """How well an ensemble adheres to the policy (BookKeeper's ``PlacementPolicyAdherence``)."""

    FAIL = 1
    MEETS_SOFT = 3
    MEETS_STRICT = 5


@dataclass(frozen=True, slots=True)
class EnsembleRequest:
    """One :meth:`EnsemblePlacementPolicy.new_ensemble` call's arguments, checked, as its policy receives them."""

    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    custom_metadata: Mapping[str, bytes] | None
    exclude: frozenset[str]

    @property
    def quorum_sizes(self) -> tuple[int, int, int]:
        """``(ensemble_size, write_quorum_size, ack_quorum_size)``."""
        return self.ensemble_size, self.write_quorum_size, self.ack_quorum_size


@dataclass(frozen=True, slots=True)
class Replacement(EnsembleRequest):
    """One :meth:`EnsemblePlacementPolicy.replace_bookie` call's arguments, as its policy receives them."""

    current_ensemble: tuple[str, ...]
    bookie_to_replace: str

    @property
    def taken(self) -> set[str]:
        """The bookies a replacement may not be: the excluded ones, the ensemble's and the replaced one."""
        return set(self.exclude) | set(self.current_ensemble) | {self.bookie_to_replace}


class EnsemblePlacementPolicy(abc.ABC):
    """Choose bookies for ensembles and order bookies for reads.

    Subclasses implement :meth:`_choose_ensemble` and :meth:`_choose_replacement` (the public
    :meth:`new_ensemble` and :meth:`replace_bookie` check the arguments and hand them over as one request); the
    cluster view (writable / read-only sets) and read ordering live here, so
    every policy computes the dead set and the read order the same way.
    """

    #: The Java class a BookKeeper client would configure for the same behaviour.
    java_class_name: str = ""

    def __init__(self) -> None:
        self.conf: Mapping[str, Any] = {}
        self.writable: frozenset[str] = frozenset()
        self.readonly: frozenset[str] = frozenset()
        self.rng: random.Random = random.Random()
        self.stats: Any = None
        self.initialized = False

    # -- lifecycle ---------------------------------------------------------

    def initialize(
        self: _P,
        conf: Mapping[str, Any],
        dns_resolver: Any = None,
        stats: Any = None,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> _P:
        """Read configuration; returns ``self`` so construction chains.

        ``clock`` (monotonic seconds) and ``rng`` are injection points for tests
        and deterministic runs; ``dns_resolver`` is only used by topology-aware
        policies.  Calling it again re-reads ``conf`` and forgets the cluster.
        """
        self.conf = dict(conf)
        self.stats = stats
        if rng is not None:
            self.rng = rng
        self.writable = frozenset()
        self.readonly = frozenset()
        self._configure(self.conf, dns_resolver, clock)
        self.initialized = True
        return self

    def _configure(self, conf: Mapping[str, Any], dns_resolver: Any, clock: Clock | None) -> None:
        """Hook for subclasses to read their options (called by :meth:`initialize`)."""

    def uninitialize(self) -> None:
        """Release what :meth:`initialize` set up (timers, caches)."""
        self.initialized = False

    # -- cluster view ------------------------------------------------------

    def on_cluster_changed(self, writable: Iterable[str], readonly: Iterable[str]) -> set[str]:
        """Take the new cluster view; return the bookies that were writable and are now gone.

        A bookie that turned read-only is not dead (it can still serve reads),
        exactly as Java computes ``(oldWritable - writable) - readOnly``.
        """
        new_writable = frozenset(writable)
        new_readonly = frozenset(readonly) - new_writable
        left = self.writable - new_writable
        joined = new_writable - self.writable
        dead = set(left - new_readonly)
        self.writable = new_writable
        self.readonly = new_readonly
        self._cluster_changed(joined, left, dead)
        return dead

    def _cluster_changed(self, joined: frozenset[str], left: frozenset[str], dead: set[str]) -> None:
        """Hook for topology-aware policies to update their topology."""

    # -- placement ---------------------------------------------------------

    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        custom_metadata: Mapping[str, bytes] | None = None,
        exclude: Collection[str] = frozenset(),
    ) -> list[str]:
        """Choose ``ensemble_size`` distinct writable bookies, none of them in ``exclude`` (Java's ``newEnsemble``).

        Raises :class:`NotEnoughBookiesError` when the cluster cannot supply them.  The arguments are checked here,
        once for every policy: a set or a list given as ``custom_metadata`` (say ``new_ensemble(3, 2, 2, {bookie})``)
        is a ``TypeError``, not custom metadata; quorum sizes go through :func:`check_quorums`.
        """
        check_quorums(ensemble_size, write_quorum_size, ack_quorum_size)
        check_custom_metadata(custom_metadata)
        if isinstance(exclude, (str, bytes)) or not isinstance(exclude, Collection):
            raise TypeError(f"exclude must be a collection of bookie ids, not {type(exclude).__name__}")
        request = EnsembleRequest(ensemble_size, write_quorum_size, ack_quorum_size, custom_metadata, frozenset(exclude))
        return self._choose_ensemble(request)

    @abc.abstractmethod
    def _choose_ensemble(self, request: EnsembleRequest) -> list[str]:
        """The policy's choice for :meth:`new_ensemble`; none of ``request.exclude``."""

    def replace_bookie(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        custom_metadata: Mapping[str, bytes] | None,
        current_ensemble: Sequence[str],
        bookie_to_replace: str,
        exclude: Collection[str] = frozenset(),
    ) -> str:
        """Choose one writable bookie to take ``bookie_to_replace``'s place (Java's ``replaceBookie``).

        Never returns a member of ``current_ensemble`` or ``exclude``; raises
        :class:`NotEnoughBookiesError` when no such bookie exists.  The one
        statement of the signature: policies implement :meth:`_choose_replacement`.
        """
        request = Replacement(
            ensemble_size, write_quorum_size, ack_quorum_size, custom_metadata, frozenset(exclude),
            tuple(current_ensemble), bookie_to_replace,
        )
        return self._choose_replacement(request)

    @abc.abstractmethod
    def _choose_replacement(self, request: Replacement) -> str:
        """The policy's choice for :meth:`replace_bookie`; never one of ``request.taken``."""

    def is_ensemble_adhering(
        self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int
    ) -> PlacementResult:
        """Whether ``ensemble`` meets this policy's rules (random: always strict)."""
        return PlacementResult.MEETS_STRICT

    # -- reads -------------------------------------------------------------

    def reorder_read_sequence(
        self, ensemble: Sequence[str], write_set: Sequence[int], failure_history: Mapping[str, int]
    ) -> list[int]:
        """The order in which to try the bookies of ``write_set`` (ensemble indexes)."""
        return order_for_read(ensemble, write_set, failure_history, self.writable, self.readonly)

    def reorder_read_lac_sequence(
        self, ensemble: Sequence[str], write_set: Sequence[int], failure_history: Mapping[str, int]
    ) -> list[int]:
        """Like :meth:`reorder_read_sequence`, then every other ensemble index (LAC reads)."""
        ordered = self.reorder_read_sequence(ensemble, write_set, failure_history)
        return order_for_read_lac(len(ensemble), ordered)

    # -- helpers for subclasses ---------------------------------------------

    def _candidates(self, exclude: Collection[str]) -> list[str]:
        """Writable bookies not in ``exclude``, sorted so a seeded rng is reproducible."""
        excl = set(exclude)
        return sorted(b for b in self.writable if b not in excl)

    @staticmethod
    def _not_enough(wanted: int, available: int, **context: object) -> NotEnoughBookiesError:
        return NotEnoughBookiesError("not enough writable bookies", wanted=wanted, available=available, **context)
