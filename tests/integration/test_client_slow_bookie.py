"""A fault-injecting TCP proxy in front of one real bookie: slow answers, black holes.

The client's resolver is pointed at the proxy for that bookie, so everything
else (ids, metadata, the other bookies) stays real.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from bkspark.client import BookKeeper
from bkspark.protocol.ledger_metadata import LedgerState

pytestmark = [pytest.mark.integration, pytest.mark.compat, pytest.mark.fault]


class FaultProxy:
    """Forwards one TCP port to a bookie; bookie->client bytes can be delayed or dropped."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.delay = 0.0
        self.blackhole = False
        self.loop = asyncio.new_event_loop()
        self.port = 0
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.server = server
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, downstream: bool) -> None:
            try:
                while data := await src.read(65536):
                    if downstream:
                        if self.blackhole:
                            continue
                        if self.delay:
                            await asyncio.sleep(self.delay)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_w, False), pump(up_r, writer, True))

    async def _shutdown(self) -> None:
        self.server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def proxied(java_cluster_factory):  # type: ignore[no-untyped-def]
    cluster = java_cluster_factory("4.17.3", bookies=4)
    proxy = FaultProxy(cluster.addresses[0])
    yield cluster, proxy
    proxy.close()


def _route(bk: BookKeeper, bookie_id: str, proxy: FaultProxy) -> None:
    real = bk.registry.resolve

    def resolve(bid: str) -> tuple[str, int]:
        return ("127.0.0.1", proxy.port) if bid == bookie_id else real(bid)

    bk.registry.resolve = resolve  # type: ignore[method-assign]


def test_speculative_read_beats_a_slow_bookie(proxied) -> None:  # type: ignore[no-untyped-def]
    cluster, proxy = proxied
    slow = cluster.bookie_ids[0]
    with BookKeeper(cluster.metadata_service_uri, speculativeReadTimeout=200, readEntryTimeoutSec=20) as bk:
        _route(bk, slow, proxy)
        lh = bk.create_ledger(3, 3, 2)
        while slow not in lh.metadata.last_ensemble:  # the policy is random: retry until the slow one is in
            lh.close()
            lh = bk.create_ledger(3, 3, 2)
        for i in range(9):
            lh.append(b"s%d" % i)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        bk.conf.reorderReadSequenceEnabled = False
        idx = list(lh.metadata.last_ensemble).index(slow)
        firsts = [e for e in range(9) if e % 3 == idx]  # entries whose first replica is the slow bookie
        proxy.delay = 5.0
        t = time.monotonic()
        for e in firsts:
            assert rh.read(e, e)[0].payload == b"s%d" % e
        assert time.monotonic() - t < 4.0  # each read took ~0.2 s + a fast replica, not 5 s


def test_add_timeout_changes_ensemble(proxied) -> None:  # type: ignore[no-untyped-def]
    cluster, proxy = proxied
    hole = cluster.bookie_ids[0]
    with BookKeeper(cluster.metadata_service_uri, addEntryTimeoutSec=1) as bk:
        _route(bk, hole, proxy)
        lh = bk.create_ledger(3, 3, 3)  # Qa = 3: nothing completes without the black-holed bookie
        while hole not in lh.metadata.last_ensemble:
            lh.close()
            lh = bk.create_ledger(3, 3, 3)
        lh.append(b"before")
        proxy.blackhole = True
        t = time.monotonic()
        assert lh.append(b"during") == 1  # times out on the hole, replaced, re-sent
        assert time.monotonic() - t < 10
        md = bk.get_ledger_metadata(lh.ledger_id)
        assert hole not in md.last_ensemble and sorted(md.ensembles) == [0, 1]
        lh.close()
        assert bk.get_ledger_metadata(lh.ledger_id).state == LedgerState.CLOSED
        rh = bk.open_ledger(lh.ledger_id)
        assert [e.payload for e in rh.read(0, 1)] == [b"before", b"during"]


def test_closing_the_client_fails_pending_appends(proxied) -> None:  # type: ignore[no-untyped-def]
    """Nobody waits forever: appends stuck on a silent bookie fail with ClientClosedError on close."""
    from bkspark.errors import ClientClosedError

    cluster, proxy = proxied
    hole = cluster.bookie_ids[0]
    bk = BookKeeper(cluster.metadata_service_uri, addEntryTimeoutSec=60)
    try:
        _route(bk, hole, proxy)
        lh = bk.create_ledger(3, 3, 3)
        while hole not in lh.metadata.last_ensemble:
            lh.close()
            lh = bk.create_ledger(3, 3, 3)
        lh.append(b"ok")
        proxy.blackhole = True
        futures = [lh.append_async(b"stuck") for _ in range(5)]
        time.sleep(0.5)
        assert not any(f.done() for f in futures)
    finally:
        bk.close()
    for f in futures:
        with pytest.raises(ClientClosedError):
            f.result(timeout=5)
    with pytest.raises(ClientClosedError):
        lh.append_async(b"after")
