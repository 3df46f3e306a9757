"""The read retry policy: which replica to ask, when to ask another, when enough bookies answered (loop thread).

One home for the rules every read of the client follows (docs/architecture.md, "Read retry policy"):

* **Replicas.** An entry's copies are on its write set; they are asked in the placement policy's order
  (:func:`read_order`, ``reorderReadSequenceEnabled``).  "No such entry/ledger" is an answer, not a
  failure: every other error notes the bookie as failed (:func:`note_read_failure`), which later read
  orders and ensemble changes pass over.
* **Speculative reads.** A single read still unanswered after ``speculativeReadTimeout`` asks the next
  replica too, the wait growing by ``speculativeReadTimeoutBackoffMultiplier`` each time
  (:func:`speculative_timeout`, :func:`next_speculation`; :class:`bkspark.client.reader.LedgerReader`).
* **Preferred bookie of batch reads.** Concurrent batch reads of one reader start on different replicas
  (:func:`rotate_to`), so an E = W ensemble serves them side by side.
* **Quorum reads.** Fencing, LAC reads and recovery reads ask several bookies at once and stop as soon as
  a rule says enough answered (:class:`QuorumRead` with :class:`Covered` or :class:`FoundOrAbsent`); an
  unauthorized answer ends them at once, and when every bookie answered without satisfying the rule,
  :func:`pick_error` names the failure.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Generic, Sequence, TypeVar

from bkspark.client.schedule import CoverageSet
from bkspark.errors import (
    BookieUnavailableError,
    DigestMismatchError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
)
from bkspark.protocol.correlation import read_body
from bkspark.protocol.ledger_metadata import LedgerMetadata

__all__ = [
    "MISSING",
    "ABSENT",
    "PENDING",
    "Covered",
    "FoundOrAbsent",
    "QuorumRead",
    "next_speculation",
    "note_read_failure",
    "pick_error",
    "read_order",
    "rotate_to",
    "speculative_timeout",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The errors that mean "this bookie has no such entry": an answer, never a failure of the bookie.
MISSING = (NoSuchEntryError, NoSuchLedgerError)


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: What a :class:`QuorumRead` rule is handed for a "no such entry" answer.
ABSENT: Any = _Marker("ABSENT")
#: What a :class:`QuorumRead` rule returns while more answers are needed.
PENDING: Any = _Marker("PENDING")


def pick_error(errors: list[BaseException], **context: Any) -> BaseException:
    """The error to report after every replica failed: a "real" one before "no such entry"."""
    for err in errors:
        if not isinstance(err, MISSING):
            return err
    if errors:
        return errors[0]
    return BookieUnavailableError("no bookie to read from", **context)


def note_read_failure(pool: Any, bookie: str, exc: BaseException) -> None:
    """Note ``bookie`` as failed in the connection pool's history, unless it only lacked the entry."""
    if not isinstance(exc, MISSING):
        pool.note_failure(bookie)


def read_order(ctx: Any, ensemble: Sequence[str], write_set: list[int]) -> list[int]:
    """The ensemble indexes of ``write_set`` in the order to ask them: the placement policy's, when
    ``reorderReadSequenceEnabled``; a policy that fails leaves the write set's own order."""
    if not ctx.conf.reorderReadSequenceEnabled:
        return write_set
    try:
        return list(ctx.policy.reorder_read_sequence(list(ensemble), write_set, ctx.failure_history()))
    except Exception:  # a policy bug must not break reads
        log.exception("reorder_read_sequence failed")
        return write_set


def speculative_timeout(conf: Any) -> float:
    """Seconds before a single read still unanswered asks its next replica too (0 or less: never); reads with
    one replica only never speculate."""
    return conf.speculativeReadTimeout / 1000.0


def next_speculation(conf: Any, delay: float) -> float:
    """The wait before the speculative ask after one that waited ``delay``."""
    return delay * conf.speculativeReadTimeoutBackoffMultiplier


def rotate_to(order: list[int], prefer: int | None, ensemble_size: int) -> list[int]:
    """``order`` starting at ensemble index ``prefer`` (modulo E) when it is one of the later ones, else as is."""
    if prefer is None:
        return order
    preferred = prefer % ensemble_size
    if preferred not in order[1:]:
        return order
    k = order.index(preferred)
    return order[k:] + order[:k]


class Covered(Generic[T]):
    """Rule of fencing and LAC reads: done once every write quorum of the last segment is covered
    (:class:`CoverageSet`, Java's ``RRQuorumCoverageSet``); the result is the largest value seen by ``key``."""

    __slots__ = ("coverage", "best", "key")

    def __init__(self, md: LedgerMetadata, initial: T, key: Callable[[T], Any] = lambda value: value) -> None:
        self.coverage = CoverageSet(md.ensemble_size, md.write_quorum_size, md.ack_quorum_size)
        self.best = initial
        self.key = key

    def __call__(self, index: int, value: Any) -> Any:
        if value is not ABSENT and self.key(value) > self.key(self.best):
            self.best = value
        self.coverage.add(index)
        return self.best if self.coverage.covered() else PENDING


class FoundOrAbsent:
    """Rule of a recovery read: the first good copy, or None once ``Qw - Qa + 1`` bookies of the write set lack
    the entry (then no add of it can have been acknowledged)."""

    __slots__ = ("needed", "absent")

    def __init__(self, md: LedgerMetadata) -> None:
        self.needed = md.write_quorum_size - md.ack_quorum_size + 1
        self.absent = 0

    def __call__(self, index: int, value: Any) -> Any:
        if value is not ABSENT:
            return value
        self.absent += 1
        return None if self.absent >= self.needed else PENDING


class QuorumRead:
    """Answers of ``asked`` bookies, one :meth:`answer` each, until ``rule`` decides (:attr:`done`).

    ``verify(data)`` checks a good answer's bytes (a :class:`DigestMismatchError` counts as that bookie's
    error); ``rule(index, value or ABSENT)`` returns the outcome or :data:`PENDING`.  Unauthorized ends the
    read at once; once every bookie answered and the rule still waits, :func:`pick_error` of their errors.
    """

    __slots__ = ("asked", "answered", "verify", "rule", "errors", "context", "done")

    def __init__(
        self, asked: int, rule: Callable[[int, Any], Any], verify: Callable[[Any], Any] | None = None, **context: Any
    ) -> None:
        self.asked = asked
        self.answered = 0
        self.rule = rule
        self.verify = verify
        self.errors: list[BaseException] = []
        self.context = context
        self.done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def on_response(self, resp: Any, exc: BaseException | None, index: int) -> None:
        """A READENTRY answer (or failure) from ensemble index ``index``: the callback of ``BookieOps.read``."""
        self.answer(index, None if exc is not None else read_body(resp), exc)

    def answer(self, index: int, data: Any, exc: BaseException | None) -> None:
        """Count one bookie's answer: its data, or the error it failed with."""
        self.answered += 1
        done = self.done
        if done.done():
            return
        outcome = PENDING
        if exc is None:
            try:
                value = data if self.verify is None else self.verify(data)
            except DigestMismatchError as err:
                self.errors.append(err)
            else:
                outcome = self.rule(index, value)
        elif isinstance(exc, MISSING):
            outcome = self.rule(index, ABSENT)
        elif isinstance(exc, UnauthorizedAccessError):
            done.set_exception(exc)
            return
        else:
            self.errors.append(exc)
        if outcome is not PENDING:
            done.set_result(outcome)
        elif self.answered >= self.asked:
            done.set_exception(pick_error(self.errors, **self.context))
