"""The client's default policy: any writable bookies, chosen at random.

Mirrors BookKeeper's ``DefaultEnsemblePlacementPolicy`` (without disk weights):
shuffle the writable bookies, skip exclusions, take the first ``E``.
"""

from __future__ import annotations

from bkspark.placement.base import EnsemblePlacementPolicy, EnsembleRequest, Replacement

__all__ = ["RandomEnsemblePlacementPolicy"]


class RandomEnsemblePlacementPolicy(EnsemblePlacementPolicy):
    """Uniformly random ensembles; no topology, so every ensemble adheres."""

    java_class_name = "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy"

    def _choose_ensemble(self, request: EnsembleRequest) -> list[str]:
        """``ensemble_size`` distinct random writable bookies outside ``exclude``."""
        pool = self._candidates(request.exclude)
        if len(pool) < request.ensemble_size:
            raise self._not_enough(request.ensemble_size, len(pool), excluded=len(request.exclude))
        return self.rng.sample(pool, request.ensemble_size)

    def _choose_replacement(self, request: Replacement) -> str:
        """A random writable bookie that is neither in the ensemble nor excluded."""
        pool = self._candidates(request.taken)
        if not pool:
            raise self._not_enough(1, 0, replacing=request.bookie_to_replace)
        return self.rng.choice(pool)
