"""The blocking handle's room for appends in flight: ``maxPendingAdds`` entries and ``maxPendingAddBytes`` bytes
(docs/client.md, "How many adds in flight").

A fake writer stands in for ``LedgerWriter``: it keeps every callback it is handed, and the test completes them,
so each test decides exactly when room comes back.  A one-thread executor plays the client's loop thread: the
handle's inbox is drained there and the fake writer is touched only there, as the real one is.  ``tests/integration/test_client_bulk_append.py`` runs the
same bounds against real bookies.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from array import array
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from bkspark.client.bookkeeper import LedgerHandle
from bkspark.client.conf import ClientConf
from bkspark.client.payloads import PackedPayloads
from bkspark.errors import BookieTimeoutError, ClientClosedError, InvalidOptionError


class FakeWriter:
    """Records what the handle hands over; ``complete_*`` play the loop thread's acknowledgements."""

    max_payload = 1 << 20

    def __init__(self) -> None:
        self.singles: list[tuple[bytes, Callable[..., None]]] = []
        self.batches: list[tuple[Any, Callable[..., None]]] = []
        self.next_id = 0

    def check_payload_size(self, size: int) -> None:
        pass

    def check_payload_sizes(self, payloads: Any) -> None:
        pass

    def append(self, payload: bytes, callback: Callable[..., None]) -> None:
        self.singles.append((payload, callback))

    def append_each(self, payloads: list[bytes], callbacks: list[Callable[..., None]]) -> None:
        self.singles.extend(zip(payloads, callbacks))

    def append_many(self, payloads: Any, callback: Callable[..., None]) -> None:
        self.batches.append((payloads, callback))

    def complete_batch(self, exc: BaseException | None = None) -> None:
        payloads, callback = self.batches.pop(0)
        callback(None if exc else self.next_id, len(payloads), exc)
        self.next_id += len(payloads)

    def complete_single(self, exc: BaseException | None = None) -> None:
        _payload, callback = self.singles.pop(0)
        callback(None if exc else self.next_id, exc)
        self.next_id += 1


class Loop:
    """The client's loop thread, played by a one-thread executor."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="fake-loop")

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.executor.submit(fn)

    def run(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the loop after everything queued there; wait for it."""
        return self.executor.submit(fn).result(10)


@pytest.fixture
def loop():  # type: ignore[no-untyped-def]
    lp = Loop()
    yield lp
    lp.executor.shutdown(wait=True)


def handle(loop: Loop, **conf: Any) -> tuple[LedgerHandle, FakeWriter]:
    """A blocking handle over a fake writer, its inbox drained on ``loop``."""
    writer = FakeWriter()
    bk = SimpleNamespace(conf=ClientConf.from_mapping(conf), _closed=False, _call_soon=loop.call_soon)
    return LedgerHandle(bk, SimpleNamespace(ref=None, writer=writer)), writer  # type: ignore[arg-type]


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``fn`` in a thread; its result lands in the returned list."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def blocked(t: threading.Thread) -> bool:
    """Whether ``t`` is still waiting after a moment (it would have finished at once if it had room)."""
    t.join(0.3)
    return t.is_alive()


def test_the_defaults_are_5000_entries_and_32_mib() -> None:
    conf = ClientConf()
    assert (conf.maxPendingAdds, conf.maxPendingAddBytes) == (5000, 32 * 1024 * 1024)
    assert ClientConf.from_mapping({"maxpendingaddbytes": "0"}).maxPendingAddBytes == 0  # Spark lower-cases keys
    with pytest.raises(InvalidOptionError):
        ClientConf.from_mapping({"maxPendingAddBytes": "-1"})


def test_a_bulk_append_waits_while_its_bytes_would_pass_the_byte_bound(loop: Loop) -> None:
    lh, writer = handle(loop, maxPendingAdds=1000, maxPendingAddBytes=1000)
    first = lh.append_many([b"a" * 150] * 5)  # 750 bytes: room
    t, out = in_thread(lambda: lh.append_many([b"b" * 150] * 2))  # 1,050 bytes with the first: waits
    assert blocked(t) and loop.run(lambda: len(writer.batches)) == 1
    loop.run(writer.complete_batch)
    t.join(5)
    assert not t.is_alive() and first.result(0) == range(0, 5)
    assert loop.run(lambda: len(writer.batches)) == 1
    loop.run(writer.complete_batch)
    assert out[0].result(5) == range(5, 7)
    assert (lh._in_flight, lh._in_flight_bytes) == (0, 0)


def test_packed_payloads_count_their_bytes_and_singles_theirs(loop: Loop) -> None:
    lh, writer = handle(loop, maxPendingAdds=1000, maxPendingAddBytes=100)
    lh.append_many(PackedPayloads(b"x" * 90, array("q", [0, 30, 60, 90])))
    assert lh._in_flight_bytes == 90
    lh.append_async(b"y" * 10)  # 100 bytes in flight: still within the bound
    t, _ = in_thread(lambda: lh.append_async(b"z"))  # 101: waits
    assert blocked(t)
    loop.run(writer.complete_single)  # the 10 bytes come back: 91 fit
    t.join(5)
    assert not t.is_alive() and (lh._in_flight, lh._in_flight_bytes) == (4, 91)


def test_an_append_larger_than_a_bound_goes_alone(loop: Loop) -> None:
    lh, writer = handle(loop, maxPendingAdds=4, maxPendingAddBytes=100)
    big = lh.append_async(b"x" * 500)  # nothing in flight: it goes, though larger than the byte bound
    t, out = in_thread(lambda: lh.append_many([b"y"] * 10))  # more entries than maxPendingAdds: waits for nothing
    assert blocked(t)
    loop.run(writer.complete_single)
    t.join(5)
    assert not t.is_alive() and big.result(0) == 0
    loop.run(writer.complete_batch)
    assert out[0].result(5) == range(1, 11)


def test_the_entry_bound_still_holds_and_zero_bytes_means_no_byte_bound(loop: Loop) -> None:
    lh, writer = handle(loop, maxPendingAdds=3, maxPendingAddBytes=0)
    for _ in range(3):
        lh.append_async(b"x" * 10_000_000)  # 30 MB in flight: no byte bound
    t, _ = in_thread(lambda: lh.append_async(b"y"))
    assert blocked(t)
    loop.run(writer.complete_single)
    t.join(5)
    assert not t.is_alive() and lh._in_flight == 3


def test_failed_appends_give_their_room_back(loop: Loop) -> None:
    lh, writer = handle(loop, maxPendingAdds=100, maxPendingAddBytes=200)
    failing = lh.append_many([b"a" * 100] * 2)
    t, _ = in_thread(lambda: lh.append_many([b"b" * 100]))
    assert blocked(t)
    loop.run(lambda: writer.complete_batch(BookieTimeoutError("add timed out")))
    t.join(5)
    assert not t.is_alive()
    with pytest.raises(BookieTimeoutError):
        failing.result(0)
    assert (lh._in_flight, lh._in_flight_bytes) == (1, 100)


def test_many_threads_appending_never_pass_the_bounds(loop: Loop) -> None:
    """Four appenders and an acknowledger: the bounds hold at every moment and every append completes."""
    lh, writer = handle(loop, maxPendingAdds=50, maxPendingAddBytes=2000)
    seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def acknowledge_one() -> None:  # on the loop
        with lh._inbox_lock:
            seen.append((lh._in_flight, lh._in_flight_bytes))
        if writer.batches:
            writer.complete_batch()
        elif writer.singles:
            writer.complete_single()

    def acknowledge() -> None:
        while not stop.is_set() or loop.run(lambda: bool(writer.batches or writer.singles)):
            loop.run(acknowledge_one)
            time.sleep(0.0005)

    def append(k: int) -> list[Any]:
        futures = []
        for i in range(40):
            if i % 3:
                futures.append(lh.append_many([bytes([k]) * (10 + i)] * (1 + i % 7)))
            else:
                futures.append(lh.append_async(bytes([k]) * (20 + i)))
        return futures

    acker = threading.Thread(target=acknowledge, daemon=True)
    acker.start()
    results: list[list[Any]] = []
    appenders = [threading.Thread(target=lambda k=k: results.append(append(k)), daemon=True) for k in range(4)]
    for t in appenders:
        t.start()
    for t in appenders:
        t.join(30)
    stop.set()
    acker.join(30)
    assert all(not t.is_alive() for t in appenders) and not acker.is_alive()
    assert sum(len(futures) for futures in results) == 160
    for futures in results:
        for f in futures:
            f.result(0)
    assert max(n for n, _ in seen) <= 50 and max(b for _, b in seen) <= 2000
    assert (lh._in_flight, lh._in_flight_bytes) == (0, 0)



def test_closing_fails_queued_appends_and_ends_every_wait_for_room(loop: Loop) -> None:
    """What ``BookKeeper.close()`` does once its loop has stopped (docs/client.md, "Closing the client"): appends
    still in the inbox, which no loop will hand over, fail with ClientClosedError and give their room back, and
    every appender waiting for room raises ClientClosedError instead of waiting for acknowledgements that will
    never come."""
    lh, writer = handle(loop, maxPendingAdds=10)
    busy = threading.Event()
    loop.call_soon(busy.wait)  # the loop thread is held: what is appended now stays in the inbox
    queued = [lh.append_many([b"q"] * 6), lh.append_async(b"single")]
    raised: list[BaseException] = []

    def wait_for_room(append: Callable[[], Any]) -> threading.Thread:
        def run() -> None:
            try:
                append()
            except BaseException as exc:  # noqa: BLE001 - checked below
                raised.append(exc)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    waiters = [wait_for_room(lambda: lh.append_many([b"w"] * 5)), wait_for_room(lambda: lh.append_many([b"v"] * 4))]
    assert all(blocked(t) for t in waiters) and lh._waiting == 2
    lh._bk._closed = True  # close() flips this first, then stops the loop, then:
    lh._fail_queued(ClientClosedError("client is closed"))
    for t in waiters:
        t.join(5)
    assert not any(t.is_alive() for t in waiters)
    assert [type(exc) for exc in raised] == [ClientClosedError, ClientClosedError]
    for f in queued:
        with pytest.raises(ClientClosedError):
            f.result(0)
    assert (lh._in_flight, lh._in_flight_bytes, lh._inbox) == (0, 0, [])
    with pytest.raises(ClientClosedError):
        lh.append_async(b"after")
    busy.set()
    loop.run(lambda: None)
    assert not writer.batches and not writer.singles  # the drain the held loop ran found nothing to hand over


def test_an_append_future_answers_as_a_concurrent_futures_future_does(loop: Loop) -> None:
    """docs/client.md: ``AppendFuture`` has the Future API with the standard meaning, but is no Future instance."""
    lh, writer = handle(loop)
    pending = lh.append_async(b"a")
    reference: concurrent.futures.Future[int] = concurrent.futures.Future()
    for fut in (pending, reference):
        assert (fut.done(), fut.running(), fut.cancelled()) == (False, False, False)
        with pytest.raises(concurrent.futures.TimeoutError):
            fut.result(0.01)
        with pytest.raises(concurrent.futures.TimeoutError):
            fut.exception(0.01)
    assert not isinstance(pending, concurrent.futures.Future)
    with pytest.raises((AttributeError, TypeError)):  # it lacks the Future's private waiter list
        concurrent.futures.wait([pending], timeout=0)  # type: ignore[list-item]
    called: list[object] = []
    pending.add_done_callback(called.append)
    loop.run(writer.complete_single)
    reference.set_result(0)
    for fut in (pending, reference):
        assert (fut.result(0), fut.exception(0), fut.done(), fut.cancel(), fut.cancelled()) == (0, None, True, False, False)
    assert called == [pending]
    pending.add_done_callback(called.append)  # already done: called at once, on this thread
    assert called == [pending, pending]


def test_a_cancelled_append_future_stays_cancelled_when_its_entry_completes(loop: Loop) -> None:
    """Cancelling stops the wait, not the write: the acknowledgement that follows frees the room and raises nothing."""
    lh, writer = handle(loop)
    first, second = lh.append_async(b"a"), lh.append_async(b"b")
    reference: concurrent.futures.Future[int] = concurrent.futures.Future()
    for fut in (first, reference):
        assert fut.cancel() and fut.cancel() and fut.cancelled() and fut.done()
        with pytest.raises(concurrent.futures.CancelledError):
            fut.result(0)
        with pytest.raises(concurrent.futures.CancelledError):
            fut.exception(0)
    loop.run(writer.complete_single)  # the loop completes the cancelled one: no error escapes, its room comes back
    loop.run(lambda: writer.complete_single(BookieTimeoutError("add timed out")))
    assert first.cancelled() and isinstance(second.exception(0), BookieTimeoutError)
    assert (lh._in_flight, lh._in_flight_bytes) == (0, 0)


def test_bytes_payloads_are_kept_and_mutable_ones_copied(loop: Loop) -> None:
    """docs/client.md, "Bulk append": ``bytes`` payloads are kept as they are; a bytearray or memoryview is copied
    (the writer keeps each payload until it is acknowledged), and so is the caller's list."""
    lh, writer = handle(loop)
    kept, changing = b"abc", bytearray(b"def")
    payloads: list[bytes | bytearray | memoryview] = [kept, changing, memoryview(changing)]
    lh.append_many(payloads)
    single = lh.append_async(changing)
    changing[:] = b"XYZ"
    payloads.append(b"late")
    loop.run(lambda: None)  # the inbox is drained
    handed, _callback = writer.batches[0]
    assert handed[0] is kept and list(handed) == [b"abc", b"def", b"def"]
    assert writer.singles[0][0] == b"def"
    loop.run(writer.complete_batch)
    loop.run(writer.complete_single)
    assert single.result(0) == 3


def test_appends_queued_while_the_loop_is_busy_take_one_wake_up_and_keep_their_order(loop: Loop) -> None:
    """docs/client.md, "Threads": ``append_async`` queues into a per-handle inbox that the loop drains in one
    callback: one wake-up of the loop for many appends, handed to the writer in call order."""
    lh, writer = handle(loop)
    wake_ups: list[Callable[[], None]] = []
    call_soon = lh._bk._call_soon

    def counting(fn: Callable[[], None]) -> None:
        wake_ups.append(fn)
        call_soon(fn)

    lh._bk._call_soon = counting  # type: ignore[attr-defined]
    busy = threading.Event()
    loop.call_soon(lambda: busy.wait(10))  # the loop is busy with something else meanwhile
    futures = [lh.append_async(b"p%d" % i) for i in range(100)]
    busy.set()
    loop.run(lambda: None)
    assert len(wake_ups) == 1
    assert [payload for payload, _ in writer.singles] == [b"p%d" % i for i in range(100)]
    for _ in range(100):
        loop.run(writer.complete_single)
    assert [f.result(0) for f in futures] == list(range(100))
    lh.append_async(b"later")  # the inbox was drained: the next append wakes the loop again
    loop.run(lambda: None)
    assert len(wake_ups) == 2 and writer.singles[0][0] == b"later"


def test_the_bounds_hold_per_handle_not_per_client(loop: Loop) -> None:
    """docs/client.md, Configuration: ``maxPendingAdds`` / ``maxPendingAddBytes`` count what is in flight per handle:
    a handle at its bound makes its own appender wait, not an appender on another handle of the same client."""
    full, full_writer = handle(loop, maxPendingAdds=2, maxPendingAddBytes=100)
    other = LedgerHandle(full._bk, SimpleNamespace(ref=None, writer=FakeWriter()))  # the same client
    full.append_async(b"a")
    full.append_async(b"b")
    waiting, _ = in_thread(lambda: full.append_async(b"c"))
    assert blocked(waiting)
    t, out = in_thread(lambda: [other.append_async(b"o"), other.append_many([b"x" * 99])])  # its own bounds, full
    t.join(5)
    assert not t.is_alive() and len(out[0]) == 2
    loop.run(full_writer.complete_single)
    waiting.join(5)
    assert not waiting.is_alive()
