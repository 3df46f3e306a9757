"""ZooKeeper for the harness: see :mod:`bkspark.devcluster.zookeeper` (shared with ``bkspark cluster``), and
:func:`expire_session`, a fault only tests make."""

from kazoo.client import KazooClient

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
    "expire_session",
    "four_letter_word",
    "init_new_cluster",
    "zookeeper_classpath",
]


def expire_session(connect_string: str, client_id: tuple[int, bytes]) -> None:
    """Expire a client's ZooKeeper session (connect with its id and password, then close: the server ends it),
    as kazoo's own tests do.  The client hears SESSION_EXPIRED (kazoo: LOST) and its ephemeral znodes are gone."""
    thief = KazooClient(hosts=connect_string, client_id=client_id, timeout=10.0)
    thief.start(timeout=15)
    thief.stop()
    thief.close()
