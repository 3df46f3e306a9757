"""Rack-aware placement: every write quorum spans several racks.

The policy resolves each bookie's network location through a DNS-to-switch
mapping, keeps a :class:`NetworkTopology` of the writable bookies, and lays out
ensembles so that every write quorum (``Qw`` consecutive positions, wrapping)
covers at least ``min(Qw, minNumRacksPerWriteQuorum)`` racks.  Unlike Java's
greedy walk it backtracks (see :mod:`bkspark.placement.arrange`), so with
``enforceMinNumRacksPerWriteQuorum`` it fails exactly when no valid ensemble
exists; without enforcement it returns the ensemble with the most racks per
quorum it can find.

Bookies that leave keep their last known location, so a bookie that comes back
and cannot be resolved is not dropped into the default rack (BookKeeper #2642,
#4439).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from bkspark.errors import NotEnoughBookiesError
from bkspark.placement.arrange import Layout, LayoutProblem, find_layout, windows
from bkspark.placement.base import (
    Clock,
    EnsemblePlacementPolicy,
    EnsembleRequest,
    PlacementResult,
    Replacement,
    conf_bool,
    conf_float,
    conf_int,
    conf_str,
)
from bkspark.placement.dns import DNSToSwitchMapping, dns_resolver_from_conf, host_of
from bkspark.placement.topology import (
    DEFAULT_RACK,
    NetworkTopology,
    StabilizeNetworkTopology,
    normalize_location,
    region_of,
)

__all__ = [
    "TopologyAwareEnsemblePlacementPolicy",
    "RackawareEnsemblePlacementPolicy",
    "MIN_NUM_RACKS_PER_WRITE_QUORUM",
    "ENFORCE_MIN_NUM_RACKS_PER_WRITE_QUORUM",
    "STABILIZE_PERIOD_SECONDS",
    "IGNORE_LOCAL_NODE",
    "LOCAL_NETWORK_LOCATION",
    "RESOLVE_BY_BOOKIE_ID",
]

log = logging.getLogger(__name__)

MIN_NUM_RACKS_PER_WRITE_QUORUM = "minNumRacksPerWriteQuorum"
ENFORCE_MIN_NUM_RACKS_PER_WRITE_QUORUM = "enforceMinNumRacksPerWriteQuorum"
STABILIZE_PERIOD_SECONDS = "networkTopologyStabilizePeriodSeconds"
IGNORE_LOCAL_NODE = "ignoreLocalNodeInPlacementPolicy"
#: bkspark: the client's own location, instead of resolving the local host.
LOCAL_NETWORK_LOCATION = "reppLocalNetworkLocation"
#: bkspark: give the mapping whole BookieIds (``127.0.0.1:3181``), not host names, e.g. for
#: several bookies on one host, or BP-41 names a script knows.
RESOLVE_BY_BOOKIE_ID = "networkTopologyResolveByBookieId"


class TopologyAwareEnsemblePlacementPolicy(EnsemblePlacementPolicy):
    """What rack- and region-aware policies share: resolution, topology, history."""

    default_rack: str = DEFAULT_RACK

    def __init__(self) -> None:
        super().__init__()
        self.dns: DNSToSwitchMapping | None = None
        self.topology: NetworkTopology = NetworkTopology()
        self.history: dict[str, str] = {}
        self.address_resolver: Callable[[str], str] = host_of
        self.min_racks_per_write_quorum = 2
        self.enforce_min_racks = False
        self.local_location: str | None = None
        self.clock: Clock = time.monotonic

    def _configure(self, conf: Mapping[str, Any], dns_resolver: Any, clock: Clock | None) -> None:
        self.dns = dns_resolver if isinstance(dns_resolver, DNSToSwitchMapping) else dns_resolver_from_conf(conf)
        self.min_racks_per_write_quorum = conf_int(conf, MIN_NUM_RACKS_PER_WRITE_QUORUM, 2)
        self.enforce_min_racks = conf_bool(conf, ENFORCE_MIN_NUM_RACKS_PER_WRITE_QUORUM, False)
        self.clock = clock or time.monotonic
        period = conf_float(conf, STABILIZE_PERIOD_SECONDS, 0)
        self.topology = StabilizeNetworkTopology(period, self.clock) if period > 0 else NetworkTopology()
        self.history = {}
        if conf_bool(conf, RESOLVE_BY_BOOKIE_ID, False):
            self.address_resolver = str
        self.local_location = self._resolve_local(conf)

    def _resolve_local(self, conf: Mapping[str, Any]) -> str | None:
        """The client's own network location (Java resolves the local host's address)."""
        explicit = conf_str(conf, LOCAL_NETWORK_LOCATION)
        if explicit:
            return normalize_location(explicit)
        if conf_bool(conf, IGNORE_LOCAL_NODE, False) or self.dns is None:
            return None
        try:
            address = socket.gethostbyname(socket.gethostname())
        except OSError:
            return None
        loc = self.dns.resolve([address])[0]
        return normalize_location(loc) if loc else None

    def set_bookie_address_resolver(self, resolver: Callable[[str], str]) -> None:
        """How to turn a BookieId into the name given to the DNS mapping (default: its host part)."""
        self.address_resolver = resolver

    # -- locations -------------------------------------------------------------

    def _resolve(self, bookies: Sequence[str]) -> dict[str, str]:
        """Locations for ``bookies``: the mapping's answer, else the last known one, else the default rack."""
        names: list[str | None] = []
        for b in bookies:
            try:
                names.append(self.address_resolver(b))
            except Exception as exc:  # a resolver may raise anything; the bookie still needs a place
                log.warning("cannot resolve bookie %s to an address: %s", b, exc)
                names.append(None)
        asked = [n for n in names if n is not None]
        answers: list[str | None] = []
        if asked and self.dns is not None:
            try:
                answers = list(self.dns.resolve(asked))
            except Exception as exc:
                log.warning("DNS-to-switch mapping failed: %s", exc)
            if len(answers) != len(asked):
                answers = [None] * len(asked)
        by_name = dict(zip(asked, answers))
        out: dict[str, str] = {}
        for b, n in zip(bookies, names):
            loc = by_name.get(n) if n is not None else None
            try:
                loc = normalize_location(loc) if loc else None
            except ValueError:
                log.warning("bookie %s resolved to a malformed location %r", b, loc)
                loc = None
            if loc is None:
                loc = self.history.get(b, self.default_rack)
            out[b] = loc
        return out

    def location_of(self, bookie: str) -> str:
        """Where ``bookie`` is (topology, then last known location, then a fresh resolution)."""
        loc = self.topology.location_of(bookie) or self.history.get(bookie)
        if loc is None:
            loc = self._resolve([bookie])[bookie]
            self.history[bookie] = loc
        return loc

    def locations(self) -> dict[str, str]:
        """Every writable and read-only bookie with its network location (for ``listbookies``)."""
        return {b: self.location_of(b) for b in sorted(self.writable | self.readonly)}

    def _cluster_changed(self, joined: frozenset[str], left: frozenset[str], dead: set[str]) -> None:
        for b in left:
            self.topology.remove(b)
        fresh = [b for b in sorted(joined) if b not in self.topology]
        resolved = self._resolve(fresh)
        for b in sorted(joined):
            loc = resolved.get(b) or self.topology.location_of(b) or self.history.get(b, self.default_rack)
            try:
                self.topology.add(b, loc)
            except ValueError as exc:
                log.error("bookie %s at %s does not fit the topology: %s", b, loc, exc)
                loc = self.default_rack
            self.history[b] = loc

    def on_bookie_rack_change(self, bookies: Iterable[str]) -> None:
        """Re-resolve ``bookies`` (the mapping told us their racks moved)."""
        if self.dns is not None:
            self.dns.reload_cached_mappings()
        targets = [b for b in bookies if b in self.writable]
        for b, loc in self._resolve(targets).items():
            if isinstance(self.topology, StabilizeNetworkTopology):
                self.topology.remove_now(b)
            else:
                self.topology.remove(b)
            self.topology.add(b, loc)
            self.history[b] = loc

    # -- shared placement helpers -------------------------------------------

    def _rack_of_writable(self, bookie: str) -> str:
        return self.topology.location_of(bookie) or self.history.get(bookie, self.default_rack)

    def _pool(self, exclude: Collection[str]) -> dict[str, list[str]]:
        """Candidate bookies by rack: writable, not excluded, not in the default rack when enforced."""
        pool: dict[str, list[str]] = {}
        for b in self._candidates(exclude):
            rack = self._rack_of_writable(b)
            if self.enforce_min_racks and rack == self.default_rack:
                continue
            pool.setdefault(rack, []).append(b)
        for bookies in pool.values():
            self.rng.shuffle(bookies)
        return pool

    def _min_racks(self, write_quorum_size: int) -> int:
        return max(1, min(write_quorum_size, self.min_racks_per_write_quorum))

    def _ranked_replacements(self, request: Replacement, *, same_region_first: bool = False) -> list[str]:
        """The candidates for ``request``, best first: (with ``same_region_first``, those in the replaced bookie's
        region first, then) those in a rack the rest of the ensemble does not use, then those in the replaced
        bookie's rack, ties in random order.  Raises :class:`NotEnoughBookiesError` when there is none."""
        pool = self._pool(request.taken)
        candidates = [b for bookies in pool.values() for b in bookies]
        if not candidates:
            raise self._not_enough(1, 0, replacing=request.bookie_to_replace)
        old_rack = self.location_of(request.bookie_to_replace)
        others = {self.location_of(b) for b in request.current_ensemble if b != request.bookie_to_replace}

        def rank(bookie: str) -> tuple[bool | float, ...]:
            rack = self._rack_of_writable(bookie)
            prefer = (rack in others, rack != old_rack, self.rng.random())
            return (region_of(rack) != region_of(old_rack), *prefer) if same_region_first else prefer

        return sorted(candidates, key=rank)

    def _fill(self, layout: list[str], pool: Mapping[str, list[str]]) -> list[str]:
        """Draw bookies for a rack layout from the (shuffled) pool."""
        taken: dict[str, int] = {}
        out = []
        for rack in layout:
            i = taken.get(rack, 0)
            out.append(pool[rack][i])
            taken[rack] = i + 1
        return out

    def _search(self, problem: LayoutProblem) -> Layout:
        result = find_layout(problem, self.rng)
        if result.exhausted:
            log.warning("placement search gave up after %d steps", result.nodes)
        return result

    def is_ensemble_adhering(
        self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int
    ) -> PlacementResult:
        """FAIL if a write quorum has too few known racks (or, enforced, a default-rack bookie)."""
        if not ensemble:
            return PlacementResult.FAIL
        m = self._min_racks(write_quorum_size)
        for win in windows(len(ensemble), write_quorum_size):
            racks = {self.topology.location_of(ensemble[i]) for i in win} - {None}
            if len(racks) < m or (self.enforce_min_racks and self.default_rack in racks):
                return PlacementResult.FAIL
        return PlacementResult.MEETS_STRICT


class RackawareEnsemblePlacementPolicy(TopologyAwareEnsemblePlacementPolicy):
    """BookKeeper's ``RackawareEnsemblePlacementPolicy``: racks per write quorum, best effort or enforced."""

    java_class_name = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"

    def _choose_ensemble(self, request: EnsembleRequest) -> list[str]:
        """An ensemble whose write quorums each cover ``min(Qw, minNumRacksPerWriteQuorum)`` racks.

        Enforced: raises :class:`NotEnoughBookiesError` when no such ensemble
        exists.  Not enforced: the requirement is lowered one rack at a time
        until an ensemble fits (one rack per quorum always fits).
        """
        ensemble_size, write_quorum_size = request.ensemble_size, request.write_quorum_size
        pool = self._pool(request.exclude)
        available = sum(len(v) for v in pool.values())
        if available < ensemble_size:
            raise self._not_enough(ensemble_size, available, racks=len(pool))
        m = self._min_racks(write_quorum_size)
        capacity = {r: len(v) for r, v in pool.items()}
        first = self.local_location if self.local_location != self.default_rack else None
        for want in range(m, 0, -1):
            layout = self._search(LayoutProblem(capacity, ensemble_size, write_quorum_size, want, first_rack=first))
            if layout.racks is not None:
                return self._fill(layout.racks, pool)
            if self.enforce_min_racks:
                raise NotEnoughBookiesError(
                    "no ensemble has every write quorum on enough racks",
                    ensemble_size=ensemble_size,
                    write_quorum_size=write_quorum_size,
                    min_racks=m,
                    racks=capacity,
                )
        raise self._not_enough(ensemble_size, available)  # unreachable: one rack per quorum always fits

    def _choose_replacement(self, request: Replacement) -> str:
        """A replacement that keeps every write quorum through its position on enough racks.

        Among the bookies that do, one in a rack the rest of the ensemble does
        not use is preferred, then one in the replaced bookie's rack.
        """
        ranked = self._ranked_replacements(request)
        ensemble, replaced = list(request.current_ensemble), request.bookie_to_replace
        write_quorum_size = request.write_quorum_size
        index = ensemble.index(replaced) if replaced in ensemble else None
        m = self._min_racks(write_quorum_size)
        if index is None or len(ensemble) < write_quorum_size:
            return ranked[0]
        best, best_score = ranked[0], -1
        for b in ranked:
            score = self._worst_quorum_racks(ensemble, index, b, write_quorum_size)
            if score >= m:
                return b
            if score > best_score:
                best, best_score = b, score
        if self.enforce_min_racks and m > 1:
            raise NotEnoughBookiesError(
                "no replacement keeps every write quorum on enough racks",
                replacing=replaced,
                min_racks=m,
            )
        return best

    def _worst_quorum_racks(self, ensemble: Sequence[str], index: int, candidate: str, write_quorum_size: int) -> int:
        """The fewest racks among the write quorums through ``index`` once ``candidate`` sits there."""
        trial = list(ensemble)
        trial[index] = candidate
        worst = write_quorum_size
        for win in windows(len(trial), write_quorum_size):
            if index in win:
                worst = min(worst, len({self.location_of(trial[i]) for i in win}))
        return worst
