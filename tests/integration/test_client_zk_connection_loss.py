"""A blip of the client's ZooKeeper connection must not cut its bookie connections.

Found while finding out why ``test_follow_sees_idle_writers_last_entry_via_explicit_lac_and_stops_at_close[4.18.2]``
once waited 2.93 s with a "closed by peer" warning (docs/reliability.md, "The long poll's closed by peer"): kazoo
fires every data watch with ``EventType.NONE`` when its ZooKeeper connection drops (``_reset_watchers`` on
SUSPENDED), even when the session lives on; the bookie registry's watch on each registration takes that for a
changed address and dropped every connection to every bookie it watched. In-flight long polls then failed at once,
reported as "closed by peer" though the client closed them itself, and the tail waited out its long-poll timeout.
Now such an event only forgets the cached address (the watch is gone with the connection); this test failed on
the old code four times out of four.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.protocol.states import KazooState

from bkspark.client import BookKeeper
from bkspark.client.tail import wait_for_lac
from bkspark.devcluster.zookeeper import ZooKeeperServer
from bkspark.shell.admin import init_new_cluster
from tests.harness.deadline import GENEROUS, in_background
from tests.harness.netns import wait_until
from tests.harness.proxy import FaultProxy
from tests.harness.python_bookie import PythonBookieCluster

pytestmark = [pytest.mark.integration, pytest.mark.fault]

ROOT = "/ledgers"


@pytest.fixture
def zk_behind_proxy(tmp_path: Path) -> Iterator[tuple[str, str, FaultProxy]]:
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper")
    zookeeper.start()
    proxy: FaultProxy | None = None
    bookies: PythonBookieCluster | None = None
    try:
        zk = zookeeper.client()
        try:
            init_new_cluster(zk, ROOT)
        finally:
            zk.stop()
            zk.close()
        proxy = FaultProxy(("127.0.0.1", zookeeper.port), name="zookeeper")
        direct = f"zk+hierarchical://{zookeeper.connect_string}{ROOT}"
        bookies = PythonBookieCluster(
            direct, tmp_path / "bookies", bookies=3, journal_sync_data=False, conf_overrides={"zkTimeout": 30000}
        ).start_all()
        yield direct, f"zk+hierarchical://127.0.0.1:{proxy.port}{ROOT}", proxy
    finally:
        if bookies is not None:
            bookies.close()
        if proxy is not None:
            proxy.close()
        zookeeper.stop()


def test_a_zookeeper_connection_blip_leaves_a_waiting_long_poll_alone(zk_behind_proxy) -> None:  # type: ignore[no-untyped-def]
    direct, proxied, proxy = zk_behind_proxy
    with BookKeeper(direct) as writer_bk, BookKeeper(proxied, zkTimeout=30) as reader_bk:
        lh = writer_bk.create_ledger(3, 3, 2)
        lh.append(b"e0")
        lh.append(b"e1")  # carries LAC 0
        rh = reader_bk.open_ledger(lh.ledger_id, recovery=False)
        assert rh.last_add_confirmed == 0
        poll = in_background(lambda: reader_bk.run_coroutine(wait_for_lac(rh.aio.reader, 0, 60_000)))
        pool = reader_bk.aio.pool
        wait_until(  # the poll is in flight on a connection to each bookie (not only their connections open)
            lambda: len(pool._conns) == 3 and all(conn._ops for conn in list(pool._conns.values())),
            GENEROUS,
            "the long poll to be in flight to the three bookies",
        )
        zk = reader_bk.store.zk
        session = zk.client_id
        states: list[KazooState] = []
        zk.add_listener(states.append)
        assert proxy.reset() >= 1  # the reader's ZooKeeper connection only; the bookies are untouched
        wait_until(  # kazoo saw the connection drop (SUSPENDED), then reconnected
            lambda: KazooState.SUSPENDED in states and zk.connected, GENEROUS, "the reader's ZooKeeper connection to drop and come back"
        )
        assert zk.client_id == session  # the same session: nothing about any bookie changed
        lh.append(b"e2")  # moves the bookies' LAC to 1: the waiting poll answers with it
        update = poll.join(GENEROUS)
        assert update.lac >= 1
        lh.close()
