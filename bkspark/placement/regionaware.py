"""Region-aware placement: equal shares per region, racks within regions, durability.

Locations are ``/region/rack``.  An ensemble takes an equal share from every
region that has writable bookies (as far as each region's bookies allow; the
client's own region gets the first extra bookie, the others take turns), and
the regions are interleaved so that write quorums span regions.  Inside a
quorum the rack rule of the rack-aware policy still applies.

With ``reppRegionsToWrite`` set, ``reppMinimumRegionsForDurability`` (default 2)
is enforced as BookKeeper's ``RackOrRegionDurabilityCoverageSet`` does: in every
write quorum, no ``minRegions - 1`` regions together hold an ack quorum, so an
acknowledged entry survives the loss of any ``minRegions - 1`` regions.

Reads go to local writable bookies first, with the first remote bookie moved up
to third place (``REMOTE_NODE_IN_REORDER_SEQUENCE = 2``), as Java orders them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from bkspark.errors import InvalidOptionError, NotEnoughBookiesError
from bkspark.placement.arrange import LayoutProblem, window_ok, windows
from bkspark.placement.base import (
    Clock,
    EnsembleRequest,
    PlacementResult,
    ReadCategory,
    Replacement,
    conf_bool,
    conf_int,
    conf_list,
    conf_str,
    order_for_read,
    read_category,
)
from bkspark.placement.rackaware import RackawareEnsemblePlacementPolicy
from bkspark.placement.topology import DEFAULT_REGION_AND_RACK, UNKNOWN_REGION, region_of

__all__ = [
    "RegionAwareEnsemblePlacementPolicy",
    "REGIONS_TO_WRITE",
    "MINIMUM_REGIONS_FOR_DURABILITY",
    "ENABLE_DURABILITY_ENFORCEMENT_IN_REPLACE",
    "DISABLE_DURABILITY_ENFORCEMENT",
    "LOCAL_REGION",
    "REMOTE_NODE_IN_REORDER_SEQUENCE",
    "water_fill",
]

REGIONS_TO_WRITE = "reppRegionsToWrite"
MINIMUM_REGIONS_FOR_DURABILITY = "reppMinimumRegionsForDurability"
ENABLE_DURABILITY_ENFORCEMENT_IN_REPLACE = "reppEnableDurabilityEnforcementInReplace"
#: Java reads a feature flag of this name; here it is a plain boolean option.
DISABLE_DURABILITY_ENFORCEMENT = "reppDisableDurabilityEnforcementFeature"
#: bkspark: name the client's region instead of resolving the local host.
LOCAL_REGION = "reppLocalRegion"
MINIMUM_REGIONS_FOR_DURABILITY_DEFAULT = 2
REMOTE_NODE_IN_REORDER_SEQUENCE = 2


def water_fill(total: int, capacity: Mapping[str, int], order: Sequence[str]) -> dict[str, int] | None:
    """Split ``total`` as evenly as ``capacity`` allows; earlier regions in ``order`` get the remainders.

    None when the capacities add up to less than ``total``.
    """
    if sum(capacity.get(g, 0) for g in order) < total:
        return None
    share = {g: 0 for g in order}
    left = total
    # Regions too small for the level they would get are filled up first, smallest first.
    rest = sorted(order, key=lambda g: capacity.get(g, 0))
    while rest and capacity.get(rest[0], 0) <= left // len(rest):
        g = rest.pop(0)
        share[g] = capacity.get(g, 0)
        left -= share[g]
    if rest:
        base, extra = divmod(left, len(rest))
        for i, g in enumerate([g for g in order if g in rest]):
            share[g] = base + (1 if i < extra else 0)
    return share


class RegionAwareEnsemblePlacementPolicy(RackawareEnsemblePlacementPolicy):
    """BookKeeper's ``RegionAwareEnsemblePlacementPolicy`` with an exhaustive layout search."""

    java_class_name = "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy"
    default_rack = DEFAULT_REGION_AND_RACK

    def __init__(self) -> None:
        super().__init__()
        self.regions_to_write: list[str] = []
        self.min_regions_for_durability = 0
        self.enforce_durability_in_replace = False
        self.local_region = UNKNOWN_REGION
        self._turn = 0

    def _configure(self, conf: Mapping[str, Any], dns_resolver: Any, clock: Clock | None) -> None:
        super()._configure(conf, dns_resolver, clock)
        self.regions_to_write = conf_list(conf, REGIONS_TO_WRITE)
        self.min_regions_for_durability = 0
        self.enforce_durability_in_replace = False
        if self.regions_to_write:
            self.min_regions_for_durability = conf_int(
                conf, MINIMUM_REGIONS_FOR_DURABILITY, MINIMUM_REGIONS_FOR_DURABILITY_DEFAULT
            )
            if self.min_regions_for_durability > 0:
                self.enforce_durability_in_replace = conf_bool(conf, ENABLE_DURABILITY_ENFORCEMENT_IN_REPLACE, True)
            if len(self.regions_to_write) < self.min_regions_for_durability:
                raise InvalidOptionError(
                    "regions provided are insufficient to meet the durability constraints",
                    key=REGIONS_TO_WRITE,
                    value=self.regions_to_write,
                    minimum=self.min_regions_for_durability,
                )
        if conf_bool(conf, DISABLE_DURABILITY_ENFORCEMENT, False):
            self.min_regions_for_durability = 1 if self.min_regions_for_durability else 0
        explicit = conf_str(conf, LOCAL_REGION)
        if explicit:
            self.local_region = explicit
        elif self.local_location:
            self.local_region = region_of(self.local_location)
        else:
            self.local_region = UNKNOWN_REGION
        self._turn = 0

    def region_of_bookie(self, bookie: str) -> str:
        """The region part of a bookie's location (``UnknownRegion`` for the default location)."""
        return region_of(self.location_of(bookie))

    def _region_of_rack(self, rack: str) -> str:
        return region_of(rack)

    def _check_durability_config(self, write_quorum_size: int, ack_quorum_size: int) -> int:
        """Java's configuration checks; returns the effective minimum number of regions."""
        need = self.min_regions_for_durability
        if ack_quorum_size < need:
            raise InvalidOptionError(
                "ack quorum is insufficient to meet the durability constraints",
                ack_quorum_size=ack_quorum_size,
                min_regions=need,
            )
        if need > 0 and ack_quorum_size <= write_quorum_size - write_quorum_size // need:
            raise InvalidOptionError(
                "ack quorum violates the durability requirement when running in degraded mode",
                ack_quorum_size=ack_quorum_size,
                write_quorum_size=write_quorum_size,
                min_regions=need,
            )
        return need

    def _region_order(self, regions: Collection[str]) -> list[str]:
        """The local region first, then the others in turn (rotating across calls)."""
        others = sorted(g for g in regions if g != self.local_region)
        if others:
            k = self._turn % len(others)
            others = others[k:] + others[:k]
            self._turn += 1
        return ([self.local_region] if self.local_region in regions else []) + others

    def _choose_ensemble(self, request: EnsembleRequest) -> list[str]:
        """An ensemble with equal region shares, racks and durability per write quorum.

        Raises :class:`NotEnoughBookiesError` when too few bookies remain, when
        durability (``reppMinimumRegionsForDurability``) cannot be met, or, with
        ``enforceMinNumRacksPerWriteQuorum``, when the rack rule cannot.
        """
        ensemble_size, write_quorum_size, ack_quorum_size = request.quorum_sizes
        min_regions = self._check_durability_config(write_quorum_size, ack_quorum_size)
        pool = self._pool(request.exclude)
        available = sum(len(v) for v in pool.values())
        if available < ensemble_size:
            raise self._not_enough(ensemble_size, available, racks=len(pool))
        capacity = {r: len(v) for r, v in pool.items()}
        region_capacity: dict[str, int] = {}
        for rack, n in capacity.items():
            g = self._region_of_rack(rack)
            region_capacity[g] = region_capacity.get(g, 0) + n
        shares = water_fill(ensemble_size, region_capacity, self._region_order(region_capacity))
        first = self.local_location if self.local_location != self.default_rack else None
        m = self._min_racks(write_quorum_size)
        durability = min_regions if min_regions > 1 else 0
        # Without durability, write quorums still span regions where a layout allows: first ask that no region
        # hold a whole write quorum (the durability rule with an ack quorum of Qw and two regions), then not.
        rules = [(durability, ack_quorum_size)]
        if not durability and write_quorum_size > 1 and len(region_capacity) > 1:
            rules.insert(0, (2, write_quorum_size))

        def attempt(want: int) -> list[str] | None:
            for quota in (shares, None) if len(region_capacity) > 1 else (None,):
                for regions_rule, ack_rule in rules:
                    layout = self._search(
                        LayoutProblem(
                            capacity,
                            ensemble_size,
                            write_quorum_size,
                            want,
                            ack_quorum=ack_rule,
                            min_regions=regions_rule,
                            region_of=self._region_of_rack,
                            region_quota=quota,
                            first_rack=first,
                        )
                    )
                    if layout.racks is not None:
                        return layout.racks
            return None

        for want in range(m, 0, -1):
            racks = attempt(want)
            if racks is not None:
                return self._fill(racks, pool)
            if self.enforce_min_racks:
                break
        raise NotEnoughBookiesError(
            "no ensemble meets the region and rack rules",
            ensemble_size=ensemble_size,
            write_quorum_size=write_quorum_size,
            ack_quorum_size=ack_quorum_size,
            min_racks=m,
            min_regions=min_regions,
            regions=region_capacity,
        )

    def _choose_replacement(self, request: Replacement) -> str:
        """A replacement from the same region if possible (keeping shares), else any region.

        Among the candidates that keep the rules (racks per quorum; durability
        when ``reppEnableDurabilityEnforcementInReplace``), prefer the replaced
        bookie's region, then racks the ensemble does not use, then its rack.
        """
        ranked = self._ranked_replacements(request, same_region_first=True)
        ensemble, bookie_to_replace = list(request.current_ensemble), request.bookie_to_replace
        write_quorum_size, ack_quorum_size = request.write_quorum_size, request.ack_quorum_size
        if bookie_to_replace not in ensemble:
            return ranked[0]
        index = ensemble.index(bookie_to_replace)
        m = self._min_racks(write_quorum_size)
        durable = self.min_regions_for_durability if self.enforce_durability_in_replace else 0
        if durable > 1 and not self._durable_elsewhere(ensemble, index, write_quorum_size, ack_quorum_size, durable):
            # The ensemble already breaks durability away from this position (Java counts it as anomalous
            # and stops enforcing); we cannot make it worse there.
            durable = 0
        fallback: str | None = None
        for b in ranked:
            trial = list(ensemble)
            trial[index] = b
            racks_ok = self._quorums_ok(trial, index, write_quorum_size, m, ack_quorum_size, 0)
            durable_ok = durable <= 1 or self._quorums_ok(trial, index, write_quorum_size, 1, ack_quorum_size, durable)
            if racks_ok and durable_ok:
                return b
            if durable_ok and fallback is None:
                fallback = b
        if fallback is not None and not (self.enforce_min_racks and m > 1):
            return fallback
        raise NotEnoughBookiesError(
            "no replacement keeps the region and rack rules",
            replacing=bookie_to_replace,
            min_racks=m,
            min_regions=durable,
        )

    def _quorums_ok(
        self, trial: Sequence[str], index: int, write_quorum_size: int, min_racks: int, ack_quorum_size: int, min_regions: int
    ) -> bool:
        for win in windows(len(trial), write_quorum_size):
            if index in win:
                racks = [self.location_of(trial[i]) for i in win]
                if not window_ok(racks, min_racks, ack_quorum_size, min_regions, region_of):
                    return False
        return True

    def _durable_elsewhere(
        self, ensemble: Sequence[str], index: int, write_quorum_size: int, ack_quorum_size: int, min_regions: int
    ) -> bool:
        """Whether the quorums not through ``index`` meet durability (only those we can fix matter)."""
        for win in windows(len(ensemble), write_quorum_size):
            if index not in win:
                racks = [self.location_of(ensemble[i]) for i in win]
                if not window_ok(racks, 1, ack_quorum_size, min_regions, region_of):
                    return False
        return True

    def is_ensemble_adhering(
        self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int
    ) -> PlacementResult:
        """Rack rule per quorum plus durability (Java's region-aware policy always says MEETS_STRICT)."""
        result = super().is_ensemble_adhering(ensemble, write_quorum_size, ack_quorum_size)
        need = self.min_regions_for_durability
        if need > 1 and result is not PlacementResult.FAIL:
            for win in windows(len(ensemble), write_quorum_size):
                racks = [self.location_of(ensemble[i]) for i in win]
                if not window_ok(racks, 1, ack_quorum_size, need, region_of):
                    return PlacementResult.FAIL
        return result

    # -- reads -------------------------------------------------------------

    def reorder_read_sequence(
        self, ensemble: Sequence[str], write_set: Sequence[int], failure_history: Mapping[str, int]
    ) -> list[int]:
        """Local writable bookies first, the first remote one moved up to third place, then the rest.

        With no known local region this is the rack-aware order.
        """
        if self.local_region == UNKNOWN_REGION:
            return super().reorder_read_sequence(ensemble, write_set, failure_history)

        def is_remote(bookie: str) -> bool:
            return self.region_of_bookie(bookie) != self.local_region

        ordered = order_for_read(ensemble, write_set, failure_history, self.writable, self.readonly, is_remote)
        cats = [
            read_category(ensemble[i], self.writable, self.readonly, failure_history, is_remote(ensemble[i]))
            for i in ordered
        ]
        remote = (ReadCategory.REMOTE, ReadCategory.REMOTE_FAIL)
        local = (ReadCategory.LOCAL, ReadCategory.LOCAL_FAIL)
        first_remote = next((k for k, c in enumerate(cats) if c in remote), None)
        if first_remote is not None:
            to = 0
            while to < REMOTE_NODE_IN_REORDER_SEQUENCE and to < len(cats) and cats[to] in local:
                to += 1
            ordered.insert(to, ordered.pop(first_remote))
        return ordered
