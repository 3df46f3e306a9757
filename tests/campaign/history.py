"""A Jepsen-style history of client operations, and the checker that judges it (docs/reliability.md).

The workload logs every operation as an *invoke* followed by *ok* (it took effect), *fail* (it did not) or
*info* (unknown: a timeout, a killed process); the checker knows nothing of the code that produced the history
and proves BookKeeper's promises over it afterwards:

1. every acknowledged add (``ok``) is readable, byte for byte, in the final read of its ledger (after recovery
   where the writer died);
2. no add is acknowledged to a writer after another client fenced its ledger (``recover`` completed);
3. every client that recovers or opens the closed ledger, whichever client it is, sees the same last entry and the
   same bytes;
4. a reader never sees an entry the writer was not acknowledged for, except what recovery made durable (an entry
   whose add was invoked but not acknowledged may appear only at or below the recovered last entry), and never
   bytes no writer sent;
5. every committed Spark job's rows are read exactly once, no row of a failed or killed job is read, and every
   ledger such a job left is reported by the orphan audit.

Operations (``f``) and their values: ``add`` (invoke: ``(ledger, payload)``; ok: entry id), ``recover`` (ok:
last entry id), ``read`` (ok: ``{"entries": {entry id: payload}, "last": last entry id or None, "after_close":
bool}``), ``spark-write`` (invoke: ``(dataset, rows)``; ok, fail or info), ``spark-read`` (ok: list of rows),
``orphans`` (ok: set of ledger ids reported by the audit), ``spark-ledgers`` (ok: ``(job, ledger ids)``).
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = ["History", "Op", "check"]


@dataclass(frozen=True)
class Op:
    """One event of the history: ``index`` orders events in real time (the order they were logged)."""

    index: int
    process: str
    type: str  # invoke | ok | fail | info
    f: str
    ledger: int | None
    value: Any = None


class History:
    """Thread-safe, append-only list of :class:`Op` (what the workload threads log)."""

    def __init__(self) -> None:
        self._ops: list[Op] = []
        self._lock = threading.Lock()
        self._counter = itertools.count()

    def log(self, process: str, type_: str, f: str, ledger: int | None, value: Any = None) -> Op:
        """Append one event now."""
        if type_ not in ("invoke", "ok", "fail", "info"):
            raise ValueError(f"bad op type {type_!r}")
        with self._lock:
            op = Op(next(self._counter), process, type_, f, ledger, value)
            self._ops.append(op)
        return op

    @property
    def ops(self) -> list[Op]:
        """A snapshot of every event so far."""
        with self._lock:
            return list(self._ops)


def _adds(ops: list[Op]) -> dict[int, dict[str, Any]]:
    """ledger -> {"ok": {entry: (payload, ok index)}, "invoked": {payload, ...}}: the writers' view."""
    out: dict[int, dict[str, Any]] = {}
    pending: dict[str, Op] = {}  # process -> its open add invoke (a process has one op in flight)
    for op in ops:
        if op.f != "add":
            continue
        if op.type == "invoke":
            ledger, payload = op.value
            slot = out.setdefault(ledger, {"ok": {}, "invoked": set()})
            slot["invoked"].add(payload)
            pending[op.process] = op
        else:
            inv = pending.pop(op.process, None)
            if inv is None:
                raise ValueError(f"{op.type} add without an invoke: {op}")
            ledger, payload = inv.value
            if op.type == "ok":
                out[ledger]["ok"][op.value] = (payload, op.index)
    return out


def check(history: History | list[Op]) -> list[str]:
    """Every violation of the properties above, as sentences (empty: the history is valid)."""
    ops = history.ops if isinstance(history, History) else list(history)
    problems: list[str] = []
    adds = _adds(ops)
    recovered = [op for op in ops if op.f == "recover" and op.type == "ok"]
    reads = [op for op in ops if op.f == "read" and op.type == "ok"]

    # 3. one last entry for each ledger, whoever recovers or opens it once it is closed.
    last_of: dict[int, int] = {}
    for op in recovered + [r for r in reads if r.value.get("after_close")]:
        last = op.value if op.f == "recover" else op.value["last"]
        seen = last_of.setdefault(op.ledger, last)  # type: ignore[arg-type]
        if seen != last:
            problems.append(f"ledger {op.ledger}: {op.process} saw last entry {last}, another client saw {seen}")

    # 2. nothing acknowledged after the fence.
    for op in recovered:
        for entry, (payload, ok_index) in adds.get(op.ledger, {"ok": {}})["ok"].items():  # type: ignore[index]
            if ok_index > op.index and entry > op.value:
                problems.append(
                    f"ledger {op.ledger}: entry {entry} acknowledged (op {ok_index}) after {op.process} fenced the "
                    f"ledger at last entry {op.value} (op {op.index})"
                )

    # 3 (bytes) and 4. what readers saw.
    final_bytes: dict[int, dict[int, bytes]] = {}
    for op in reads:
        ledger = op.ledger
        writer = adds.get(ledger, {"ok": {}, "invoked": set()})  # type: ignore[arg-type]
        durable_last = last_of.get(ledger)  # type: ignore[arg-type]
        for entry, payload in op.value["entries"].items():
            if payload not in writer["invoked"]:
                problems.append(f"ledger {ledger}: {op.process} read entry {entry} with bytes no writer sent")
                continue
            acked = writer["ok"].get(entry)
            if acked is not None and acked[0] != payload:
                problems.append(f"ledger {ledger}: {op.process} read other bytes at entry {entry} than were acknowledged")
            if acked is None and (durable_last is None or entry > durable_last):
                problems.append(
                    f"ledger {ledger}: {op.process} read entry {entry}, never acknowledged and not made durable by "
                    f"recovery (recovered last entry {durable_last})"
                )
            if op.value.get("after_close"):
                first = final_bytes.setdefault(ledger, {}).setdefault(entry, payload)  # type: ignore[arg-type]
                if first != payload:
                    problems.append(f"ledger {ledger}: two readers of the closed ledger disagree on entry {entry}")

    # 1. every acknowledged add is in a final read.
    for ledger, writer in adds.items():
        finals = [op for op in reads if op.ledger == ledger and op.value.get("after_close")]
        if not finals and writer["ok"]:
            problems.append(f"ledger {ledger}: {len(writer['ok'])} acknowledged entries but no final read")
            continue
        for final in finals:
            for entry, (payload, _) in sorted(writer["ok"].items()):
                got = final.value["entries"].get(entry)
                if got is None:
                    problems.append(f"ledger {ledger}: acknowledged entry {entry} missing from {final.process}'s read")
                elif got != payload:
                    problems.append(f"ledger {ledger}: acknowledged entry {entry} has other bytes in {final.process}'s read")

    problems += _check_spark(ops)
    return problems


def _check_spark(ops: list[Op]) -> list[str]:
    """5. committed jobs exactly once, failed or killed jobs not at all, their ledgers reported as orphans."""
    problems: list[str] = []
    jobs: dict[str, dict[str, Any]] = {}
    for op in ops:
        if op.f == "spark-write":
            job = jobs.setdefault(op.process, {})
            if op.type == "invoke":
                job["dataset"], job["rows"] = op.value
            else:
                job["outcome"] = op.type
        elif op.f == "spark-ledgers" and op.type == "ok":
            jobs.setdefault(op.value[0], {})["ledgers"] = set(op.value[1])
    reads = [op for op in ops if op.f == "spark-read" and op.type == "ok"]
    orphans: set[int] = set()
    for op in ops:
        if op.f == "orphans" and op.type == "ok":
            orphans |= set(op.value)
    for op in reads:
        dataset = op.ledger if op.ledger is not None else op.value.get("dataset")
        counts = Counter(op.value["rows"])
        expected: Counter[Any] = Counter()
        maybe: set[Any] = set()
        for name, job in jobs.items():
            if job.get("dataset") != dataset:
                continue
            if job.get("outcome") == "ok":
                expected.update(job["rows"])
            elif job.get("outcome") == "info":  # outcome unknown: all of its rows or none
                maybe.update(job["rows"])
        for row, n in counts.items():
            if row in maybe and n == 1 and row not in expected:
                continue
            if n != expected.get(row, 0):
                problems.append(f"dataset {dataset}: row {row!r} read {n} times, committed {expected.get(row, 0)}")
        for row in expected:
            if row not in counts:
                problems.append(f"dataset {dataset}: committed row {row!r} not read")
        partial = {name for name, job in jobs.items() if job.get("outcome") == "info" and job.get("dataset") == dataset}
        for name in partial:
            present = sum(1 for row in jobs[name]["rows"] if row in counts)
            if present not in (0, len(jobs[name]["rows"])):
                problems.append(f"dataset {dataset}: job {name} of unknown outcome is partly visible ({present} rows)")
    if any(op.f == "orphans" for op in ops):
        for name, job in jobs.items():
            if job.get("outcome") in ("fail", "info") and "ledgers" in job:
                missing = job["ledgers"] - orphans
                # A job of unknown outcome whose rows are visible committed, and so left no orphans.
                committed = job["outcome"] == "info" and any(
                    row in job["rows"] for r in reads for row in r.value["rows"]
                )
                if missing and not committed:
                    problems.append(f"job {name}: ledgers {sorted(missing)} left behind and not reported by the audit")
    return problems
