"""The read retry policy's one home (bkspark/client/quorum.py): quorum reads' rules, error picking, replica order."""

from __future__ import annotations

import asyncio
from operator import itemgetter
from types import SimpleNamespace
from typing import Any

import pytest

from bkspark.client import quorum as q
from bkspark.errors import (
    BookieTimeoutError as BKTimeoutError,
    BookieUnavailableError,
    DigestMismatchError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
)
from bkspark.protocol.digest import DigestType
from bkspark.protocol.ledger_metadata import LedgerMetadata

BOOKIES = ("a:1", "b:1", "c:1")


def _md(e: int = 3, w: int = 3, a: int = 2) -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=e, write_quorum_size=w, ack_quorum_size=a, digest_type=DigestType.CRC32C, password=b"",
        ensembles={0: ("a:1", "b:1", "c:1", "d:1")[:e]},
    )


def _run(answers: list[tuple[int, Any, BaseException | None]], rule: Any, asked: int, verify: Any = None) -> Any:
    """Feed ``answers`` to a QuorumRead and return its outcome (or raise its error)."""

    async def main() -> Any:
        read = q.QuorumRead(asked, rule, verify, ledger_id=7)
        for index, data, exc in answers:
            read.answer(index, data, exc)
        assert read.done.done(), "the read should have decided"
        return await read.done

    return asyncio.run(main())


def test_covered_waits_for_every_write_quorum_then_gives_the_largest_value() -> None:
    """E = Qw = 3, Qa = 2: two answers cover (each quorum has Qw - Qa + 1 = 2 known); "no such entry" counts."""
    rule = q.Covered(_md(), (-1, 0), key=itemgetter(0))
    assert rule(0, (4, 100)) is q.PENDING
    assert rule(1, q.ABSENT) == (4, 100)
    assert _run([(0, (3, 10), None), (2, (9, 90), None)], q.Covered(_md(), (-1, 0), key=itemgetter(0)), 3) == (9, 90)
    # Equal LACs keep the first answer's length (only a larger LAC replaces it, as Java's fencing does).
    assert _run([(0, (5, 1), None), (1, (5, 2), None)], q.Covered(_md(), (-1, 0), key=itemgetter(0)), 3) == (5, 1)
    assert _run([(0, None, NoSuchLedgerError("gone")), (1, None, NoSuchEntryError("gone"))], q.Covered(_md(), -1), 3) == -1


def test_found_or_absent_takes_the_first_good_copy_or_qw_minus_qa_plus_one_absences() -> None:
    assert _run([(0, None, NoSuchEntryError("x")), (1, b"entry", None)], q.FoundOrAbsent(_md()), 3) == b"entry"
    md = _md(e=3, w=3, a=2)  # Qw - Qa + 1 = 2 absences end the ledger
    rule = q.FoundOrAbsent(md)
    assert rule(0, q.ABSENT) is q.PENDING and rule(1, q.ABSENT) is None
    assert _run([(0, None, NoSuchEntryError("x")), (1, None, NoSuchLedgerError("y"))], q.FoundOrAbsent(md), 3) is None


def test_a_bad_copy_and_other_errors_count_against_the_bookie_and_unauthorized_ends_at_once() -> None:
    def verify(data: Any) -> Any:
        if data == b"bad":
            raise DigestMismatchError("bad copy")
        return data

    # A bad copy is that bookie's error; the others decide.
    assert _run([(0, b"bad", None), (1, b"good", None)], q.FoundOrAbsent(_md()), 3, verify) == b"good"
    with pytest.raises(UnauthorizedAccessError):
        _run([(0, None, UnauthorizedAccessError("no"))], q.FoundOrAbsent(_md()), 3)
    # Every bookie answered without satisfying the rule: a real error before "no such entry".
    with pytest.raises(BKTimeoutError):
        _run(
            [(0, None, NoSuchEntryError("x")), (1, None, BKTimeoutError("slow")), (2, b"bad", None)],
            q.FoundOrAbsent(_md(w=3, a=1)), 3, verify,
        )


def test_answers_after_the_decision_are_counted_and_ignored() -> None:
    async def main() -> None:
        read = q.QuorumRead(3, q.FoundOrAbsent(_md()))
        read.answer(0, b"first", None)
        read.answer(1, None, UnauthorizedAccessError("late"))
        read.answer(2, b"second", None)
        assert read.answered == 3 and await read.done == b"first"

    asyncio.run(main())


def test_pick_error_prefers_a_real_error_and_names_a_read_with_no_answer() -> None:
    missing, real = NoSuchEntryError("m"), BKTimeoutError("t")
    assert q.pick_error([missing, real]) is real
    assert q.pick_error([missing]) is missing
    err = q.pick_error([], ledger_id=3, entry_id=4)
    assert isinstance(err, BookieUnavailableError) and err.context == {"ledger_id": 3, "entry_id": 4}


def test_only_failures_other_than_a_missing_entry_mark_a_bookie_as_failed() -> None:
    noted: list[str] = []
    pool = SimpleNamespace(note_failure=noted.append)
    q.note_read_failure(pool, "a:1", NoSuchEntryError("m"))
    q.note_read_failure(pool, "b:1", NoSuchLedgerError("m"))
    q.note_read_failure(pool, "c:1", BKTimeoutError("t"))
    assert noted == ["c:1"]


def test_replica_order_speculation_and_preferred_bookie() -> None:
    class Policy:
        def reorder_read_sequence(self, ensemble: list[str], ws: list[int], history: dict[str, int]) -> list[int]:
            assert ensemble == list(BOOKIES) and history == {"a:1": 0}
            return list(reversed(ws))

    conf = SimpleNamespace(
        reorderReadSequenceEnabled=True, speculativeReadTimeout=400, speculativeReadTimeoutBackoffMultiplier=2.0
    )
    ctx = SimpleNamespace(conf=conf, policy=Policy(), failure_history=lambda: {"a:1": 0})
    assert q.read_order(ctx, BOOKIES, [0, 1, 2]) == [2, 1, 0]
    conf.reorderReadSequenceEnabled = False
    assert q.read_order(ctx, BOOKIES, [0, 1, 2]) == [0, 1, 2]
    conf.reorderReadSequenceEnabled = True
    ctx.policy = SimpleNamespace(reorder_read_sequence=lambda *a: 1 / 0)  # a policy bug leaves the write set's order
    assert q.read_order(ctx, BOOKIES, [1, 2, 0]) == [1, 2, 0]
    assert q.speculative_timeout(conf) == 0.4 and q.next_speculation(conf, 0.4) == 0.8
    assert q.rotate_to([0, 1, 2], 4, 3) == [1, 2, 0]  # 4 mod 3 = 1
    assert q.rotate_to([0, 1, 2], 0, 3) == [0, 1, 2] and q.rotate_to([0, 2], 1, 3) == [0, 2]
    assert q.rotate_to([0, 1, 2], None, 3) == [0, 1, 2]
