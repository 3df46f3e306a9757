"""Child processes for the harness: see :mod:`bkspark.devcluster.process` (shared with ``bkspark cluster``)."""

import os
import time

from bkspark.devcluster.process import LocalClusterError as HarnessError
from bkspark.devcluster.process import ManagedProcess, kill_all, live_processes, tail

__all__ = ["HarnessError", "ManagedProcess", "kill_all", "live_processes", "tail", "wait_group_gone"]


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
