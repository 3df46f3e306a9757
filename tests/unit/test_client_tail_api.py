"""The tail API the stream reader uses (bkspark/client/tail.py: refresh_tails, wait_for_any_tail), on fake tails.

The blocking client's ``refresh_tails`` / ``wait_for_tails`` run these on its loop; tests/integration/test_client_tail.py
and test_connector_streaming.py drive them against real bookies.
"""

from __future__ import annotations

import asyncio
import threading

from bkspark.client.tail import LacUpdate, refresh_tails, wait_for_any_tail
from bkspark.errors import BookieUnavailableError, NoSuchLedgerMetadataError


class FakeTail:
    """What refresh_tails / wait_for_any_tail use of a LedgerTail."""

    def __init__(self, ledger_id: int, *, error: BaseException | None = None, sized: bool = False,
                 moves: asyncio.Event | None = None) -> None:
        self.ledger_id = ledger_id
        self.error = error
        self.last_entry_size: int | None = 10 if sized else None
        self.moves = moves
        self.waits: list[int] = []
        self.sized_by_read = False
        self.cancelled = False

    async def wait(self, timeout_ms: int) -> LacUpdate:
        self.waits.append(timeout_ms)
        if self.error is not None:
            raise self.error
        if self.moves is not None:
            try:
                await self.moves.wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        return LacUpdate(self.ledger_id)

    async def learn_entry_size(self) -> None:
        self.sized_by_read = True
        self.last_entry_size = 7


def test_refresh_gives_one_result_per_tail_and_sizes_only_the_unsized_good_ones() -> None:
    gone = NoSuchLedgerMetadataError("deleted")
    tails = [FakeTail(1), FakeTail(2, error=gone), FakeTail(3, sized=True), FakeTail(4, error=BookieUnavailableError())]
    results = asyncio.run(refresh_tails(tails))  # type: ignore[arg-type]
    assert results[0] == LacUpdate(1) and results[1] is gone and results[2] == LacUpdate(3)
    assert isinstance(results[3], BookieUnavailableError)
    assert [t.waits for t in tails] == [[0], [0], [0], [0]]  # a zero-timeout poll each
    assert [t.sized_by_read for t in tails] == [True, False, False, False]


def test_a_wake_already_set_returns_at_once_without_polling_and_is_cleared() -> None:
    async def go() -> tuple[FakeTail, asyncio.Event]:
        wake = asyncio.Event()
        wake.set()
        tail = FakeTail(1, moves=asyncio.Event())
        await wait_for_any_tail([tail], 60_000, wake)  # type: ignore[list-item]
        return tail, wake

    tail, wake = asyncio.run(go())
    assert tail.waits == [] and not wake.is_set()


def test_a_wake_set_from_another_thread_ends_the_wait_and_cancels_the_polls() -> None:
    async def go() -> tuple[FakeTail, asyncio.Event]:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        tail = FakeTail(1, moves=asyncio.Event())  # its LAC never moves
        started = threading.Event()

        def watcher() -> None:  # as a ZooKeeper watch does, on kazoo's thread
            started.wait(60)
            loop.call_soon_threadsafe(wake.set)

        thread = threading.Thread(target=watcher)
        thread.start()
        loop.call_soon(started.set)
        await wait_for_any_tail([tail], 600_000, wake)  # type: ignore[list-item]
        await asyncio.sleep(0)  # let the cancelled poll see its cancellation
        thread.join(60)
        return tail, wake

    tail, wake = asyncio.run(go())
    assert tail.waits == [600_000] and tail.cancelled and not wake.is_set()


def test_the_first_tail_to_move_ends_the_wait() -> None:
    async def go() -> list[FakeTail]:
        moved = asyncio.Event()
        tails = [FakeTail(1, moves=asyncio.Event()), FakeTail(2, moves=moved)]
        asyncio.get_running_loop().call_soon(moved.set)
        await wait_for_any_tail(tails, 600_000)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        return tails

    tails = asyncio.run(go())
    assert tails[0].cancelled and not tails[1].cancelled


def test_a_failed_poll_ends_the_wait_without_raising() -> None:
    """The caller looks at the tails' positions next (refresh_tails reports each tail's error)."""
    async def go() -> list[FakeTail]:
        tails = [FakeTail(1, moves=asyncio.Event()), FakeTail(2, error=BookieUnavailableError())]
        await wait_for_any_tail(tails, 600_000)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        return tails

    tails = asyncio.run(go())
    assert tails[0].cancelled and tails[1].waits == [600_000]


def test_no_tails_and_no_wake_waits_out_the_timeout() -> None:
    asyncio.run(wait_for_any_tail([], 1))
