"""ZooKeeper for the harness: see :mod:`bkspark.devcluster.zookeeper` (shared with ``bkspark cluster``)."""

from bkspark.devcluster.zookeeper import (
    HIERARCHICAL_LAYOUT,
    ZkRoot,
    ZooKeeperServer,
    four_letter_word,
    init_new_cluster,
    zookeeper_classpath,
)

__all__ = [
    "HIERARCHICAL_LAYOUT",
    "ZkRoot",
    "ZooKeeperServer",
    "four_letter_word",
    "init_new_cluster",
    "zookeeper_classpath",
]
