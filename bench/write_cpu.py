"""Where the CPU of a Spark write (and of the scan of what it wrote) goes, per process: the bookie, Spark's JVM,
its Python workers.

    python -m bench.write_cpu [--rows 1000000] [--size 100] [--bookie-kind java|python] [--rounds 2]
                              [--rows-per-entry 1,100000] [--entry-max-bytes 16384] [--threads]

One ZooKeeper, one bookie (ensemble 1/1/1, fsync journal) and Spark ``local[2]`` in this process.  Each round
writes --rows rows of --size bytes (2 tasks, one ledger each) once per ``rowsPerEntry`` value, and reads every
process's CPU time (``/proc/<pid>/stat``, user + system) before and after the job; then the same for a scan of
that dataset into the ``noop`` sink (one partition per ledger).  It prints rows/s and, per
kind of process, CPU seconds and microseconds per row: a py-spy profile sees only Python, and a Spark write's
Python workers share two cores with the bookie's and Spark's JVMs.  The ratio is packed ÷ one row per entry
(docs/connector.md, "Rows per entry").  ``--threads`` also splits the Python processes' CPU by thread (the main
thread, where a Spark task runs, and the others, where bkspark's client loop runs) into user and system time,
from ``/proc/<pid>/task/<tid>/stat``: a sampling profiler charges a thread that is runnable but waiting for a core
to the line it stopped on, and only these counters say what ran.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Any

from bench.common import (
    Cluster,
    Report,
    add_common_args,
    add_spark_job_args,
    command_line,
    machine_facts,
    payload_frame,
    run_main,
    spark_session,
    timed,
)

#: (kind, predicate over the command line), first match wins.
KINDS = (
    ("Spark JVM", lambda cmd: "java" in cmd and "pyspark" in cmd),
    ("Kafka JVM", lambda cmd: "java" in cmd and " kafka.Kafka " in cmd),
    ("Java bench client", lambda cmd: "java" in cmd and "BenchClient" in cmd),
    ("bookie JVM", lambda cmd: "java" in cmd and "bookkeeper" in cmd.lower() and "zookeeper.server" not in cmd),
    ("ZooKeeper JVM", lambda cmd: "java" in cmd),
    ("Spark's Python workers", lambda cmd: "pyspark.daemon" in cmd or "pyspark.worker" in cmd),
    ("Python bookie", lambda cmd: "bookie_server" in cmd),
    ("bkspark bench client", lambda cmd: "bench.pyclient" in cmd),
    ("this driver", lambda cmd: "bench." in cmd),
)


def stat_ticks(pid: int, tid: int | None = None) -> tuple[int, int]:
    """User and system CPU ticks of a process (children not included), or of one of its threads, from
    ``/proc/<pid>[/task/<tid>]/stat``; OSError when it is gone."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


#: Clock ticks per second of /proc's CPU times.
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """Seconds of CPU (user + system) of a process, or of one of its threads (:func:`stat_ticks`)."""
    return sum(stat_ticks(pid, tid)) / _TICK


def cpu_by_process() -> dict[int, tuple[int, str]]:
    """Every process's CPU ticks (user + system, children not included) and command line."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            user, system = stat_ticks(int(name))
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        out[int(name)] = (user + system, cmd)
    return out


#: The kinds of process whose threads ``--threads`` reports.
PYTHON_KINDS = ("Spark's Python workers", "Python bookie")


def cpu_by_thread() -> dict[tuple[int, int], tuple[int, int, str]]:
    """User and system ticks of every thread of the Python processes of :data:`PYTHON_KINDS`, by (pid, tid), with
    the process's kind (a thread that ended meanwhile is not counted)."""
    out = {}
    for pid, (_ticks, cmd) in cpu_by_process().items():
        kind = kind_of(cmd)
        if kind not in PYTHON_KINDS:
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                user, system = stat_ticks(pid, int(tid))
            except OSError:
                continue
            out[(pid, int(tid))] = (user, system, kind)
    return out


def thread_seconds(
    before: dict[tuple[int, int], tuple[int, int, str]], after: dict[tuple[int, int], tuple[int, int, str]]
) -> dict[tuple[str, str, str], float]:
    """CPU seconds by (kind, "main thread" or "other threads", "user" or "system")."""
    tick = os.sysconf("SC_CLK_TCK")
    seconds: dict[tuple[str, str, str], float] = {}
    for (pid, tid), (user, system, kind) in after.items():
        user0, system0, _ = before.get((pid, tid), (0, 0, kind))
        role = "main thread" if pid == tid else "other threads"
        for mode, used in (("user", user - user0), ("system", system - system0)):
            if used > 0:
                seconds[(kind, role, mode)] = seconds.get((kind, role, mode), 0.0) + used / tick
    return seconds


def kind_of(cmd: str) -> str:
    return next((kind for kind, test in KINDS if test(cmd)), "other")


class CpuTimeline:
    """Cores used per kind of process (:func:`kind_of`) in every ``interval`` seconds, sampled by a thread of its
    own while the ``with`` block runs: when in a job each process works, where :func:`cpu_seconds_by_kind` gives
    only the totals.  ``samples`` holds ``(perf_counter time, {kind: cores})`` pairs."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-timeline", daemon=True)

    def __enter__(self) -> "CpuTimeline":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last, last_t = cpu_by_process(), time.perf_counter()
        while not self._stop.wait(self.interval):
            now, now_t = cpu_by_process(), time.perf_counter()
            cores: dict[str, float] = {}
            for pid, (ticks, cmd) in now.items():
                used = ticks - last.get(pid, (0, ""))[0]
                if used > 0:
                    kind = kind_of(cmd)
                    cores[kind] = cores.get(kind, 0.0) + used / _TICK / (now_t - last_t)
            self.samples.append((now_t, cores))
            last, last_t = now, now_t

    def between(self, start: float, end: float) -> list[tuple[float, dict[str, float]]]:
        """The samples taken from ``start`` to ``end`` (``perf_counter`` times), their times made relative to
        ``start``."""
        return [(t - start, cores) for t, cores in self.samples if start <= t <= end]


def cpu_seconds_by_kind(before: dict[int, tuple[int, str]], after: dict[int, tuple[int, str]]) -> dict[str, float]:
    tick = os.sysconf("SC_CLK_TCK")
    seconds: dict[str, float] = {}
    for pid, (ticks, cmd) in after.items():
        used = ticks - before.get(pid, (0, ""))[0]
        if used > 0:
            seconds[kind_of(cmd)] = seconds.get(kind_of(cmd), 0.0) + used / tick
    return seconds


def run(args: argparse.Namespace) -> Report:
    packings = [int(v) for v in args.rows_per_entry.split(",") if v.strip()]
    params = {"rows": args.rows, "size": args.size, "spark": "local[2]", "bookie": f"1 x {args.bookie_kind}",
              "ensemble": "1/1/1", "rowsPerEntry": args.rows_per_entry, "entryMaxBytes": args.entry_max_bytes}
    report = Report("write_cpu", "CPU per process of a Spark write (rows per entry)", command_line("bench.write_cpu"),
                    params, machine_before=machine_facts())
    best: dict[int, float] = {}
    best_scan: dict[int, float] = {}
    with Cluster(args.workdir, args.keep, make_jars=not args.no_make) as cluster:
        uri = cluster.one_bookie(args.bookie_kind, args.bk_version)
        spark = spark_session(2, "bkspark-write-cpu")

        def scan(dataset: str) -> float:
            df = spark.read.format("bookkeeper").options(
                metadataServiceUri=uri, dataset=dataset, digestType="CRC32C", maxEntriesPerPartition=str(args.rows),
            ).load()
            t0 = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            return time.perf_counter() - t0

        def measured(what: str, job: Any) -> float:
            """Run ``job`` (returns its seconds), report its rows/s and every kind of process's CPU per row."""
            before = cpu_by_process()
            threads_before = cpu_by_thread() if args.threads else {}
            secs = job()
            used = cpu_seconds_by_kind(before, cpu_by_process())
            by_thread = thread_seconds(threads_before, cpu_by_thread()) if args.threads else {}
            rate = args.rows / secs
            report.row(what, rate, "rows/s")
            for kind, cpu in sorted(used.items(), key=lambda kv: -kv[1]):
                if cpu >= 0.01:
                    report.row(f"{what}:   {kind}", cpu / args.rows * 1e6, "µs CPU/row", cpu_s=round(cpu, 2),
                               share_of_a_core=round(cpu / secs, 2))
            for (kind, role, mode), cpu in sorted(by_thread.items()):
                report.row(f"{what}:   {kind}, {role}, {mode}", cpu / args.rows * 1e6, "µs CPU/row",
                           cpu_s=round(cpu, 2))
            return rate

        def write(rows: int, dataset: str, per_entry: int) -> float:
            t0 = time.perf_counter()
            payload_frame(spark, rows, args.size, 2).write.format("bookkeeper").options(
                metadataServiceUri=uri, ensembleSize="1", writeQuorumSize="1", ackQuorumSize="1", digestType="CRC32C",
                rowsPerEntry=str(per_entry), entryMaxBytes=str(args.entry_max_bytes),
            ).option("dataset", dataset).mode("append").save()
            return time.perf_counter() - t0

        try:
            for per_entry in packings:
                with timed(f"warm-up (untimed), rowsPerEntry={per_entry}"):
                    write(20_000, f"warm-{per_entry}", per_entry)
                    scan(f"warm-{per_entry}")
            for rnd in range(args.rounds):
                for per_entry in packings:
                    dataset = f"bench-{rnd}-{per_entry}"
                    label = f"round {rnd}, rowsPerEntry={per_entry}"
                    with timed(f"{label}: write"):
                        rate = measured(f"{label}: Spark write", lambda: write(args.rows, dataset, per_entry))
                    best[per_entry] = max(best.get(per_entry, 0.0), rate)
                    with timed(f"{label}: scan"):
                        rate = measured(f"{label}: Spark scan", lambda: scan(dataset))
                    best_scan[per_entry] = max(best_scan.get(per_entry, 0.0), rate)
        finally:
            spark.stop()
    if len(packings) > 1:
        base = packings[0]
        for per_entry in packings[1:]:
            report.add_ratio(f"Spark write rows/s, rowsPerEntry={per_entry} ÷ rowsPerEntry={base} (best rounds)",
                             best.get(per_entry), best.get(base))
            report.add_ratio(f"Spark scan rows/s, rowsPerEntry={per_entry} ÷ rowsPerEntry={base} (best rounds)",
                             best_scan.get(per_entry), best_scan.get(base))
    report.notes.append("CPU from /proc/<pid>/stat (user + system) of every process before and after each job; "
                        "the bookie's journal fsyncs wait without CPU.")
    report.machine_after = machine_facts()
    return report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.write_cpu", description=__doc__.split("\n\n")[0])
    add_spark_job_args(p, rounds=2)
    p.add_argument("--rows-per-entry", default="1,100000", help="rowsPerEntry values, comma-separated (first: base)")
    p.add_argument("--entry-max-bytes", type=int, default=16 * 1024, help="entryMaxBytes (default 16 KiB)")
    p.add_argument("--threads", action="store_true",
                   help="also the Python processes' CPU by thread (main, others) and mode (user, system)")
    add_common_args(p)
    return p


if __name__ == "__main__":
    sys.exit(run_main(parser, run, None))
