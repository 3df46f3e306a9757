"""Retry policies: bounded tries, exponential back-off, a deadline, decided by the errors' flags.

One object says how hard to try; the error says whether trying again can
help (:attr:`bkspark.errors.BKError.retriable`, read through
:func:`bkspark.errors.is_retriable`), as kazoo's ``KazooRetry`` and aiokafka's
``retriable`` errors split it.  Three policies are defined here:

* :data:`BOOKIE_RETRY` for operations against bookies (a read or a request
  that a bookie may answer after a restart, an overload, an ensemble change);
* :data:`BUSY_BOOKIE_RETRY` for adds a bookie refused as too many (ETOOMANYREQUESTS) when no other
  bookie can take its place: its queue drains in milliseconds, so the writer sends them to it again
  (docs/client.md, "Write path");
* :data:`METADATA_CAS_RETRY` for compare-and-set loops on ZooKeeper metadata
  (Java's ``MetadataUpdateLoop``): a lost race (:class:`MetadataVersionError`,
  retriable) re-reads and tries again, a bounded number of times.

ZooKeeper connection loss is a fourth policy, kazoo's own
(:class:`bkspark.metadata.retry.ZkRetry`), below these.

Two ways to use a policy:

* ``policy.call(fn, *args)`` / ``await policy.call_async(fn, *args)`` retry the
  whole call;
* a loop that must do something between tries (re-read, redraw an id) asks the
  policy at each failure::

      attempts = METADATA_CAS_RETRY.start()
      while True:
          try:
              return write(current)
          except MetadataVersionError as exc:
              attempts.backoff(exc)      # re-raises exc when the policy says stop
              current = read()

Nothing here is thread-bound: ``call``/``backoff`` sleep the calling thread,
``call_async``/``backoff_async`` sleep on the running event loop.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, replace
from typing import Any, Awaitable, Callable, TypeVar

from bkspark.errors import is_retriable

__all__ = ["RetryPolicy", "Attempts", "BOOKIE_RETRY", "BUSY_BOOKIE_RETRY", "METADATA_CAS_RETRY"]

T = TypeVar("T")

#: Where jitter is drawn from: the system's randomness, so a retry neither consumes nor depends on the
#: application's global ``random`` state (a seeded test or simulation stays reproducible), and processes forked
#: from one parent (Spark's Python workers) do not draw the same sequence.
_JITTER_RANDOM = random.SystemRandom()


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: at most ``max_tries`` tries within ``deadline`` seconds of the first.

    Between tries the delay starts at ``delay`` and grows by ``backoff`` up to
    ``max_delay``, each with up to ``jitter`` (a fraction) added at random so
    that racing clients spread out.  ``retry_on`` decides per error (default:
    the error's ``retriable`` flag).  Immutable; :meth:`with_` makes a variant.
    """

    max_tries: int = 3
    delay: float = 0.1
    backoff: float = 2.0
    max_delay: float = 2.0
    deadline: float | None = 30.0
    jitter: float = 0.1
    retry_on: Callable[[BaseException], bool] = is_retriable

    def __post_init__(self) -> None:
        if not isinstance(self.max_tries, int) or self.max_tries < 1:
            raise ValueError(f"max_tries must be an int >= 1, not {self.max_tries!r}")
        if self.delay < 0 or self.max_delay < 0 or self.backoff < 1 or self.jitter < 0:
            raise ValueError("delays and jitter must be >= 0 and backoff >= 1")
        if self.deadline is not None and self.deadline <= 0:
            raise ValueError(f"deadline must be positive or None, not {self.deadline!r}")

    def with_(self, **changes: Any) -> "RetryPolicy":
        """A copy with some fields changed (e.g. ``retry_on`` for one call site's rule)."""
        return replace(self, **changes)

    def start(self) -> "Attempts":
        """The state of one retried operation: its first try starts now."""
        return Attempts(self)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, tried again (sleeping this thread) while the policy allows."""
        attempts = self.start()
        while True:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the policy decides, else re-raised
                attempts.backoff(exc)

    async def call_async(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """``await fn(*args, **kwargs)``, tried again (sleeping on the loop) while the policy allows."""
        attempts = self.start()
        while True:
            try:
                return await fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the policy decides, else re-raised
                await attempts.backoff_async(exc)


class Attempts:
    """One operation's tries under a :class:`RetryPolicy` (not shared between operations)."""

    __slots__ = ("policy", "tries", "started", "_next_delay")

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        #: Tries made so far (the one that just failed included).
        self.tries = 0
        self.started = time.monotonic()
        self._next_delay = policy.delay

    def next_delay(self, error: BaseException) -> float:
        """Count a failed try; the seconds to wait before the next, or re-raise ``error`` to stop.

        Stops when ``retry_on(error)`` is false, after ``max_tries`` tries, or when
        the wait would end past the deadline.
        """
        self.tries += 1
        policy = self.policy
        if not policy.retry_on(error) or self.tries >= policy.max_tries:
            raise error
        delay = min(self._next_delay, policy.max_delay)
        if policy.jitter:
            delay += delay * policy.jitter * _JITTER_RANDOM.random()
        self._next_delay = max(self._next_delay, 1e-3) * policy.backoff
        if policy.deadline is not None and time.monotonic() - self.started + delay > policy.deadline:
            raise error
        return delay

    def backoff(self, error: BaseException) -> None:
        """:meth:`next_delay`, then sleep this thread."""
        delay = self.next_delay(error)
        if delay > 0:
            time.sleep(delay)

    async def backoff_async(self, error: BaseException) -> None:
        """:meth:`next_delay`, then sleep on the running loop."""
        delay = self.next_delay(error)
        await asyncio.sleep(delay)


#: Bookie operations: a few tries over seconds (a bookie restarting, overloaded or being replaced).
BOOKIE_RETRY = RetryPolicy(max_tries=3, delay=0.1, backoff=2.0, max_delay=1.0, deadline=30.0)

#: Adds refused as too many by a bookie no other can replace: sent to it again after 5 ms, doubling up to
#: 0.5 s; the writer sets the deadline to its addEntryTimeoutSec, counted from the refusal since its last
#: progress (docs/client.md, "Write path").
BUSY_BOOKIE_RETRY = RetryPolicy(max_tries=10_000, delay=0.005, backoff=2.0, max_delay=0.5, deadline=5.0, jitter=0.2)

#: Metadata compare-and-set: a lost race re-reads at once, then backs off a little; 20 tries
#: within a minute (Java's MetadataUpdateLoop never gives up; a bound turns a livelock into an error).
METADATA_CAS_RETRY = RetryPolicy(max_tries=20, delay=0.0, backoff=2.0, max_delay=0.5, deadline=60.0, jitter=0.5)
