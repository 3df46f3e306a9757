"""Where entries live and when enough bookies answered: pure functions, no I/O.

* write sets: BookKeeper's ``RoundRobinDistributionSchedule`` (spec §4.1);
* the ack set of a pending add (distinct bookies, spec §4.2);
* the coverage rule of fencing / LAC reads (``RRQuorumCoverageSet``, spec §4.7);
* the ensemble in force for an entry (greatest segment start <= entry).
"""

from __future__ import annotations

import bisect
from typing import Mapping, Sequence

__all__ = ["write_set", "ensemble_for", "segment_end", "CoverageSet", "is_striped"]


def write_set(entry_id: int, ensemble_size: int, write_quorum_size: int) -> list[int]:
    """Ensemble indexes holding ``entry_id``: ``(e + i) mod E`` for ``i < Qw``, in that order."""
    return [(entry_id + i) % ensemble_size for i in range(write_quorum_size)]


def ensemble_for(ensembles: Mapping[int, Sequence[str]], entry_id: int) -> tuple[int, Sequence[str]]:
    """``(first_entry_id, bookies)`` of the segment holding ``entry_id``."""
    keys = sorted(ensembles)
    pos = bisect.bisect_right(keys, entry_id) - 1
    if pos < 0:
        pos = 0
    key = keys[pos]
    return key, ensembles[key]


def segment_end(ensembles: Mapping[int, Sequence[str]], entry_id: int) -> int | None:
    """Last entry id of the segment holding ``entry_id`` (None for the last segment)."""
    keys = sorted(ensembles)
    pos = bisect.bisect_right(keys, entry_id)
    return keys[pos] - 1 if pos < len(keys) else None


def is_striped(ensemble_size: int, write_quorum_size: int) -> bool:
    """True when no single bookie holds every entry (E > Qw): batch reads cannot be used."""
    return ensemble_size > write_quorum_size


class CoverageSet:
    """Java's ``RRQuorumCoverageSet``: are enough bookies of every write quorum accounted for?

    Covered when, for each of the E write quorums, fewer than Qa members are
    still unknown, i.e. every quorum has at least ``Qw - Qa + 1`` answers: then
    no entry can have been acknowledged without one of the answering bookies
    having seen it.
    """

    __slots__ = ("ensemble_size", "write_quorum_size", "ack_quorum_size", "known")

    def __init__(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int) -> None:
        self.ensemble_size = ensemble_size
        self.write_quorum_size = write_quorum_size
        self.ack_quorum_size = ack_quorum_size
        self.known: set[int] = set()

    def add(self, index: int) -> None:
        """Record a valid answer (entry, or "nothing here") from ensemble index ``index``."""
        self.known.add(index)

    def covered(self) -> bool:
        """Whether every write quorum has fewer than Qa unknown members."""
        e, w, a = self.ensemble_size, self.write_quorum_size, self.ack_quorum_size
        for start in range(e):
            unknown = sum(1 for j in range(w) if (start + j) % e not in self.known)
            if unknown >= a:
                return False
        return True
