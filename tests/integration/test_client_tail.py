"""Tailing reads (long-poll LAC) against Python bookies and Apache BookKeeper 4.17 / 4.18 bookies.

Checks over the whole history: a follower of an open ledger gets every entry exactly once in entry
order, sees an idle writer's last entry through its explicit LAC, wakes on a new entry well before
the long-poll timeout, and stops after the writer's close.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Iterator

import pytest

from bkspark.client import BookKeeper
from bkspark.client import tail as tail_module
from bkspark.client.tail import LedgerTail, follow_ledger, follow_ledger_async, wait_for_lac
from tests.harness.deadline import GENEROUS, finishes_within, in_background
from tests.harness.python_bookie import PythonBookieCluster

LONG_POLL_MS = 20_000


@pytest.fixture(params=["python", pytest.param("4.17.3", marks=pytest.mark.compat), pytest.param("4.18.2", marks=pytest.mark.compat)])
def uri(request: pytest.FixtureRequest, zk_root: Any, tmp_path: Any) -> Iterator[str]:
    if request.param == "python":
        with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=3, journal_sync_data=False) as c:
            c.start_all()
            yield zk_root.metadata_service_uri
    else:
        factory = request.getfixturevalue("java_cluster_factory")
        yield factory(request.param, bookies=3).metadata_service_uri


pytestmark = pytest.mark.integration


def test_long_poll_wakes_on_new_entry_and_piggybacks_it(uri: str) -> None:
    with BookKeeper(uri, useV2WireProtocol=False) as writer_bk, BookKeeper(uri) as reader_bk:
        lh = writer_bk.create_ledger(3, 3, 2)
        lh.append(b"e0")
        lh.append(b"e1")  # carries LAC 0
        rh = reader_bk.open_ledger(lh.ledger_id, recovery=False)
        assert rh.last_add_confirmed == 0
        tail = LedgerTail(reader_bk, rh, 1)

        # Nothing new: the poll is held by the bookies (not answered at once), then returns unchanged.
        started = time.monotonic()
        assert reader_bk.run_coroutine(wait_for_lac(rh.aio.reader, 1, 700)).lac == 1
        assert time.monotonic() - started >= 0.5

        # A new add moves the bookies' LAC to 1: a waiting poll returns at once with entry 1 piggybacked.
        waiter = in_background(lambda: reader_bk.run_coroutine(tail.wait(LONG_POLL_MS)))
        time.sleep(0.3)
        lh.append(b"e2")  # carries LAC 1
        update = waiter.join(GENEROUS)
        # Woken by the add: a poll that ran out its timeout would return the old LAC (0) and no entry.
        assert update.lac >= 1
        assert update.entry is not None and (update.entry.entry_id, update.entry.payload) == (1, b"e1")
        lh.close()


def test_follow_sees_idle_writers_last_entry_via_explicit_lac_and_stops_at_close(uri: str) -> None:
    with BookKeeper(uri, explicitLacInterval=200) as writer_bk, BookKeeper(uri) as reader_bk:
        lh = writer_bk.create_ledger(3, 3, 2)
        seen: list[tuple[int, bytes]] = []
        arrived = threading.Event()

        def follow() -> None:
            for entry in follow_ledger(reader_bk, lh.ledger_id, long_poll_timeout_ms=3000):
                seen.append((entry.entry_id, entry.payload))
                if entry.entry_id == 49:
                    arrived.set()

        follower = threading.Thread(target=follow)
        follower.start()
        for i in range(50):
            lh.append(b"p%d" % i)
        # The writer is now idle: entry 49 is only confirmed to bookies by the explicit LAC (every 200 ms); without
        # it the follower would not see entry 49 before the next add or the close, which come only after this.
        assert arrived.wait(GENEROUS), f"last entry not seen; got {len(seen)}"
        for i in range(50, 60):
            lh.append_async(b"p%d" % i)
        lh.close()
        follower.join(60)
        assert not follower.is_alive()
        assert seen == [(i, b"p%d" % i) for i in range(60)]


def test_follow_async_from_another_loop_until_close(uri: str) -> None:
    with BookKeeper(uri) as writer_bk, BookKeeper(uri) as reader_bk:
        lh = writer_bk.create_ledger(3, 2, 2)
        for i in range(5):
            lh.append(b"a%d" % i)

        async def collect() -> list[int]:
            ids = []
            async for entry in follow_ledger_async(reader_bk, lh.ledger_id, start_entry=2, long_poll_timeout_ms=500):
                ids.append(entry.entry_id)
                if entry.entry_id == 3:
                    threading.Thread(target=lambda: (lh.append(b"a5"), lh.close())).start()
            return ids

        assert asyncio.run(asyncio.wait_for(collect(), 60)) == [2, 3, 4, 5]


def test_without_explicit_lac_an_idle_writers_last_entry_waits_for_the_close_seen_within_one_long_poll(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/streaming.md, "Tailing reads": without explicitLacInterval the last entry of an idle writer is only
    visible after the next add or the close, and a close is seen within one long-poll timeout."""
    long_poll_ms = 1500
    polls: list[int] = []
    real_wait_for_lac = tail_module.wait_for_lac

    async def counted_wait_for_lac(reader: Any, previous_lac: int, timeout_ms: int) -> Any:
        polls.append(previous_lac)
        return await real_wait_for_lac(reader, previous_lac, timeout_ms)

    monkeypatch.setattr(tail_module, "wait_for_lac", counted_wait_for_lac)
    with BookKeeper(uri) as writer_bk, BookKeeper(uri) as reader_bk:
        lh = writer_bk.create_ledger(3, 3, 2)
        for i in range(5):
            lh.append(b"i%d" % i)
        seen: list[int] = []
        done = threading.Event()

        def follow() -> None:
            for entry in follow_ledger(reader_bk, lh.ledger_id, long_poll_timeout_ms=long_poll_ms):
                seen.append(entry.entry_id)
            done.set()

        follower = threading.Thread(target=follow)
        follower.start()
        deadline = time.monotonic() + GENEROUS
        while seen != [0, 1, 2, 3] and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(2 * long_poll_ms / 1000)  # two long polls: entry 4 is not confirmed to anyone yet
        assert seen == [0, 1, 2, 3]
        polls_before_close = len(polls)
        lh.close()
        assert done.wait(GENEROUS)
        # Seen within one long poll: the poll under way at the close (or one that began while the close was being
        # written) times out, the metadata read after it shows the close; no further poll is needed.
        assert len(polls) - polls_before_close <= 1, polls
        follower.join(10)
        assert seen == [0, 1, 2, 3, 4]


def test_a_long_poll_on_a_ledger_no_bookie_holds_yet_backs_off_100_ms(uri: str) -> None:
    """docs/streaming.md, "Tailing reads": when no entry reached the bookies there is nothing to wait on, and
    the read backs off 100 ms (not the whole timeout, and not a busy loop)."""
    with BookKeeper(uri) as writer_bk, BookKeeper(uri) as reader_bk:
        lh = writer_bk.create_ledger(3, 3, 2)
        rh = reader_bk.open_ledger(lh.ledger_id, recovery=False)
        started = time.monotonic()
        # A generous deadline, far below the 600 s timeout a read that waited it out would take.
        assert finishes_within(GENEROUS, lambda: reader_bk.run_coroutine(wait_for_lac(rh.aio.reader, -1, 600_000))).lac == -1
        assert time.monotonic() - started >= 0.09
        lh.close()


def test_a_follower_goes_on_after_an_ensemble_change_replaced_every_bookie_it_polled(zk_root: Any, tmp_path: Any) -> None:
    """docs/streaming.md, "Following a ledger": the metadata is read again, which picks up ensemble changes, also
    when the change replaced every bookie of the ensemble the follower knew (its long polls then all fail)."""
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=4, journal_sync_data=False) as cluster:
        cluster.start_all()
        uri = zk_root.metadata_service_uri
        with BookKeeper(uri, explicitLacInterval=100) as writer_bk, BookKeeper(uri) as reader_bk:
            lh = writer_bk.create_ledger(2, 2, 2)
            for i in range(5):
                lh.append(b"s%d" % i)
            seen: list[int] = []
            failure: list[BaseException] = []

            def follow() -> None:
                try:
                    for entry in follow_ledger(reader_bk, lh.ledger_id, long_poll_timeout_ms=1000):
                        seen.append(entry.entry_id)
                except BaseException as exc:  # noqa: BLE001 - reported by the test
                    failure.append(exc)

            follower = threading.Thread(target=follow, daemon=True)
            follower.start()
            deadline = time.monotonic() + 20
            while seen != list(range(5)) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert seen == list(range(5))  # entry 4 through the explicit LAC: nothing is left in the old ensemble
            old = set(lh.metadata.last_ensemble)
            for i, bookie_id in enumerate(cluster.bookie_ids):
                if bookie_id in old:
                    cluster.stop(i)
            for i in range(5, 10):
                lh.append(b"s%d" % i)
            assert not old & set(lh.metadata.last_ensemble)  # both bookies replaced
            lh.close()
            follower.join(30)
            assert not follower.is_alive() and not failure, failure
            assert seen == list(range(10))


def test_the_blocking_clients_tail_api_follows_many_ledgers(zk_root: Any, tmp_path: Any) -> None:
    """docs/contracts.md, "Tails": open_tail, refresh_tails, wait_for_tails (woken by a new entry or by ``wake``
    from another thread) and run_coroutine(tail.next_batch) -- what the stream reader uses, on real bookies."""
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=3, journal_sync_data=False) as cluster:
        cluster.start_all()
        uri = zk_root.metadata_service_uri
        with BookKeeper(uri, useV2WireProtocol=False) as writer_bk, BookKeeper(uri) as reader_bk:
            a, b = writer_bk.create_ledger(3, 3, 2), writer_bk.create_ledger(3, 3, 2)
            a.append(b"a0")
            a.append(b"a1")  # carries LAC 0
            tails = [reader_bk.open_tail(a.ledger_id), reader_bk.open_tail(b.ledger_id)]
            assert [t.lac for t in tails] == [0, -1]

            # A refresh of both at once: one result per tail, a's entry size learned from its last entry.
            a.write_lac()  # the bookies' LAC of a is now 1
            results = reader_bk.refresh_tails(tails)
            assert len(results) == 2 and not any(isinstance(r, BaseException) for r in results)
            assert tails[0].lac == 1 and tails[0].last_entry_size == 2

            # A wait ends when one tail's LAC moves (b's first entry, confirmed by an explicit LAC write).
            def add_to_b() -> None:
                b.append(b"b0")
                b.write_lac()

            writer = threading.Thread(target=add_to_b)
            writer.start()
            reader_bk.wait_for_tails(tails, LONG_POLL_MS * 10)
            writer.join(60)
            deadline = time.monotonic() + 60
            while tails[1].lac < 0 and time.monotonic() < deadline:  # the wait may have ended on a's poll first
                reader_bk.wait_for_tails(tails, LONG_POLL_MS)
            assert tails[1].lac == 0

            # ``wake`` set from another thread (as a ZooKeeper watch does) ends a wait nothing else would end.
            wake = asyncio.Event()
            waker = threading.Timer(0.2, lambda: reader_bk.loop.call_soon_threadsafe(wake.set))
            waker.start()
            reader_bk.wait_for_tails(tails, LONG_POLL_MS * 10, wake=wake)
            waker.join(60)
            assert not wake.is_set()  # cleared on return

            # The entries themselves, through run_coroutine on the client's loop.
            assert [e.payload for e in reader_bk.run_coroutine(tails[0].next_batch(0))] == [b"a0", b"a1"]
            assert [e.payload for e in reader_bk.run_coroutine(tails[1].next_batch(0))] == [b"b0"]
            a.close()
            b.close()
            reader_bk.refresh_tails(tails)
            assert all(t.closed for t in tails)
            assert reader_bk.run_coroutine(tails[0].next_batch(0)) is None  # closed and every entry handed out
