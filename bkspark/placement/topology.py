"""The network topology: bookies as leaves of a ``/region/rack`` tree.

Locations follow BookKeeper's ``NodeBase`` rules: they start with ``/``, a
trailing ``/`` is dropped, and every leaf sits at the same depth (a topology
mixing ``/rack`` and ``/region/rack`` is rejected, as ``NetworkTopologyImpl``
does).  Placement only needs a few questions answered, so the tree is stored
as a map from bookie to location plus per-location counts; scopes are path
prefixes, and ``~scope`` means "everything outside scope" as in Java.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from bkspark.errors import InvalidTopologyError

__all__ = [
    "DEFAULT_RACK",
    "DEFAULT_REGION",
    "DEFAULT_REGION_AND_RACK",
    "UNKNOWN_REGION",
    "normalize_location",
    "region_of",
    "in_scope",
    "NetworkTopology",
    "StabilizeNetworkTopology",
]

#: BookKeeper's ``NetworkTopology`` constants: rack-aware policies default to
#: ``/default-rack``, region-aware ones to ``/default-region/default-rack``.
DEFAULT_REGION = "/default-region"
DEFAULT_RACK = "/default-rack"
DEFAULT_REGION_AND_RACK = DEFAULT_REGION + DEFAULT_RACK
#: What ``RegionAwareEnsemblePlacementPolicy`` calls the region of a default-located bookie.
UNKNOWN_REGION = "UnknownRegion"


def normalize_location(path: str | None) -> str:
    """``NodeBase.normalize``: ``""`` is the root; must start with ``/``; no trailing ``/``."""
    if not path:
        return ""
    if not path.startswith("/"):
        raise InvalidTopologyError("network location does not start with /", location=path)
    path = path.rstrip("/")
    if "//" in path:
        raise InvalidTopologyError("network location has an empty component", location=path)
    return path


def region_of(location: str) -> str:
    """The region of a ``/region/rack`` location, as the region-aware policy parses it."""
    if location == DEFAULT_REGION_AND_RACK:
        return UNKNOWN_REGION
    parts = location.split("/")
    if len(parts) <= 2:
        return UNKNOWN_REGION
    return parts[1]


def in_scope(location: str, scope: str) -> bool:
    """Whether ``location`` lies under ``scope`` (a location prefix at component boundaries)."""
    return scope == "" or location == scope or location.startswith(scope + "/")


class NetworkTopology:
    """Bookies placed at network locations; leaves all at one depth."""

    def __init__(self) -> None:
        self._location: dict[str, str] = {}
        self._rack_sizes: dict[str, int] = {}
        self._depth: int | None = None

    # -- changes -------------------------------------------------------------

    def add(self, bookie: str, location: str) -> None:
        """Place ``bookie`` at ``location`` (moving it if it was elsewhere)."""
        loc = normalize_location(location)
        depth = loc.count("/")
        if depth == 0:
            raise InvalidTopologyError("a bookie cannot sit at the root", bookie=bookie)
        if self._depth is not None and depth != self._depth and (self._location.keys() - {bookie}):
            raise InvalidTopologyError(
                "all bookies must be at the same depth", bookie=bookie, location=loc, expected_depth=self._depth
            )
        NetworkTopology.remove(self, bookie)  # a move, never a delayed departure
        self._location[bookie] = loc
        self._rack_sizes[loc] = self._rack_sizes.get(loc, 0) + 1
        self._depth = depth

    def remove(self, bookie: str) -> str | None:
        """Take ``bookie`` out; returns where it was (None if unknown)."""
        loc = self._location.pop(bookie, None)
        if loc is not None:
            left = self._rack_sizes[loc] - 1
            if left:
                self._rack_sizes[loc] = left
            else:
                del self._rack_sizes[loc]
            if not self._location:
                self._depth = None
        return loc

    # -- queries ---------------------------------------------------------------

    def __contains__(self, bookie: object) -> bool:
        return bookie in self._location

    def __len__(self) -> int:
        return len(self._location)

    def location_of(self, bookie: str) -> str | None:
        """The rack location of ``bookie`` (without the bookie itself)."""
        return self._location.get(bookie)

    def bookies(self) -> set[str]:
        return set(self._location)

    def racks(self) -> set[str]:
        """Every location that holds at least one bookie."""
        return set(self._rack_sizes)

    def num_racks(self) -> int:
        """``NetworkTopology.getNumOfRacks``."""
        return len(self._rack_sizes)

    def leaves(self, scope: str = "", exclude: Iterable[str] = ()) -> set[str]:
        """Bookies under ``scope`` but under none of ``exclude``.

        ``scope`` may use Java's ``~`` form: ``"~/r1,/r2"`` is everything outside
        ``/r1`` and ``/r2``.
        """
        excluded = [normalize_location(e) for e in exclude]
        if scope.startswith("~"):
            excluded += [normalize_location(s) for s in scope[1:].split(",") if s]
            scope = ""
        base = normalize_location(scope)
        return {
            b
            for b, loc in self._location.items()
            if in_scope(loc, base) and not any(in_scope(loc, e) for e in excluded)
        }

    def count_available(self, scope: str = "", excluded_bookies: Iterable[str] = ()) -> int:
        """``countNumOfAvailableNodes``: bookies under ``scope`` that are not excluded."""
        return len(self.leaves(scope) - set(excluded_bookies))


class StabilizeNetworkTopology(NetworkTopology):
    """A topology that keeps vanished bookies for ``stabilize_seconds`` before removing them.

    Flapping ZooKeeper registrations (session expiry, restarts) then do not
    reshape the rack tree.  A bookie that comes back within the period cancels
    its pending removal.  Time comes from an injected ``clock`` (monotonic
    seconds); removals fall due lazily, on the next change or query.
    """

    def __init__(self, stabilize_seconds: float, clock: Callable[[], float]) -> None:
        super().__init__()
        self.stabilize_seconds = stabilize_seconds
        self.clock = clock
        self._pending: dict[str, float] = {}

    def add(self, bookie: str, location: str) -> None:
        self._pending.pop(bookie, None)
        self.expire()
        super().add(bookie, location)

    def remove(self, bookie: str) -> str | None:
        """Schedule the removal; the bookie stays in the tree until the period ends."""
        loc = self.location_of(bookie)
        if loc is not None and bookie not in self._pending:
            self._pending[bookie] = self.clock() + self.stabilize_seconds
        self.expire()
        return loc

    def remove_now(self, bookie: str) -> str | None:
        """Remove at once (a rack change, not a departure)."""
        self._pending.pop(bookie, None)
        return super().remove(bookie)

    def pending_removals(self) -> set[str]:
        self.expire()
        return set(self._pending)

    def expire(self) -> None:
        """Carry out every removal whose period has passed."""
        now = self.clock()
        for bookie, due in list(self._pending.items()):
            if due <= now:
                del self._pending[bookie]
                super().remove(bookie)

    def location_of(self, bookie: str) -> str | None:
        return self._location.get(bookie)

    def racks(self) -> set[str]:
        self.expire()
        return super().racks()

    def num_racks(self) -> int:
        self.expire()
        return super().num_racks()

    def leaves(self, scope: str = "", exclude: Iterable[str] = ()) -> set[str]:
        self.expire()
        return super().leaves(scope, exclude)
