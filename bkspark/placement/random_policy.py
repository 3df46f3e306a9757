"""The client's default policy: any writable bookies, chosen at random.

Mirrors BookKeeper's ``DefaultEnsemblePlacementPolicy`` (without disk weights):
shuffle the writable bookies, skip exclusions, take the first ``E``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from bkspark.placement.base import EnsemblePlacementPolicy, check_quorums

__all__ = ["RandomEnsemblePlacementPolicy"]


class RandomEnsemblePlacementPolicy(EnsemblePlacementPolicy):
    """Uniformly random ensembles; no topology, so every ensemble adheres."""

    java_class_name = "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy"

    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        custom_metadata: Mapping[str, bytes] | None = None,
        exclude: Collection[str] = frozenset(),
    ) -> list[str]:
        """``ensemble_size`` distinct random writable bookies outside ``exclude``."""
        check_quorums(ensemble_size, write_quorum_size, ack_quorum_size)
        pool = self._candidates(exclude)
        if len(pool) < ensemble_size:
            raise self._not_enough(ensemble_size, len(pool), excluded=len(set(exclude)))
        return self.rng.sample(pool, ensemble_size)

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
        """A random writable bookie that is neither in the ensemble nor excluded."""
        pool = self._candidates(set(exclude) | set(current_ensemble) | {bookie_to_replace})
        if not pool:
            raise self._not_enough(1, 0, replacing=bookie_to_replace)
        return self.rng.choice(pool)
