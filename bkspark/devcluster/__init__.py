"""Local servers on 127.0.0.1: ZooKeeper, Python bookies, whole dev clusters (``bkspark cluster``, ``make demo``).

The test harness (``tests/harness``) builds on the same launchers.
"""

from bkspark.devcluster.local import LocalCluster, stop_cluster

__all__ = ["LocalCluster", "stop_cluster"]
