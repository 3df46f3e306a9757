"""bench.write_cpu's CPU timeline: cores per kind of process, sampled while a block runs."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.write_cpu import CpuTimeline

#: A process that spins until it has used 1.5 s of CPU (at least 1.5 s, longer on a busy machine), then sleeps for
#: 1.5 s; its command line names it a bench client (bench.write_cpu.KINDS), a kind no other process of a test run has.
SPINNER = (
    "import time  # bench.pyclient stand-in\n"
    "while time.process_time() < 1.5:\n"
    "    pass\n"
    "time.sleep(1.5)\n"
)


def test_the_timeline_sees_a_process_busy_and_then_idle() -> None:
    kind = "bkspark bench client"
    with CpuTimeline(0.1) as timeline:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", SPINNER], check=True, timeout=60)
        end = time.perf_counter()
    # The spinner's own start-up and the ends of its phases are left out; ticks of 10 ms over 100 ms samples are
    # coarse, so the means of each phase.
    busy = [cores.get(kind, 0.0) for t, cores in timeline.between(start + 0.4, start + 1.4)]
    idle = [cores.get(kind, 0.0) for t, cores in timeline.between(end - 1.2, end - 0.2)]
    assert busy and idle, timeline.samples
    # Busy and idle by a wide margin, not by absolute figures: `make test`'s other worker may take a core meanwhile.
    busy_cores, idle_cores = sum(busy) / len(busy), sum(idle) / len(idle)
    assert busy_cores > 0.2 and idle_cores < 0.05 and busy_cores > 4 * idle_cores, (busy, idle)
    times = [t for t, _cores in timeline.between(start, end)]
    assert times == sorted(times) and 0 <= times[0] <= end - start
