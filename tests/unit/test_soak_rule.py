"""The soak's growth rule (bench/soak.py, docs/reliability.md "The soak") on made-up series."""

from __future__ import annotations

import math

from bench.soak import grows_without_bound, judge

TIMES = [float(t) for t in range(0, 600, 5)]


def test_a_leak_grows_and_a_flat_noisy_series_does_not() -> None:
    leak = [100 + 0.2 * t for t in TIMES]  # +120 MiB over ten minutes, still rising at the end
    flat = [100 + 5 * math.sin(t) for t in TIMES]
    assert grows_without_bound(TIMES, leak, floor=24)[0]
    assert not grows_without_bound(TIMES, flat, floor=24)[0]


def test_warm_up_and_restarts_do_not_count_as_growth() -> None:
    warm = [20 + min(t, 60) * 2 for t in TIMES]  # climbs for a minute, then flat
    restarted = [60 if 200 <= t < 230 else 150 for t in TIMES]  # a killed bookie starts again low
    assert not grows_without_bound(TIMES, warm, floor=24)[0]
    assert not grows_without_bound(TIMES, restarted, floor=24)[0]


def test_a_rise_under_the_floor_is_not_growth() -> None:
    fds = [40 + (5 if t > 400 else 0) for t in TIMES]  # five more descriptors: under the floor of 16
    assert not grows_without_bound(TIMES, fds, floor=16)[0]
    assert grows_without_bound(TIMES, [40 + (50 if t > 400 else 0) for t in TIMES], floor=16)[0]


def test_judge_names_each_role_and_metric() -> None:
    samples = [
        {"t": t, "lag": 10.0, "roles": {"bookie-0": {"rss_mib": 100 + t, "fds": 30.0, "threads": 20.0, "connections": 4.0}}}
        for t in TIMES
    ]
    verdicts = judge(samples)
    assert verdicts["bookie-0/rss_mib"]["grows"] and not verdicts["bookie-0/fds"]["grows"]
    assert not verdicts["stream/lag_entries"]["grows"]
