"""InFlightGate, LimitLog and the limit settings (bookie_server.limits, bookie_server.config)."""

from __future__ import annotations

import logging

import pytest

from bkspark.errors import InvalidOptionError
from bookie_server.config import BookieConfig
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
