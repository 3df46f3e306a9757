"""Child processes for the harness: see :mod:`bkspark.devcluster.process` (shared with ``bkspark cluster``)."""

from bkspark.devcluster.process import LocalClusterError as HarnessError
from bkspark.devcluster.process import ManagedProcess, kill_all, live_processes, tail

__all__ = ["HarnessError", "ManagedProcess", "kill_all", "live_processes", "tail"]
