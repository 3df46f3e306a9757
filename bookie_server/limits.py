"""Bounds on what clients can make the bookie hold: requests in progress, and limit logging.

The Java bookie bounds adds and reads in progress per bookie
(``maxAddsInProgressLimit`` / ``maxReadsInProgressLimit``, 0 = unlimited): when
the bound is reached it stops reading the channel that brought the next
request (``setAutoRead(false)``) until a request in progress completes.  An
:class:`InFlightGate` is that bound on our one event loop: a connection whose
next request finds the gate full parks itself in the gate's FIFO and stops
reading; every release wakes parked connections in arrival order.

Every limit a client runs into is logged through :class:`LimitLog`: the first
hit of each limit is logged, later hits only as a count at most once a minute,
so a hostile client cannot turn the bookie's log into its own flood.

Everything here runs on the event loop thread (no locks).
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from itertools import accumulate

__all__ = ["InFlightGate", "LimitLog", "LIMIT_LOG_INTERVAL_S"]

log = logging.getLogger("bookie_server.limits")

#: Seconds between two log lines about the same limit (the count of hits in between is logged).
LIMIT_LOG_INTERVAL_S = 60.0


class InFlightGate:
    """At most ``max_count`` requests and ``max_bytes`` bytes in progress (0: no bound on that axis).

    A request that does not fit waits: its connection registers a wake-up
    callback with :meth:`wait` and stops reading.  The first request is always
    admitted when nothing is in progress, so one request larger than
    ``max_bytes`` still makes progress on its own.
    """

    def __init__(self, name: str, max_count: int, max_bytes: int = 0) -> None:
        self.name = name
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.count = 0
        self.bytes = 0
        self._waiters: deque[Callable[[], None]] = deque()

    def try_acquire(self, nbytes: int = 0) -> bool:
        """Take a slot for one request of ``nbytes``; False when the gate is full."""
        return self.try_acquire_many((nbytes,)) == 1

    def try_acquire_many(self, sizes: Sequence[int]) -> int:
        """Slots for the longest prefix of these requests (of ``sizes[i]`` bytes each) that fits: how many got one
        (the one home of the gate's rule; :meth:`try_acquire` is a run of one).

        A request fits while the count stays under ``max_count`` and the bytes within ``max_bytes``; the first
        request is admitted when nothing is in progress, whatever its size, and while connections are parked
        (FIFO fairness) none is admitted past that first one.  Both bounds are prefix conditions, so a run of adds
        received together is admitted in one call (docs/bookie.md, "Adds"): the shortest of the prefixes that
        fit each, found by a bisection over the running byte totals.
        """
        count = self.count
        if not sizes or (count and self._waiters):
            return 0
        n = len(sizes)
        if self.max_count:
            room = self.max_count - count
            n = min(n, max(room, 0) if count else max(room, 1))
        if self._waiters:
            n = min(n, 1)  # nothing in progress: the first goes, then the parked connections come first
        if self.max_bytes:
            totals = list(accumulate(sizes[:n]))
            fit = bisect_right(totals, self.max_bytes - self.bytes)
            n = min(n, fit if count else max(fit, 1))
            taken = totals[n - 1] if n else 0
        else:
            taken = sum(sizes[:n])
        self.count = count + n
        self.bytes += taken
        return n

    def release(self, nbytes: int = 0, count: int = 1) -> None:
        """Give ``count`` slots holding ``nbytes`` together back and wake the parked connections (they retry
        in FIFO order)."""
        self.count = max(self.count - count, 0)
        self.bytes = max(self.bytes - nbytes, 0)
        if self._waiters:
            self._wake()

    def wait(self, wake: Callable[[], None]) -> None:
        """Park a connection until a slot may be free; ``wake`` runs once, on a later release."""
        self._waiters.append(wake)
        if not self.count:
            self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, deque()
        for wake in waiters:
            wake()

    @property
    def waiting(self) -> int:
        """Connections parked on this gate now."""
        return len(self._waiters)


class LimitLog:
    """Logs a limit's first hit, then a count of hits at most once per interval (per limit)."""

    def __init__(
        self,
        interval_s: float = LIMIT_LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        on_hit: Callable[[str], None] | None = None,
    ) -> None:
        self.interval_s = interval_s
        self._on_hit = on_hit
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self.hits: dict[str, int] = {}

    def hit(self, limit: str, message: str, *args: object) -> None:
        """Count one hit of ``limit``; log it if it is the first or the interval has passed."""
        self.hits[limit] = self.hits.get(limit, 0) + 1
        if self._on_hit is not None:
            self._on_hit(limit)
        now = self._clock()
        last = self._last.get(limit)
        if last is not None and now - last < self.interval_s:
            self._suppressed[limit] = self._suppressed.get(limit, 0) + 1
            return
        suppressed = self._suppressed.pop(limit, 0)
        self._last[limit] = now
        suffix = f" ({suppressed} more hits of {limit} since the last report)" if suppressed else ""
        log.warning(message + suffix, *args, extra={"limit": limit, "hits": self.hits[limit]})
