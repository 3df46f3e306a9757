"""bench.write_cpu's CPU timeline: cores per kind of process, sampled while a block runs."""

from __future__ import annotations

import os
import time

from bench.write_cpu import CpuTimeline, kind_of


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_the_timeline_sees_this_process_busy_and_then_idle() -> None:
    with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
        mine = kind_of(f.read().replace(b"\0", b" ").decode(errors="replace"))
    with CpuTimeline(0.05) as timeline:
        start = time.perf_counter()
        _spin(0.6)
        busy_end = time.perf_counter()
        time.sleep(0.6)
        end = time.perf_counter()
    busy = [cores.get(mine, 0.0) for _t, cores in timeline.between(start + 0.1, busy_end)]
    idle = [cores.get(mine, 0.0) for _t, cores in timeline.between(busy_end + 0.15, end)]
    assert busy and idle
    # one spinning thread is about one core, less on a loaded machine; the sampler's own reads of /proc count
    # in both phases (ticks of 10 ms over 50 ms samples are coarse: the means)
    assert sum(busy) / len(busy) > sum(idle) / len(idle) + 0.3
    # times are relative to the start asked for, in order
    times = [t for t, _cores in timeline.between(start, end)]
    assert times == sorted(times) and 0 <= times[0] <= end - start
