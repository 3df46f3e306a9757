"""Where bkspark's Spark scan of a Pulsar topic spends its time: the scan of bench/pulsar_compare.py, profiled on
both sides at once.

    py-spy record --subprocesses --idle --nonblocking --format raw -r 100 -o scan.txt -- \\
        python -m bench.pulsar_scan_profile --messages 1000000 --rounds 3 --jfr scan.jfr
    python -m bench.pulsar_scan_profile --report scan.txt --jfr scan.jfr [--out DIR]

The first command starts an Apache Pulsar standalone, produces the topic as bench/pulsar_compare.py does (untimed),
warms Spark with one scan, then records Java Flight Recorder's samples of Spark's JVM (``jcmd JFR.start`` on the
driver, which in ``local[N]`` runs the tasks too) over --rounds scans into ``noop`` and prints each scan's
messages/s and the CPU seconds of Spark's JVM, of the standalone (its bookie serves the reads) and of the whole
machine.  py-spy, around it, samples the Python workers.  ``--report`` then aggregates both: the Python samples of
the scan's workers (inside the reader's ``read()`` or Spark's worker loop serving it, idle included, so a worker
waiting for the JVM or for a bookie shows as waiting) by area, and the JVM's execution samples by top frame and by
area (Arrow IPC read, Arrow to rows, the socket, the noop write).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.pulsar_compare import TOPIC, bkspark_scan, produce
from bench.write_cpu import cpu_by_process

#: The Python areas of a scan worker's samples: the first rule whose text is in a sample's stack names it.
PYTHON_AREAS = (
    ("bookie read wait (the task waits for the client's next batch)", ("read_batches", "_next_batch",
                                                                        "Future.result", "queue.get")),
    ("decode (entry parse, compiled split)", ("parse_entry", "add_batch", "split_batch", "entry_messages",
                                              "decompress", "_entries")),
    ("Arrow batch build (columns)", ("columns.py",)),
    ("Python -> JVM (Arrow IPC write to the socket)", ("dump_stream", "_write_with_length", "write_int",
                                                       "serializers.py")),
    ("the client's event loop (bookie reads, responses)", ("bkspark/client/", "bkspark/protocol/", "asyncio")),
)

#: The JVM areas: walking a sample's stack from its top frame down, the first frame holding one of an area's texts
#: names it.  A Python data source's rows reach Spark through two projections: the Arrow batch's rows copied into
#: UnsafeRows (the MapInBatch evaluator under ``PythonPartitionReaderFactory``), then the scan's ``Project``, which
#: Spark keeps above a row-based DataSource V2 scan and which copies every row again (``BufferedRowIterator``).
JVM_AREAS = (
    ("Arrow IPC read (Python -> JVM: socket, Arrow buffers)", ("org.apache.arrow.vector.ipc", "ReadChannel",
                                                              "MessageSerializer", "VectorLoader",
                                                              "ArrowStreamReader")),
    ("Arrow batch -> UnsafeRow (MapInBatch projection)", ("PythonPartitionReaderFactory",)),
    ("the scan's Project (UnsafeRow -> UnsafeRow copy)", ("BufferedRowIterator",)),
    ("noop write loop", ("DataWriter.writeAll", "NoopWriter", "WritingSparkTask")),
)


def spark_pid(spark: Any) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def machine_cpu_seconds() -> float:
    """User+system CPU seconds of the whole machine (/proc/stat), for the share the scan's processes took."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return (int(fields[0]) + int(fields[1]) + int(fields[2])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> collections.Counter[str]:
    """CPU seconds of each kind of thread of a process (``/proc/<pid>/task``, names less their numbers): the JVM's
    task threads apart from its garbage collector and its JIT compilers."""
    tick = os.sysconf("SC_CLK_TCK")
    out: collections.Counter[str] = collections.Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1: stat.rindex(")")].rstrip("0123456789#-_ ")
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] += (int(fields[11]) + int(fields[12])) / tick
    return out


def descendants(pid: int) -> set[int]:
    """The processes below ``pid`` (Spark's Python daemon and workers below its JVM), not other users' workers."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            parents[int(name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def run(args: argparse.Namespace) -> None:
    from bench.common import spark_session
    from tests.harness.pulsar import PulsarStandalone

    with tempfile.TemporaryDirectory(prefix="bench-pulsar-profile-") as tmp:
        broker = PulsarStandalone(Path(tmp), max_entries_per_ledger=50_000)
        broker.start()
        try:
            produce(broker.service_url, args.messages, args.size, args.batching == "on")
            spark = spark_session(args.cores, "bench-pulsar-profile")
            uri = broker.metadata_service_uri
            bkspark_scan(spark, uri, args.cores)  # untimed warm-up
            jvm = spark_pid(spark)
            if args.jfr:
                subprocess.run(["jcmd", str(jvm), "JFR.start", "name=scan", "settings=profile",
                                f"filename={Path(args.jfr).resolve()}"], check=True, capture_output=True)
            broker_pid = broker.process.pid if broker.process is not None else None
            for index in range(args.rounds):
                before, machine0, threads0 = cpu_by_process(), machine_cpu_seconds(), thread_cpu(jvm)
                t0 = time.monotonic()
                bkspark_scan(spark, uri, args.cores)
                elapsed = time.monotonic() - t0
                after = cpu_by_process()
                threads = thread_cpu(jvm)
                threads.subtract(threads0)
                cpu: collections.Counter[str] = collections.Counter()
                ours = descendants(jvm)
                for pid, (ticks, cmd) in after.items():
                    used = (ticks - before.get(pid, (0, ""))[0]) / os.sysconf("SC_CLK_TCK")
                    kind = ("spark_jvm" if pid == jvm else "broker" if pid == broker_pid
                            else "python_workers" if pid in ours
                            else "py-spy" if "py-spy" in cmd else "other")
                    cpu[kind] += used
                print(json.dumps({"round": index, "msgs_per_sec": round(args.messages / elapsed),
                                  "seconds": round(elapsed, 3),
                                  **{f"{k}_cpu_s": round(v, 2) for k, v in sorted(cpu.items())},
                                  "machine_cpu_s": round(machine_cpu_seconds() - machine0, 2),
                                  "load": os.getloadavg()[0],
                                  "spark_jvm_threads_cpu_s": {k: round(v, 2) for k, v in threads.most_common(8)}}),
                      flush=True)
            if args.jfr:
                subprocess.run(["jcmd", str(jvm), "JFR.stop", "name=scan"], check=True, capture_output=True)
            spark.stop()
        finally:
            broker.stop()


def _area(stack: str, areas: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    for name, marks in areas:
        if any(mark in stack for mark in marks):
            return name
    return "other"


def _jvm_area(frames: list[str]) -> str:
    for frame in frames:  # top first
        for name, marks in JVM_AREAS:
            if any(mark in frame for mark in marks):
                return name
    return "other (scheduler, metrics, JFR)"


#: Leaf frames of a thread that waits (py-spy's ``--idle`` samples): on a lock, a selector or a socket.
IDLE_LEAVES = ("Condition.wait", "EpollSelector.select", "Queue.get", "read_int", "manager (daemon.py",
               "_worker (concurrent/futures/thread.py", "SocketIO.readinto", "_PollLikeSelector.select")


def _thread_kind(frames: list[str]) -> str:
    stack = ";".join(frames)
    if "BookKeeper._run_loop" in stack:
        return "the client's event loop thread"
    if "worker (daemon.py" in stack:
        return "the task thread (read() and Spark's worker loop)"
    return "other threads (ZooKeeper client, pools)"


def python_report(raw: Path) -> list[str]:
    """The samples of the Python workers that ran the scan (py-spy's raw collapsed stacks, ``--idle``): by thread,
    each thread's samples by area, waits apart, and the top leaf frames of the working samples."""
    lines = [line.rpartition(" ") for line in raw.read_text().splitlines()]
    samples = []
    for stack, _, count in lines:
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        processes = [f for f in frames if f.startswith("process ")]
        if processes and "pyspark.daemon pyspark.worker" in processes[-1]:
            samples.append((processes[-1].split(":")[0], [f for f in frames if not f.startswith("process ")],
                            int(count)))
    workers = {process for process, frames, _ in samples if any("pulsar_reader.py" in f for f in frames)}
    scan = [(frames, count) for process, frames, count in samples if process in workers]
    kinds: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    leaves: collections.Counter[str] = collections.Counter()
    for frames, count in scan:
        kind = _thread_kind(frames)
        leaf = frames[-1] if frames else "?"
        if any(leaf.startswith(mark) for mark in IDLE_LEAVES):
            stack = ";".join(frames)
            where = ("waits for the JVM (socket write)" if "dump_stream" in stack and "read_udfs" not in stack
                     else "waits for the client's next batch" if "run_coroutine" in stack or "Future.result" in stack
                     else "idle between tasks / waits for events")
            kinds[kind][f"wait: {where}"] += count
        else:
            kinds[kind][_area(";".join(frames), PYTHON_AREAS)] += count
            leaves[leaf] += count
    working = sum(leaves.values()) or 1
    out = [f"python: {sum(c for _, c in scan)} samples (py-spy --idle) of {len(workers)} scan worker process(es); "
           f"{working} of them working"]
    for kind, areas in sorted(kinds.items(), key=lambda item: -sum(item[1].values())):
        total = sum(areas.values()) or 1
        out += ["", f"{kind}: {total} samples"]
        out += [f"  {100 * c / total:5.1f}%  {name}" for name, c in areas.most_common()]
    out += ["", "top leaf frames of the working samples (all threads):"]
    out += [f"  {100 * c / working:5.1f}%  {name}" for name, c in leaves.most_common(40)]
    return out


def jvm_report(recording: Path) -> list[str]:
    """JFR's ``jdk.ExecutionSample`` events of Spark's JVM: by thread, by area, by top frame."""
    printed = subprocess.run(["jfr", "print", "--events", "jdk.ExecutionSample", "--stack-depth", "64",
                              str(recording)], check=True, capture_output=True, text=True).stdout
    events = printed.split("jdk.ExecutionSample {")[1:]
    tops: collections.Counter[str] = collections.Counter()
    areas: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    for event in events:
        thread = event.split("sampledThread = \"", 1)[-1].split("\"", 1)[0]
        stack = event.split("stackTrace = [", 1)[-1]
        frames = [line.strip() for line in stack.splitlines() if "line:" in line]
        threads[thread.rstrip("0123456789 ")] += 1
        tops[frames[0].split("  ")[0] if frames else "?"] += 1
        areas[_jvm_area(frames)] += 1
    total = len(events) or 1
    out = [f"jvm: {len(events)} execution samples (JFR, 20 ms per thread in Java code)", "", "by thread:"]
    out += [f"  {100 * c / total:5.1f}%  {name}" for name, c in threads.most_common(12)]
    out += ["", "by area (the first frame from the top that names one):"]
    out += [f"  {100 * c / total:5.1f}%  {name}" for name, c in areas.most_common()]
    out += ["", "top frames:"]
    out += [f"  {100 * c / total:5.1f}%  {name}" for name, c in tops.most_common(40)]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--batching", choices=("on", "off"), default="on")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--jfr", help="record Spark's JVM over the timed scans into this file (or, with --report, read it)")
    p.add_argument("--report", help="aggregate this py-spy raw profile (and --jfr) instead of running the scans")
    p.add_argument("--out", help="with --report: also write the aggregates to this file")
    args = p.parse_args()
    if not args.report:
        run(args)
        return
    lines = python_report(Path(args.report))
    if args.jfr:
        lines += ["", *jvm_report(Path(args.jfr))]
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
