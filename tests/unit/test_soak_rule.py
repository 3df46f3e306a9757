"""The soak's growth rule (bench/soak.py, docs/reliability.md "The soak") on made-up series."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.soak import conclude, grows_without_bound, heap_sizes, judge, pool_changes, thread_pools

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


def test_a_bookies_index_reader_slots_are_judged_where_sampled() -> None:
    """The entry index's reader slots (docs/bookie.md) are a series of their own: four slots a minute is the leak that
    filled a 126-slot table in a 30-minute soak; a sample without them (the bookie's endpoint did not answer) is
    left out of that series, not counted as zero."""
    base = {"rss_mib": 100.0, "fds": 30.0, "threads": 20.0, "connections": 4.0}
    samples = [{"t": t, "lag": 0.0, "roles": {
        "bookie-0": base | {"index_reader_slots": 1 + t / 15},
        "bookie-1": base | ({} if int(t) % 50 == 0 else {"index_reader_slots": 2.0}),
    }} for t in TIMES]
    verdicts = judge(samples)
    assert verdicts["bookie-0/index_reader_slots"]["grows"]
    assert not verdicts["bookie-1/index_reader_slots"]["grows"] and verdicts["bookie-1/index_reader_slots"]["first"] == 2.0


def test_a_soak_whose_final_read_failed_fails_with_its_figures_written(tmp_path: Path) -> None:
    result = {"samples": [{"t": t, "lag": 0.0, "roles": {}} for t in TIMES], "missing": 0, "duplicated": 0,
              "phantom": 0, "final_read_failed": True}
    out = tmp_path / "soak.json"
    assert conclude(result, out) == 1
    assert json.loads(out.read_text())["final_read_failed"] is True
    assert conclude(result | {"final_read_failed": False}, out) == 0


DUMP = '''2026-11-29 08:54:24
Full thread dump OpenJDK 64-Bit Server VM (17.0.15+6-Debian-1deb12u1 mixed mode, sharing):

"main" #1 prio=5 os_prio=0 cpu=2779.33ms elapsed=153.03s tid=0x00007f17f8020480 nid=0x6fd0 runnable  [0x00007f17fe5fe000]
   java.lang.Thread.State: RUNNABLE

"Executor task launch worker for task 3.0 in stage 7.0 (TID 21)" #77 daemon prio=5 os_prio=0 cpu=5.1ms elapsed=9.0s tid=0x1 nid=0x2 waiting
"Executor task launch worker for task 0.0 in stage 9.0 (TID 30)" #78 daemon prio=5 os_prio=0 cpu=5.1ms elapsed=2.0s tid=0x1 nid=0x3 waiting
"stream execution thread for [id = 49139ce9-63eb-45ca-85c9-2c981fad1591, runId = 482d261e-9c0e-4658-9b2f-bbb594ef26f5]" #90 daemon prio=5 os_prio=0 cpu=1524.24ms elapsed=81.83s tid=0x2 nid=0x7b8e waiting on condition  [0x00007f177d5fb000]
"GC Thread#0" os_prio=0 cpu=203.15ms elapsed=153.08s tid=0x00007f17f805d270 nid=0x6fd1 runnable
"GC Thread#1" os_prio=0 cpu=152.68ms elapsed=152.25s tid=0x00007f17c8004990 nid=0x6fea runnable
'''


def test_a_thread_dump_is_counted_by_pool_without_numbers_or_query_ids() -> None:
    assert thread_pools(DUMP) == {
        "main": 1,
        "Executor task launch worker for task #.# in stage #.# (TID #)": 2,
        "stream execution thread for [id = <id>, runId = <id>]": 1,
        "GC Thread##": 2,
    }


def test_pool_changes_names_the_pools_that_moved_and_when_they_peaked() -> None:
    samples = [
        {"t": 0.0, "jvm_pools": {"main": 1, "shuffle": 2}},
        {"t": 30.0, "jvm_pools": None},  # a sample without a dump
        {"t": 60.0, "jvm_pools": {"main": 1, "shuffle": 8}},
        {"t": 120.0, "jvm_pools": {"main": 1, "shuffle": 8, "leak": 3}},
    ]
    assert pool_changes(samples) == {
        "leak": {"first": 0, "peak": 3, "peak_at_min": 2.0, "last": 3},
        "shuffle": {"first": 2, "peak": 8, "peak_at_min": 1.0, "last": 8},
    }


THIRTY_MINUTES = [float(t) for t in range(0, 1800, 5)]


def _spark_jvm_threads(t: float) -> float:
    """Like Spark's JVM in the soak: 90 threads of its own, and two cached pools (at most 100 threads each, idle
    ones gone after 60 s) sized by the block removals of the last minute: rising for six minutes, then anywhere
    between their low and their cap."""
    ramp = min(t / 360, 1.0)
    return 90 + ramp * (60 + 60 * math.sin(t / 47.0) ** 2 + 80 * (math.sin(t / 13.0) > 0.9))


def test_spark_pools_sized_by_their_last_minute_are_flat_and_a_thread_per_micro_batch_is_not() -> None:
    pools = [_spark_jvm_threads(t) for t in THIRTY_MINUTES]
    assert max(pools) <= 90 + 200  # never above the two pools' caps
    assert not grows_without_bound(THIRTY_MINUTES, pools, floor=8, warm_up_s=360)[0]
    one_per_batch = [v + t / 2 for t, v in zip(THIRTY_MINUTES, pools)]  # a trigger every 2 s, one thread each
    assert grows_without_bound(THIRTY_MINUTES, one_per_batch, floor=8, warm_up_s=360)[0]
    one_per_minute = [v + t / 60 for t, v in zip(THIRTY_MINUTES, [90.0] * len(THIRTY_MINUTES))]
    assert grows_without_bound(THIRTY_MINUTES, one_per_minute, floor=8, warm_up_s=360)[0]


def test_the_warm_up_lasts_two_periods_of_the_slowest_work_and_a_later_step_still_counts() -> None:
    # A Python worker's threads: 7 more for each client it caches; its third client comes with the second batch
    # job (every 180 s), at 6 minutes of a 10-minute run.
    third_client = [16 + (7 if t >= 360 else 0) for t in TIMES]
    assert grows_without_bound(TIMES, third_client, floor=6)[0]  # a warm-up of 20 % alone calls it growth
    assert not grows_without_bound(TIMES, third_client, floor=6, warm_up_s=360)[0]
    later = [16 + (7 if t >= 480 else 0) for t in TIMES]  # after two periods: not warm-up any more
    assert grows_without_bound(TIMES, later, floor=6, warm_up_s=360)[0]


def test_heap_sizes_are_read_from_g1_and_from_the_serial_collector() -> None:
    g1 = """12345:
 garbage-first heap   total 524288K, used 204800K [0x00000000c0000000, 0x0000000100000000)
  region size 1024K, 57 young (58368K), 5 survivors (5120K)
 Metaspace       used 120000K, committed 121000K, reserved 1179648K
"""
    serial = """8940:
 def new generation   total 9792K, used 764K [0x00000000f8000000, 0x00000000f8aa0000, 0x00000000faaa0000)
  eden space 8704K,   6% used [0x00000000f8000000, 0x00000000f80901a8, 0x00000000f8880000)
 tenured generation   total 21888K, used 10240K [0x00000000faaa0000, 0x00000000fc000000, 0x0000000100000000)
"""
    assert heap_sizes(g1) == {"committed_mib": 512.0, "used_mib": 200.0}
    assert heap_sizes(serial) == {"committed_mib": (9792 + 21888) / 1024, "used_mib": (764 + 10240) / 1024}
    assert heap_sizes("12345:\nAttachNotSupportedException") is None


def _client_samples(per_client: Any, proxies: Any, clients: int = 11) -> list[dict[str, Any]]:
    """Samples of 12 Python workers holding ``clients`` clients in all, ``per_client(t)`` connections each (and one
    to the JVM per worker), behind fault proxies holding ``proxies(t)`` sockets."""
    out = []
    for t in TIMES:
        held = [1] * clients + [0] * (12 - clients)
        workers = {f"pyspark.worker {i}": [8.0, 30.0, 1.0 + n * per_client(t), float(n)] for i, n in enumerate(held)}
        connections = sum(w[2] for w in workers.values())
        base = {"rss_mib": 100.0, "fds": 30.0, "threads": 20.0}
        out.append({"t": t, "lag": 0.0, "workers": workers, "roles": {
            "python-workers": base | {"connections": connections},
            "client": base | {"connections": 13.0},
            "fault-proxies": {"rss_mib": 0.0, "fds": proxies(t), "threads": 5.0, "connections": proxies(t)}}})
    return out


def test_connections_that_follow_flat_clients_are_bounded_and_a_leak_per_client_or_in_the_proxies_is_not() -> None:
    """docs/reliability.md, "The soak": a Python worker's clients open connections to more bookies as the run goes
    on (at most 1 + 2 per bookie each), so the workers' connections rise toward a bound while their clients and the
    connections per client stay flat; the proxies' sockets follow them.  A client that keeps opening connections, or
    proxies holding sockets no client holds, still grow without bound."""
    rising = _client_samples(lambda t: 4 + t / 300, lambda t: 100 + t / 10)  # 4 to 6 a client; proxies follow
    verdicts = judge(rising)
    assert not verdicts["python-workers/connections"]["grows"]
    assert verdicts["python-workers/connections"]["bounded_by"] == "clients"
    assert not verdicts["fault-proxies/connections"]["grows"] and not verdicts["fault-proxies/fds"]["grows"]

    leaking = judge(_client_samples(lambda t: 4 + t / 60, lambda t: 100 + t / 10))  # 4 to 14 a client: past 9
    assert leaking["python-workers/connections"]["grows"] and leaking["fault-proxies/connections"]["grows"]

    toward_the_bound = judge(_client_samples(lambda t: 5 + t / 160, lambda t: 100 + t / 10))  # 5 to 8.7 a client
    assert not toward_the_bound["python-workers/connections_per_client"]["grows"]
    assert leaking["python-workers/connections_per_client"]["grows"]  # past 9 a client

    proxies_only = judge(_client_samples(lambda t: 5.0, lambda t: 100 + t / 5))  # the restore() bug's picture
    assert not proxies_only["python-workers/connections"]["grows"]
    assert proxies_only["fault-proxies/connections"]["grows"]
