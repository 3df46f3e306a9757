"""Fault points of the Spark writer's commit protocol, for tests that crash it between its steps.

Every transition of the writer's state machine (docs/connector.md, "The commit protocol") calls
:func:`fault_point` with the name of the step it has just completed (:data:`FAULT_POINTS`).  Nothing happens
unless a fault plan is set, in this process by :func:`injected`, or for Spark's own driver processes (the
planner processes that run ``commit``/``abort`` are started by the JVM and inherit its environment) by the
environment variable ``BKSPARK_WRITER_FAULTS``, either the plan itself or ``@<file>`` holding it (read at
every fault point, so a test can change it between jobs of one Spark session).

A plan is ``<point>=<action>[,<point>=<action>...]``; an action is

- ``connection-loss``: raise kazoo's ``ConnectionLoss`` (what a ZooKeeper call raises when the link drops);
- ``delete-refused``: raise :class:`~bkspark.errors.BookieIOError` (a ledger delete the cluster refused);
- ``kill``: SIGKILL every process of this process's session (Linux), itself last: the whole driver dies at
  once (JVM, Python planners and workers; PySpark's worker daemon has a process group of its own, but not a
  session).  Run the job in a session of its own (``start_new_session=True``).

``<action>*<n>`` fires only the first n times.  With a plan file, that count is kept in ``<file>.fired``
(shared by every process reading the plan); in-process plans count per :func:`injected` block.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

__all__ = ["ENV_FAULTS", "FAULT_POINTS", "fault_point", "injected"]

ENV_FAULTS = "BKSPARK_WRITER_FAULTS"

#: Every fault point, in the order a committing job passes them (abort's after commit's).
FAULT_POINTS = (
    "job.begun",             # driver (stream sink: the batch's first task): job record created, state writing
    "task.registered",       # task: its ledger registered under the job, before the first entry
    "commit.shards-written", # driver: the new manifest shards written, before the multi
    "commit.published",      # driver: the multi succeeded -- THE COMMIT POINT
    "commit.attempts-deleted",  # driver: ledgers of attempts that did not commit deleted
    "commit.retired-deleted",   # driver: ledgers an overwrite replaced (and their parents) deleted
    "commit.forgotten",      # driver: the job record removed
    "abort.fenced",          # driver: job record moved to aborting (it can no longer publish)
    "abort.ledgers-deleted", # driver: the job's ledgers deleted
    "abort.forgotten",       # driver: the job record removed
    "ledger.delete",         # before every ledger delete of a commit or abort (a refused delete)
)

_ACTIONS = ("connection-loss", "delete-refused", "kill")


_local_plan: dict[str, tuple[str, int | None]] | None = None
_local_fired: dict[str, int] = {}
_lock = threading.Lock()


def _parse(text: str) -> dict[str, tuple[str, int | None]]:
    plan: dict[str, tuple[str, int | None]] = {}
    for item in text.replace("\n", ",").split(","):
        item = item.strip()
        if not item or item.startswith("#"):
            continue
        point, _, action = item.partition("=")
        action, _, times = action.strip().partition("*")
        point, action = point.strip(), action.strip()
        if point not in FAULT_POINTS or action not in _ACTIONS:
            raise ValueError(f"bad fault plan item {item!r}: points {FAULT_POINTS}, actions {_ACTIONS}")
        plan[point] = (action, int(times) if times else None)
    return plan


def _env_plan() -> tuple[dict[str, tuple[str, int | None]], str | None]:
    raw = os.environ.get(ENV_FAULTS, "")
    if not raw:
        return {}, None
    if raw.startswith("@"):
        path = raw[1:]
        try:
            with open(path, encoding="utf-8") as f:
                return _parse(f.read()), path
        except FileNotFoundError:
            return {}, None
    return _parse(raw), None


def _should_fire(point: str, times: int | None, plan_file: str | None) -> bool:
    if times is None:
        return True
    if plan_file is None:
        with _lock:
            fired = _local_fired.get(point, 0)
            if fired >= times:
                return False
            _local_fired[point] = fired + 1
            return True
    fired_file = plan_file + ".fired"
    # O_APPEND writes of one short line are atomic: every process sees the same count.
    try:
        with open(fired_file, encoding="utf-8") as f:
            fired = sum(1 for line in f if line.strip() == point)
    except FileNotFoundError:
        fired = 0
    if fired >= times:
        return False
    with open(fired_file, "a", encoding="utf-8") as f:
        f.write(point + "\n")
    return True


def fault_point(point: str) -> None:
    """Called after each step; raises (or kills the process group) when the plan says so."""
    if point not in FAULT_POINTS:
        raise ValueError(f"unknown fault point {point!r}")
    if _local_plan is not None:
        plan, plan_file = _local_plan, None
    else:
        plan, plan_file = _env_plan()
    entry = plan.get(point)
    if entry is None:
        return
    action, times = entry
    if not _should_fire(point, times, plan_file):
        return
    if action == "kill":
        _kill_session()
    if action == "connection-loss":
        from kazoo.exceptions import ConnectionLoss

        raise ConnectionLoss(f"injected at {point}")
    from bkspark.errors import BookieIOError

    raise BookieIOError(f"injected at {point}: the delete was refused")


def _kill_session() -> None:
    """SIGKILL every process whose session is ours (from /proc), then ourselves."""
    session = os.getsid(0)
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == session:  # after the command: state, ppid, pgrp, session
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue
    os.kill(me, signal.SIGKILL)


@contextmanager
def injected(plan: str) -> Iterator[None]:
    """Set a fault plan for this process (overrides ``BKSPARK_WRITER_FAULTS``) for the block."""
    global _local_plan
    parsed = _parse(plan)
    with _lock:
        previous = _local_plan
        _local_plan = parsed
        _local_fired.clear()
    try:
        yield
    finally:
        with _lock:
            _local_plan = previous
            _local_fired.clear()
