"""InFlightGate, LimitLog and the limit settings (bookie_server.limits, bkspark.config.bookie)."""

from __future__ import annotations

import json
import logging
import random

import pytest

from bkspark.errors import InvalidOptionError
from bkspark.config.bookie import BookieConfig
from bookie_server.limits import InFlightGate, LimitLog


def test_gate_bounds_count_and_wakes_parked_connections_in_order() -> None:
    gate = InFlightGate("adds", max_count=2)
    assert gate.try_acquire() and gate.try_acquire()
    assert not gate.try_acquire()
    woken: list[str] = []
    gate.wait(lambda: woken.append("a"))
    gate.wait(lambda: woken.append("b"))
    assert gate.waiting == 2 and woken == []
    gate.release()
    assert woken == ["a", "b"] and gate.waiting == 0 and gate.count == 1


def test_gate_bounds_bytes_but_always_admits_a_lone_request() -> None:
    gate = InFlightGate("adds", max_count=0, max_bytes=100)
    assert gate.try_acquire(60)
    assert not gate.try_acquire(60)
    gate.release(60)
    assert gate.try_acquire(500)  # bigger than the bound, but nothing else is in progress
    assert gate.bytes == 500
    assert not gate.try_acquire(1)


def test_gate_parked_connections_go_before_newcomers() -> None:
    gate = InFlightGate("adds", max_count=10, max_bytes=100)
    assert gate.try_acquire(90)
    assert not gate.try_acquire(50)  # a big add must wait ...
    gate.wait(lambda: None)
    assert not gate.try_acquire(5)  # ... and a small one arriving later does not overtake it
    gate.release(90)  # wakes the big one: it retries first
    assert gate.try_acquire(50)


def test_gate_zero_means_unlimited() -> None:
    gate = InFlightGate("reads", max_count=0)
    assert all(gate.try_acquire() for _ in range(10_000))


def _one_at_a_time(count: int, held: int, max_count: int, max_bytes: int, parked: bool, sizes: list[int]) -> tuple:
    """The gate's rule applied to one request after another (a model written from docs/bookie.md, "Limits"):
    ``(admitted, count, bytes)`` after the run."""
    admitted = 0
    for size in sizes:
        full = count and ((max_count and count >= max_count) or (max_bytes and held + size > max_bytes))
        if full or (parked and count):
            break
        count, held, admitted = count + 1, held + size, admitted + 1
    return admitted, count, held


def test_gate_admits_a_run_as_one_request_at_a_time_would() -> None:
    """``try_acquire_many`` (a run of adds received together) and ``try_acquire`` (a run of one) against the rule
    applied one request after another, from the same state: the same count admitted and the same count and bytes
    held, over random bounds, holdings, parked connections and runs, including requests larger than the byte
    bound and zero-byte ones."""
    rng = random.Random(20261125)
    for _case in range(5000):
        max_count, max_bytes = rng.choice([0, 1, 2, 5, 50]), rng.choice([0, 1, 100, 1000, 10_000])
        sizes = [rng.choice([0, 1, 50, 99, 100, 101, 700, 20_000]) for _ in range(rng.randrange(0, 40))]
        held = rng.randrange(0, 8)
        held_bytes = rng.randrange(0, 2000) if held else 0
        parked = rng.random() < 0.3
        gate = InFlightGate("adds", max_count=max_count, max_bytes=max_bytes)
        gate.count, gate.bytes = held, held_bytes
        if parked:
            gate._waiters.append(lambda: None)
        case = (max_count, max_bytes, sizes, held, held_bytes, parked)
        want = _one_at_a_time(held, held_bytes, max_count, max_bytes, parked, sizes)
        assert (gate.try_acquire_many(sizes), gate.count, gate.bytes) == want, case
        if sizes:  # a run of one
            gate.count, gate.bytes = held, held_bytes
            one = _one_at_a_time(held, held_bytes, max_count, max_bytes, parked, sizes[:1])
            assert (gate.try_acquire(sizes[0]), gate.count, gate.bytes) == (one[0] == 1, one[1], one[2]), case


def test_reads_gate_admits_a_run_of_reads_as_one_read_at_a_time_would() -> None:
    """The reads gate has a count bound only and reads take no bytes: ``try_acquire_many`` of a run of zero sizes
    (docs/bookie.md, "Reads") admits what the rule applied one read after another admits."""
    rng = random.Random(20261126)
    for _case in range(3000):
        max_count, held, parked, n = rng.choice([0, 1, 2, 3, 10, 10_000]), rng.randrange(0, 12), rng.random() < 0.3, rng.randrange(0, 300)
        gate = InFlightGate("reads", max_count=max_count)
        gate.count = held
        if parked:
            gate._waiters.append(lambda: None)
        admitted, count, _held_bytes = _one_at_a_time(held, 0, max_count, 0, parked, [0] * n)
        assert (gate.try_acquire_many((0,) * n), gate.count) == (admitted, count), (max_count, held, parked, n)


def test_limit_log_logs_first_hit_then_a_count_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limits = LimitLog(interval_s=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="bookie_server.limits"):
        for _ in range(500):
            limits.hit("serverMaxConnections", "over %d", 10)
        assert len(caplog.records) == 1
        now[0] = 61.0
        limits.hit("serverMaxConnections", "over %d", 10)
        limits.hit("serverPartialFrameTimeoutMs", "slow")
    assert len(caplog.records) == 3
    assert "499 more hits" in caplog.records[1].getMessage()
    # docs/bookie.md, "Limits": each line carries the key as its JSON field ``limit``.
    from bookie_server.__main__ import JsonFormatter

    fields = [json.loads(JsonFormatter().format(record)) for record in caplog.records]
    assert [f["limit"] for f in fields] == ["serverMaxConnections", "serverMaxConnections", "serverPartialFrameTimeoutMs"]
    assert limits.hits == {"serverMaxConnections": 501, "serverPartialFrameTimeoutMs": 1}


@pytest.mark.parametrize(
    "values",
    [
        {"maxAddsInProgressLimit": -1},
        {"serverMaxConnections": -5},
        {"serverWriteBufferLowWaterMark": 1024, "serverWriteBufferHighWaterMark": 512},
        {"serverWriteBufferLowWaterMark": 0},
    ],
)
def test_bad_limit_settings_are_refused(values: dict[str, int]) -> None:
    with pytest.raises(InvalidOptionError):
        BookieConfig.from_mapping(values)


def test_limit_settings_parse_from_conf_strings() -> None:
    conf = BookieConfig.from_mapping(
        {"maxReadsInProgressLimit": "0", "serverPartialFrameTimeoutMs": "1500", "skipReplayJournalInvalidRecord": "true"}
    )
    assert conf.maxReadsInProgressLimit == 0 and conf.serverPartialFrameTimeoutMs == 1500
    assert conf.skipReplayJournalInvalidRecord is True
