"""Slow answers and black holes from one real bookie, through the harness's fault proxy (tests/harness/proxy.py).

Every bookie sits behind a proxy and registers the proxy's address as its BookieId; the clients run with
``bookieAddressResolverEnabled=false``, so they dial the proxies with nothing patched (docs/reliability.md).
"""

from __future__ import annotations

import threading
import time

import pytest

from bkspark.client import BookKeeper
from bkspark.protocol.ledger_metadata import LedgerState
from tests.harness.deadline import GENEROUS, finishes_within
from tests.harness.proxy import Direction, FaultProxy, proxied_bookie_id

pytestmark = [pytest.mark.integration, pytest.mark.compat, pytest.mark.fault]


@pytest.fixture
def proxied(java_cluster_factory):  # type: ignore[no-untyped-def]
    """Four Java bookies, each behind its own fault proxy (the bookie registers the proxy's address as its
    BookieId; clients run with bookieAddressResolverEnabled=false and so dial the proxy)."""
    proxies = [FaultProxy(name=f"bookie{i}") for i in range(4)]
    try:
        cluster = java_cluster_factory(
            "4.17.3", bookies=4, bookie_ids=[proxied_bookie_id(p) for p in proxies], start=False
        )
        for proxy, address in zip(proxies, cluster.addresses):
            proxy.target = address
        cluster.start_all()
        yield cluster, proxies[0]
    finally:
        for proxy in proxies:
            proxy.close()


def test_speculative_read_beats_a_slow_bookie(proxied) -> None:  # type: ignore[no-untyped-def]
    cluster, proxy = proxied
    slow = cluster.bookie_ids[0]
    with BookKeeper(
        cluster.metadata_service_uri, speculativeReadTimeout=200, readEntryTimeoutSec=600, bookieAddressResolverEnabled=False
    ) as bk:
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
        proxy.delay(600.0, Direction.DOWN)
        # Each read is answered by a fast replica after the 200 ms speculative timeout; waiting for the slow bookie
        # (600 s) or for the read timeout (600 s) would miss the deadline by far.
        payloads = finishes_within(GENEROUS, lambda: [rh.read(e, e)[0].payload for e in firsts])
        assert payloads == [b"s%d" % e for e in firsts]
        proxy.drop()  # the held answers go with their connections


def test_add_timeout_changes_ensemble(proxied) -> None:  # type: ignore[no-untyped-def]
    cluster, proxy = proxied
    hole = cluster.bookie_ids[0]
    with BookKeeper(cluster.metadata_service_uri, addEntryTimeoutSec=1, bookieAddressResolverEnabled=False) as bk:
        lh = bk.create_ledger(3, 3, 3)  # Qa = 3: nothing completes without the black-holed bookie
        while hole not in lh.metadata.last_ensemble:
            lh.close()
            lh = bk.create_ledger(3, 3, 3)
        lh.append(b"before")
        proxy.blackhole(Direction.DOWN)
        assert finishes_within(GENEROUS, lambda: lh.append(b"during")) == 1  # times out on the hole, replaced, re-sent
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
    bk = BookKeeper(cluster.metadata_service_uri, addEntryTimeoutSec=60, bookieAddressResolverEnabled=False)
    try:
        lh = bk.create_ledger(3, 3, 3)
        while hole not in lh.metadata.last_ensemble:
            lh.close()
            lh = bk.create_ledger(3, 3, 3)
        lh.append(b"ok")
        proxy.blackhole(Direction.DOWN)
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


def test_closing_the_client_ends_appenders_waiting_for_room_and_queued_appends(proxied) -> None:  # type: ignore[no-untyped-def]
    """Nobody waits forever, whatever the call was doing when another thread closed the client: bulk and single
    appenders blocked on ``maxPendingAdds``, appends queued for the loop, and a blocking ``flush``, all end with
    ClientClosedError; what was acknowledged before stays readable after a recovery."""
    from bkspark.errors import ClientClosedError

    cluster, proxy = proxied
    hole = cluster.bookie_ids[0]
    bk = BookKeeper(cluster.metadata_service_uri, addEntryTimeoutSec=60, maxPendingAdds=20,
                    bookieAddressResolverEnabled=False)
    lh = bk.create_ledger(3, 3, 3)
    while hole not in lh.metadata.last_ensemble:
        lh.close()
        lh = bk.create_ledger(3, 3, 3)
    acknowledged = lh.append_many([b"ok-%d" % i for i in range(30)]).result(30)
    proxy.blackhole(Direction.DOWN)  # nothing more is acknowledged: the 20 slots fill and stay full
    errors: dict[str, BaseException] = {}
    futures: list = []

    def bulk() -> None:
        while True:
            futures.append(lh.append_many([b"bulk"] * 15))

    def single() -> None:
        while True:
            futures.append(lh.append_async(b"single"))

    def flush() -> None:
        time.sleep(0.3)
        lh.flush()

    def guarded(name, fn):  # type: ignore[no-untyped-def]
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - checked below
                errors[name] = exc
        return threading.Thread(target=run, name=name, daemon=True)

    threads = [guarded(name, fn) for name, fn in [("bulk", bulk), ("single", single), ("flush", flush)]]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while lh._waiting < 2 and time.monotonic() < deadline:  # both appenders blocked on the full window
        time.sleep(0.05)
    assert lh._waiting == 2 and lh._in_flight == 20
    bk.close()
    for t in threads:
        t.join(10)
    assert not [t.name for t in threads if t.is_alive()]
    assert {name: type(exc) for name, exc in errors.items()} == dict.fromkeys(["bulk", "single", "flush"],
                                                                              ClientClosedError)
    for f in futures:
        with pytest.raises(ClientClosedError):
            f.result(timeout=5)
    assert lh._in_flight == 0 and lh._in_flight_bytes == 0
    proxy.restore()
    with BookKeeper(cluster.metadata_service_uri, bookieAddressResolverEnabled=False) as reader:
        rh = reader.open_ledger(lh.ledger_id)  # recovers the ledger the closed client left open
        assert rh.last_add_confirmed >= acknowledged[-1]
        assert [e.payload for e in rh.read(0, acknowledged[-1])] == [b"ok-%d" % i for i in range(30)]


def test_acknowledgements_cut_across_reads_reach_a_bulk_append(proxied) -> None:  # type: ignore[no-untyped-def]
    """A bookie's answers arrive as the network cuts them: the proxy forwards 100 bytes at a time, so most
    28-byte acknowledgements of a bulk append (and single reads' answers) are split across two reads of the
    socket.  Every add is acknowledged on the connection it went out on: no ensemble change, nothing failed."""
    cluster, proxy = proxied
    cut = cluster.bookie_ids[0]
    with BookKeeper(cluster.metadata_service_uri, bookieAddressResolverEnabled=False) as bk:
        lh = bk.create_ledger(3, 3, 3)  # Qa = 3: every add waits for the cut bookie's acknowledgement
        while cut not in lh.metadata.last_ensemble:
            lh.close()
            lh = bk.create_ledger(3, 3, 3)
        lh.append(b"connected")
        proxy.rate(2000, Direction.DOWN)  # pieces of 100 bytes
        payloads = [b"cut-%03d" % i for i in range(60)]
        assert lh.append_many(payloads).result(60) == range(1, 61)
        assert sorted(bk.get_ledger_metadata(lh.ledger_id).ensembles) == [0]
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        assert [e.payload for e in rh.read(0, 60)] == [b"connected", *payloads]
        assert sorted(bk.get_ledger_metadata(lh.ledger_id).ensembles) == [0]
