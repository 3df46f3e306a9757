"""The campaign's checker on hand-made histories: it accepts what BookKeeper allows and names what it forbids."""

from __future__ import annotations

from tests.campaign.history import History, check

L = 7


def _add(h: History, proc: str, entry: int | None, payload: bytes, outcome: str = "ok") -> None:
    h.log(proc, "invoke", "add", L, (L, payload))
    h.log(proc, outcome, "add", L, entry)


def _final(h: History, proc: str, entries: dict[int, bytes], last: int) -> None:
    h.log(proc, "ok", "read", L, {"entries": entries, "last": last, "after_close": True})


def test_a_clean_history_passes() -> None:
    h = History()
    _add(h, "w", 0, b"a")
    _add(h, "w", 1, b"b")
    _add(h, "w", None, b"c", "info")  # timed out: it may or may not be there
    h.log("r", "ok", "recover", L, 2)
    _final(h, "py", {0: b"a", 1: b"b", 2: b"c"}, 2)
    _final(h, "java", {0: b"a", 1: b"b", 2: b"c"}, 2)
    assert check(h) == []


def test_a_lost_acknowledged_entry_is_named() -> None:
    h = History()
    _add(h, "w", 0, b"a")
    _add(h, "w", 1, b"b")
    h.log("r", "ok", "recover", L, 0)
    _final(h, "py", {0: b"a"}, 0)
    problems = check(h)
    assert any("acknowledged entry 1 missing" in p for p in problems), problems


def test_an_ack_after_the_fence_is_named() -> None:
    h = History()
    _add(h, "w", 0, b"a")
    h.log("r", "ok", "recover", L, 0)
    _add(h, "w", 1, b"b")
    _final(h, "py", {0: b"a", 1: b"b"}, 0)
    problems = check(h)
    assert any("acknowledged (op" in p and "after r fenced" in p for p in problems), problems


def test_clients_disagreeing_on_the_last_entry_or_bytes_are_named() -> None:
    h = History()
    _add(h, "w", 0, b"a")
    _add(h, "w", None, b"b", "fail")
    h.log("py", "ok", "recover", L, 0)
    h.log("java", "ok", "recover", L, 1)
    _final(h, "py", {0: b"a"}, 0)
    problems = check(h)
    assert any("saw last entry 1, another client saw 0" in p for p in problems), problems


def test_phantom_and_unacknowledged_reads_are_named() -> None:
    h = History()
    _add(h, "w", 0, b"a")
    _add(h, "w", None, b"b", "info")
    h.log("reader", "ok", "read", L, {"entries": {0: b"a", 1: b"b", 2: b"zz"}, "last": None})
    problems = check(h)
    assert any("bytes no writer sent" in p for p in problems), problems
    assert any("read entry 1, never acknowledged and not made durable" in p for p in problems), problems


def test_an_unacknowledged_entry_made_durable_by_recovery_is_allowed() -> None:
    h = History()
    _add(h, "w", 0, b"a")
    _add(h, "w", None, b"b", "info")
    h.log("reader", "ok", "read", L, {"entries": {0: b"a", 1: b"b"}, "last": None})
    h.log("r", "ok", "recover", L, 1)
    _final(h, "py", {0: b"a", 1: b"b"}, 1)
    assert check(h) == []


def test_spark_jobs_committed_once_failed_never_orphans_reported() -> None:
    h = History()
    h.log("job-a", "invoke", "spark-write", None, ("ds", [1, 2]))
    h.log("job-a", "ok", "spark-write", None)
    h.log("job-b", "invoke", "spark-write", None, ("ds", [3, 4]))
    h.log("job-b", "fail", "spark-write", None)
    h.log("job-b", "ok", "spark-ledgers", None, ("job-b", [41, 42]))
    h.log("reader", "ok", "spark-read", None, {"dataset": "ds", "rows": [1, 2]})
    h.log("audit", "ok", "orphans", None, [41, 42])
    assert check(h) == []
    bad = History()
    for op in h.ops[:-2]:
        bad.log(op.process, op.type, op.f, op.ledger, op.value)
    bad.log("reader", "ok", "spark-read", None, {"dataset": "ds", "rows": [1, 2, 2, 3]})
    bad.log("audit", "ok", "orphans", None, [41])
    problems = check(bad)
    assert any("row 2 read 2 times" in p for p in problems), problems
    assert any("row 3 read 1 times, committed 0" in p for p in problems), problems
    assert any("ledgers [42] left behind" in p for p in problems), problems
