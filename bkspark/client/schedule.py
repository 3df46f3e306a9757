"""When enough bookies answered, and whether batch reads apply: pure functions, no I/O.

* the coverage rule of fencing / LAC reads (``RRQuorumCoverageSet``, docs/protocol.md §4 item 7);
* striping (E > Qw: no bookie holds every entry).

Write sets and the segment holding an entry are the ledger's own rules:
:func:`bkspark.protocol.ledger_metadata.write_set` and
:meth:`LedgerMetadata.segment <bkspark.protocol.ledger_metadata.LedgerMetadata.segment>`.
"""

from __future__ import annotations

__all__ = ["CoverageSet", "is_striped"]


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
