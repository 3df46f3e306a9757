"""Closing a blocking client from several threads at once, against a real ZooKeeper (docs/client.md, "Closing the
client").  What close() does to the calls other threads are in is tested where those calls can be held:
tests/integration/test_client_slow_bookie.py (a black-holed bookie) and tests/campaign/test_outages.py (a ZooKeeper
outage)."""

from __future__ import annotations

import threading

import pytest

from bkspark.client import BookKeeper
from bkspark.errors import ClientClosedError, IllegalOpError

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
