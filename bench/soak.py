"""The soak (docs/reliability.md, "The soak"): ``make soak MINUTES=N`` or ``python -m bench.soak --minutes N``.

For N minutes, on one ZooKeeper and four Python bookies (fsync'd journals) on loopback:

* a **writer** (bkspark's client) appends rows to ledgers of its own (ids from ``SOURCE_BASE``, so no other
  ledger falls in the stream's range), about 50 a second, closing each ledger after ``ENTRIES_PER_LEDGER``;
* a **streaming query** follows those ledgers (``spark.readStream`` with a ledger range listed again at every
  trigger) into the **exactly-once sink** (``writeStream``, dataset ``soak``);
* a **batch job** every ``--batch-every`` seconds reads the sink's dataset (``spark.read``) and counts it;
* a **fault schedule**: every ``--fault-every`` seconds one bookie is killed -9 and started again after 5 to 15 s,
  or stopped (SIGSTOP, a hung process) for 5 to 15 s; never more than one bookie at a time.

Every ``--sample-every`` seconds it records RSS, open file descriptors, threads and TCP connections of every
bkspark process: this one (the client: writer, Spark driver), Spark's JVM, Spark's Python workers, and each
bookie; and the stream's lag (entries confirmed in the source but not yet in a micro-batch, from the source's
progress report). At the end it stops the writer, waits for the stream to catch up, and reads the dataset: every
acknowledged row must be there exactly once, and no row the writer never tried.

**Growth rule** (``grows_without_bound``): the first ``WARM_UP`` of the run is left out (JVM warm-up, first
caches); the rest is cut in two halves; a series grows without bound when the second half's peak exceeds the
first half's by more than ``GROWTH_TOLERANCE`` of it and more than the series' floor (``FLOORS``: a few MiB,
fds, threads or connections, a few thousand entries of lag). A leak raises every later peak; a flat series
with noise, or one that restarts (a killed bookie), does not.

Writes ``--out`` (JSON: samples, verdicts, figures) and ``--png`` (the picture); exits 1 when a series grows
without bound or a row is missing or duplicated.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

from bench.common import Cluster, spark_session
from bkspark.client import BookKeeper

#: The writer's ledger ids start here: far above the ids ZooKeeper hands out (the sink's ledgers).
SOURCE_BASE = 1_000_000_000
ENTRIES_PER_LEDGER = 1500
DATASET = "soak"
#: Share of the run left out of the growth rule (warm-up).
WARM_UP = 0.2
GROWTH_TOLERANCE = 0.10
#: The least rise that counts as growth, per metric.
FLOORS = {"rss_mib": 24.0, "fds": 16.0, "threads": 8.0, "connections": 8.0, "lag_entries": 3000.0,
          "behind_entries": 3000.0}
CLIENT_CONF = {"addEntryTimeoutSec": 5, "readEntryTimeoutSec": 5, "explicitLacInterval": 500}
METRICS = ("rss_mib", "fds", "threads", "connections")


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- the writer ------------------------------------------------------------------------------------------------------


class Writer:
    """Appends rows to ledgers ``SOURCE_BASE, SOURCE_BASE + 1, ...``; remembers what was acknowledged."""

    def __init__(self, uri: str, rate: float) -> None:
        self.uri = uri
        self.pause = 1.0 / rate
        self.acked: set[str] = set()
        #: Rows whose add failed or was never answered: they may be in the sink (once) or not.
        self.unknown: set[str] = set()
        self.ledgers = 0
        #: Ledger id -> rows acknowledged in it.
        self.acked_in: Counter[int] = Counter()
        self.failures = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="soak-writer", daemon=True)

    def _run(self) -> None:
        with BookKeeper(self.uri, conf=CLIENT_CONF) as bk:
            k = 0
            while not self.stop.is_set():
                lid = SOURCE_BASE + k
                k += 1
                try:
                    lh = bk.create_ledger_adv(lid, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
                except Exception as exc:  # noqa: BLE001 - a fault: try the next id
                    _log(f"writer: create {lid} failed: {exc!r}")
                    self.failures += 1
                    time.sleep(1)
                    continue
                self.ledgers += 1
                broken = False
                for i in range(ENTRIES_PER_LEDGER):
                    if self.stop.is_set():
                        break
                    row = f"{lid}-{i}"
                    try:
                        lh.append(row.encode())
                    except Exception as exc:  # noqa: BLE001 - outcome unknown; this ledger is done
                        _log(f"writer: add {row} failed: {exc!r}")
                        self.unknown.add(row)
                        self.failures += 1
                        broken = True
                        break
                    self.acked.add(row)
                    self.acked_in[lid] += 1
                    time.sleep(self.pause)
                try:
                    if broken:
                        bk.open_ledger(lid, recovery=True).close()  # recovery closes it for the stream
                    else:
                        lh.close()
                except Exception as exc:  # noqa: BLE001 - retried by the stream's own reads; logged
                    _log(f"writer: closing {lid} failed: {exc!r}")


# -- faults ----------------------------------------------------------------------------------------------------------


class Faults:
    """One fault at a time on one bookie: kill -9 then start, or SIGSTOP then SIGCONT."""

    def __init__(self, bookies: Any, every: float, seed: int) -> None:
        self.bookies = bookies
        self.every = every
        self.rng = random.Random(seed)
        self.done: Counter[str] = Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="soak-faults", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            i = self.rng.randrange(len(self.bookies.bookies))
            kind = self.rng.choice(("kill", "pause"))
            down = self.rng.uniform(5, 15)
            bookie = self.bookies.bookies[i]
            _log(f"fault: {kind} bookie {i} for {down:.0f} s")
            if kind == "kill":
                self.bookies.kill(i)
                time.sleep(down)
                self.bookies.start(i, timeout=120)
            else:
                pid = bookie.process.pid
                os.kill(pid, signal.SIGSTOP)
                time.sleep(down)
                os.kill(pid, signal.SIGCONT)
            self.done[kind] += 1


# -- sampling --------------------------------------------------------------------------------------------------------


def _measure(proc: psutil.Process) -> dict[str, float]:
    with proc.oneshot():
        return {
            "rss_mib": proc.memory_info().rss / 2**20,
            "fds": float(proc.num_fds()),
            "threads": float(proc.num_threads()),
            "connections": float(len(proc.net_connections(kind="tcp"))),
        }


def _roles(bookies: Any) -> dict[str, list[psutil.Process]]:
    """Every bkspark process now, by role."""
    me = psutil.Process()
    roles: dict[str, list[psutil.Process]] = {"client": [me], "spark-jvm": [], "python-workers": [], "stream-runners": []}
    for child in me.children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if child.name() == "java" and "spark" in cmd.lower():
            roles["spark-jvm"].append(child)
        elif "pyspark.sql.streaming" in cmd:  # the stream's planner (its source's reader) and the sink's committer
            roles["stream-runners"].append(child)
        elif "pyspark" in cmd:  # daemons and the workers they fork: tasks, data source lookups and writes
            roles["python-workers"].append(child)
    for i, bookie in enumerate(bookies.bookies):
        pid = bookie.process.pid if bookie.process is not None and bookie.is_alive else None
        roles[f"bookie-{i}"] = [psutil.Process(pid)] if pid else []
    return roles


def sample(bookies: Any, detail: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Each role's metrics summed over its processes (a role with no live process is left out); ``detail`` gets
    each Spark Python process's own [threads, fds, connections] by "<module> <pid>" (to tell which one grows)."""
    out: dict[str, dict[str, float]] = {}
    for role, procs in _roles(bookies).items():
        total = dict.fromkeys(METRICS, 0.0)
        seen = 0
        for proc in procs:
            try:
                measured = _measure(proc)
                if role in ("python-workers", "stream-runners"):
                    detail[f"{proc.cmdline()[-1]} {proc.pid}"] = [measured[k] for k in ("threads", "fds", "connections")]
            except psutil.Error:
                continue
            for key, value in measured.items():
                total[key] += value
            seen += 1
        if seen:
            out[role] = total | {"processes": float(seen)}
    return out


def stream_lag(query: Any) -> float | None:
    """Entries confirmed in the source and not yet planned into a micro-batch (the source's progress report)."""
    progress = query.lastProgress
    if not progress:
        return None
    try:
        latest = json.loads(progress["sources"][0]["latestOffset"])
        return float(latest["lag"]["entries"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def rows_behind(query: Any, writer: "Writer") -> float | None:
    """Rows acknowledged to the writer and not yet in a finished micro-batch (each entry is one row): the stream's
    lag from end to end, where ``stream_lag`` counts only what the last planned batch left behind."""
    progress = query.lastProgress
    if not progress:
        return None
    try:
        ledgers = json.loads(progress["sources"][0]["endOffset"])["ledgers"]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    read = 0
    for key, position in ledgers.items():
        lid = int(key.split(":")[-1])
        read += writer.acked_in.get(lid, 0) if position == "done" else int(position)
    return float(len(writer.acked) - read)


# -- the rule --------------------------------------------------------------------------------------------------------


def grows_without_bound(times: list[float], values: list[float], floor: float) -> tuple[bool, str]:
    """The growth rule of the module docstring: (verdict, the figures it rests on)."""
    if not times:
        return False, "no samples"
    start, end = times[0], times[-1]
    cut = start + WARM_UP * (end - start)
    kept = [(t, v) for t, v in zip(times, values) if t >= cut]
    if len(kept) < 4:
        return False, "too few samples after the warm-up"
    middle = kept[0][0] + (kept[-1][0] - kept[0][0]) / 2
    first = max(v for t, v in kept if t < middle)
    second = max(v for t, v in kept if t >= middle)
    rise = second - first
    verdict = rise > max(GROWTH_TOLERANCE * first, floor)
    return verdict, f"peak {first:.1f} then {second:.1f}"


def judge(samples: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    series: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    for s in samples:
        for role, metrics in s["roles"].items():
            for key in METRICS:
                ts, vs = series.setdefault((role, key), ([], []))
                ts.append(s["t"])
                vs.append(metrics[key])
        for name in ("lag", "behind"):
            if s.get(name) is not None:
                ts, vs = series.setdefault(("stream", f"{name}_entries"), ([], []))
                ts.append(s["t"])
                vs.append(s[name])
    verdicts = {}
    for (role, key), (ts, vs) in sorted(series.items()):
        grows, why = grows_without_bound(ts, vs, FLOORS[key])
        verdicts[f"{role}/{key}"] = {"grows": grows, "why": why, "first": vs[0], "last": vs[-1], "max": max(vs)}
    return verdicts


# -- the picture -----------------------------------------------------------------------------------------------------


def draw(samples: list[dict[str, Any]], faults: list[tuple[float, str]], png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [*METRICS, "lag_entries"]
    labels = {"rss_mib": "RSS (MiB)", "fds": "open fds", "threads": "threads", "connections": "TCP connections",
              "lag_entries": "stream lag (rows)"}
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 13), sharex=True)
    roles = sorted({r for s in samples for r in s["roles"]})
    for ax, key in zip(axes, panels):
        if key == "lag_entries":
            for name, label in (("behind", "acknowledged, not yet in the sink"), ("lag", "left by the last planned batch")):
                pts = [(s["t"] / 60, s[name]) for s in samples if s.get(name) is not None]
                if pts:
                    ax.plot(*zip(*pts), label=label, linewidth=1)
            ax.legend(fontsize=7, loc="upper left")
        else:
            for role in roles:
                pts = [(s["t"] / 60, s["roles"][role][key]) for s in samples if role in s["roles"]]
                ax.plot(*zip(*pts), label=role, linewidth=1)
        for t, _kind in faults:
            ax.axvline(t / 60, color="grey", alpha=0.25, linewidth=0.8)
        ax.set_ylabel(labels[key])
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=4, loc="upper left")
    axes[-1].set_xlabel("minutes (grey lines: faults)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=80)


# -- the run ---------------------------------------------------------------------------------------------------------


def read_dataset(spark: Any, uri: str) -> list[str]:
    try:
        df = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", DATASET).load()
        return [bytes(r.payload).decode() for r in df.select("payload").collect()]
    except Exception as exc:  # noqa: BLE001 - nothing committed yet
        if "BOOKKEEPER_DATASET_NOT_FOUND" in str(exc):
            return []
        raise


def run(args: argparse.Namespace) -> int:
    seconds = args.minutes * 60
    with Cluster() as cluster:
        uri = cluster.new_root("soak")
        bookies = cluster.python_bookies(uri, 4, "soak")
        spark = spark_session(2, "bkspark-soak")
        client_opts = {f"bookkeeper.{k}": str(v) for k, v in CLIENT_CONF.items()}
        source = spark.readStream.format("bookkeeper").option("metadataServiceUri", uri)
        source = source.option("ledgers", f"{SOURCE_BASE}-{SOURCE_BASE + 10**6}").option("maxEntriesPerTrigger", "5000")
        for key, value in client_opts.items():
            source = source.option(key, value)
        sink = source.load().select("payload").writeStream.format("bookkeeper")
        sink = sink.option("metadataServiceUri", uri).option("dataset", DATASET)
        sink = sink.option("checkpointLocation", str(cluster.base / "checkpoint"))
        for key, value in client_opts.items():
            sink = sink.option(key, value)
        writer = Writer(uri, args.rate)
        faults = Faults(bookies, args.fault_every, args.seed)
        fault_times: list[tuple[float, str]] = []
        samples: list[dict[str, Any]] = []
        batch_counts: list[tuple[float, int | str]] = []
        query_failures: list[tuple[float, str]] = []
        writer.thread.start()
        query = sink.trigger(processingTime="2 seconds").start()
        t0 = time.monotonic()

        def keep_running(query: Any) -> Any:
            """As an operator would: a failed query starts again from its checkpoint (exactly once across it)."""
            if query.exception() is None:
                return query
            error = str(query.exception()).splitlines()[0][:300]
            _log(f"the streaming query failed ({error}); starting it again from its checkpoint")
            query_failures.append((round(time.monotonic() - t0, 1), error))
            if len(query_failures) > 5:
                raise RuntimeError(f"the streaming query failed {len(query_failures)} times: {query_failures}")
            return sink.trigger(processingTime="2 seconds").start()

        faults.thread.start()
        next_batch = args.batch_every
        seen_faults = 0
        try:
            while (now := time.monotonic() - t0) < seconds:
                query = keep_running(query)
                total = sum(faults.done.values())
                if total > seen_faults:
                    fault_times.append((now, "fault"))
                    seen_faults = total
                progress = query.lastProgress
                detail: dict[str, list[float]] = {}
                samples.append({"t": round(now, 1), "roles": sample(bookies, detail), "lag": stream_lag(query),
                                "behind": rows_behind(query, writer), "acked": len(writer.acked),
                                "batch": progress["batchId"] if progress else None, "workers": detail})
                if now >= next_batch:
                    try:
                        count: int | str = len(read_dataset(spark, uri))
                    except Exception as exc:  # noqa: BLE001 - recorded: a batch job may fail under faults
                        count = f"failed: {str(exc).splitlines()[0][:200]}"
                    batch_counts.append((round(now, 1), count))
                    _log(f"batch job: the dataset holds {count} rows; {len(writer.acked)} acknowledged")
                    next_batch += args.batch_every
                time.sleep(args.sample_every)
        finally:
            faults.stop.set()
            writer.stop.set()
            faults.thread.join(60)
            writer.thread.join(120)
        _log(f"writer stopped: {len(writer.acked)} rows acknowledged in {writer.ledgers} ledgers; catching up")
        for i in range(len(bookies.bookies)):
            if not bookies.bookies[i].is_alive:
                bookies.start(i, timeout=120)
        deadline = time.monotonic() + 600
        rows: list[str] = []
        while time.monotonic() < deadline:
            query = keep_running(query)
            rows = read_dataset(spark, uri)
            if writer.acked <= set(rows) and (stream_lag(query) or 0) == 0:
                break
            time.sleep(5)
        time.sleep(10)  # one more trigger: nothing should change
        query.stop()
        rows = read_dataset(spark, uri)
        counts = Counter(rows)
        missing = sorted(writer.acked - counts.keys())
        duplicated = sorted(r for r, c in counts.items() if c > 1)
        phantom = sorted(counts.keys() - writer.acked - writer.unknown)
        verdicts = judge(samples)
        growing = sorted(k for k, v in verdicts.items() if v["grows"])
        result = {
            "minutes": args.minutes,
            "command": " ".join(["python -m bench.soak", *sys.argv[1:]]),
            "rows_acknowledged": len(writer.acked),
            "rows_unknown": len(writer.unknown),
            "rows_in_dataset": len(rows),
            "ledgers_written": writer.ledgers,
            "writer_failures": writer.failures,
            "faults": dict(faults.done),
            "batch_jobs": batch_counts,
            "query_restarts": query_failures,
            "missing": len(missing),
            "duplicated": len(duplicated),
            "phantom": len(phantom),
            "examples": {"missing": missing[:5], "duplicated": duplicated[:5], "phantom": phantom[:5]},
            "growing": growing,
            "verdicts": verdicts,
            "max_lag_entries": max((s["lag"] for s in samples if s.get("lag") is not None), default=None),
            "max_rows_behind": max((s["behind"] for s in samples if s.get("behind") is not None), default=None),
            "samples": samples,
        }
        title = (f"bkspark soak, {args.minutes} min: {len(writer.acked)} rows acknowledged, {len(missing)} missing, "
                 f"{len(duplicated)} duplicated; faults {dict(faults.done)}")
        draw(samples, fault_times, Path(args.png), title)
        spark.stop()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    summary = {k: v for k, v in result.items() if k not in ("samples", "verdicts")}
    print(json.dumps(summary, indent=1))
    for key, v in verdicts.items():
        print(f"  {key:32} {'GROWS' if v['grows'] else 'flat '}  {v['why']}  (first {v['first']:.1f}, last {v['last']:.1f})")
    ok = not (missing or duplicated or phantom or growing)
    print("soak: PASS" if ok else "soak: FAIL", flush=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=50.0, help="rows a second the writer appends")
    p.add_argument("--fault-every", type=float, default=40.0)
    p.add_argument("--batch-every", type=float, default=180.0)
    p.add_argument("--sample-every", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="bench/results/soak.json")
    p.add_argument("--png", default="bench/results/soak.png")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
