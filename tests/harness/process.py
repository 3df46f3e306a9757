"""Child processes for the harness: see :mod:`bkspark.devcluster.process` (shared with ``bkspark cluster``)."""

import os
import signal
import subprocess
import time
from typing import Any

from bkspark.devcluster.process import LocalClusterError as HarnessError
from bkspark.devcluster.process import ManagedProcess, kill_all, live_processes, tail

__all__ = ["HarnessError", "ManagedProcess", "kill_all", "live_processes", "tail", "wait_group_gone", "kill_group"]


def wait_group_gone(pgid: int, what: str, timeout: float = 30.0) -> None:
    """Wait until no process of group ``pgid`` is left (e.g. a SIGKILLed Spark driver's JVM, planners, workers)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            raise HarnessError(f"processes of {what} (group {pgid}) are still running")
        time.sleep(0.1)


def kill_group(proc: subprocess.Popen[Any], timeout: float = 60.0) -> None:
    """SIGKILL the process group a child started with ``start_new_session=True`` leads (a Spark driver's JVM,
    planners and workers; a Java program) and reap the child.  The group is killed even when the child itself has
    ended: what it started may still run."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # nothing of the group is left
    proc.wait(timeout)
