"""Closing a blocking client from several threads at once, against a real ZooKeeper (docs/client.md, "Closing the
client").  What close() does to the calls other threads are in is tested where those calls can be held:
tests/integration/test_client_slow_bookie.py (a black-holed bookie) and tests/campaign/test_outages.py (a ZooKeeper
outage)."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from kazoo.protocol.states import KazooState

from bkspark.client import BookKeeper
from bkspark.errors import ClientClosedError, IllegalOpError
from bkspark.placement.random_policy import RandomEnsemblePlacementPolicy

pytestmark = pytest.mark.integration


def test_threads_closing_the_client_at_once_all_return_and_leave_it_closed(module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """Three threads call close() together, 20 times over: each returns without an error once the client is
    closed (before, a second closer could meet the loop half closed: AttributeError, in 4 of 30 tries)."""
    for _ in range(20):
        bk = BookKeeper(module_zk_root.metadata_service_uri)
        errors: list[BaseException] = []
        barrier = threading.Barrier(3)

        def close() -> None:
            barrier.wait()
            try:
                bk.close()
            except BaseException as exc:  # noqa: BLE001 - checked below
                errors.append(exc)

        closers = [threading.Thread(target=close) for _ in range(3)]
        for t in closers:
            t.start()
        for t in closers:
            t.join(60)
        assert not any(t.is_alive() for t in closers) and errors == []
        assert bk.loop.is_closed()
        with pytest.raises(ClientClosedError):
            bk.list_ledgers()


def test_the_clients_own_loop_thread_may_not_close_it(module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """A blocking close() from a callback on the client's loop would wait for that loop: it is refused, and the
    client stays usable (await ``bk.aio.close()`` there instead)."""
    with BookKeeper(module_zk_root.metadata_service_uri) as bk:
        outcome: list[BaseException | None] = []

        def on_loop() -> None:
            try:
                bk.close()
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - checked below
                outcome.append(exc)

        bk.loop.call_soon_threadsafe(on_loop)
        assert bk.list_ledgers() == []  # its coroutine runs on the loop after the callback
        assert len(outcome) == 1 and isinstance(outcome[0], IllegalOpError)


class _PolicyFailingToUninitialize(RandomEnsemblePlacementPolicy):
    """A user's placement policy whose clean-up raises."""

    def uninitialize(self) -> None:
        super().uninitialize()
        raise RuntimeError("the policy's own clean-up failed")


def test_a_failing_step_of_close_leaves_no_zookeeper_session_or_thread_behind(module_zk_root, caplog) -> None:  # type: ignore[no-untyped-def]
    """close() runs each of its steps whatever the one before raised: with a placement policy whose
    ``uninitialize`` fails, the ZooKeeper session still ends (the kazoo client is stopped), the client's threads
    end, and the failure is logged, not raised.  Before, the session and its threads outlived the client."""
    before = set(threading.enumerate())
    bk = BookKeeper(module_zk_root.metadata_service_uri, ensemblePlacementPolicy=f"{__name__}:_PolicyFailingToUninitialize")
    assert isinstance(bk.policy, _PolicyFailingToUninitialize)
    bk.list_ledgers()
    zk = bk.zk
    with caplog.at_level(logging.WARNING, logger="bkspark.client.aio"):
        bk.close()
    assert zk.state == KazooState.LOST and not zk.connected  # stopped, not merely left behind
    assert bk.aio.zk_executor._shutdown  # type: ignore[attr-defined]
    assert any("uninitializing the placement policy" in r.getMessage() for r in caplog.records)
    deadline = time.monotonic() + 10
    while (left := [t for t in threading.enumerate() if t not in before and t.is_alive()]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []
    with pytest.raises(ClientClosedError):
        bk.list_ledgers()
