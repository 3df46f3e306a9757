"""Shared plumbing of the benchmarks: servers, the two benchmark clients, machine facts, result tables.

Every benchmark in ``bench/`` runs side by side in one process tree: one ZooKeeper, the bookies it needs, and
the clients as separate processes (the Java one is ``tools/java/.../BenchClient.java``, ours is
``python -m bench.pyclient``), so that neither client shares an interpreter, a GIL or a JIT with the harness.
Both clients print one JSON object per run; this module starts them, collects the objects and prints tables
with ratios.  Figures are never written in by hand: ``Report`` prints each with the command that produced it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `python bench/x.py` as well as `python -m bench.x`
    sys.path.insert(0, str(REPO_ROOT))

import tests.harness.java_bookkeeper as _jbk  # noqa: E402
from tests.harness.java import JVM_OPTS, java_executable  # noqa: E402
from tests.harness.java_bookkeeper import DEFAULT_BK_VERSION, JavaBookieCluster, cache_dir, write_log4j2  # noqa: E402
from tests.harness.process import HarnessError, kill_all  # noqa: E402
from tests.harness.zookeeper import ZooKeeperServer, init_new_cluster  # noqa: E402

__all__ = [
    "BenchError",
    "JAVA_BENCH_JVM",
    "JAVA_BOOKIE_CONF",
    "JAVA_BOOKIE_JVM",
    "REPO_ROOT",
    "Cluster",
    "Report",
    "Unavailable",
    "add_common_args",
    "command_line",
    "java_bench",
    "machine_facts",
    "py_bench",
    "ratio",
    "spark_session",
    "timed",
]

#: JVM flags for the Java benchmark client and the Java bookies, appended after the harness's JVM_OPTS (the
#: last occurrence of a flag wins): the harness runs JVMs with C1 only and 256 MiB heaps to start fast in tests;
#: a benchmark gives Java its full JIT (C2) and room, as a production deployment would.
JAVA_BENCH_JVM: tuple[str, ...] = ("-XX:TieredStopAtLevel=4", "-Xms256m", "-Xmx1g", "-XX:MaxDirectMemorySize=512m")
JAVA_BOOKIE_JVM: tuple[str, ...] = ("-XX:TieredStopAtLevel=4", "-Xms256m", "-Xmx1g", "-XX:MaxDirectMemorySize=512m")

#: bk_server.conf overrides for the Java bookies: the harness's test caches (16 MiB) raised to the Python
#: bookie's defaults (64 MiB write cache, 64 MiB read-ahead cache), so both bookies cache the same amount; and a
#: read-ahead of 1,000 entries (BookKeeper's default: 100), the entries of one of the benchmarks' batch reads, as
#: the Python bookie's own read-ahead grows to 1,600 entries on a scan (docs/bookie.md, "Reads"; BENCHMARKS.md,
#: "The Spark writer's payloads as one buffer").
JAVA_BOOKIE_CONF: dict[str, Any] = {
    "dbStorage_writeCacheMaxSizeMb": 64,
    "dbStorage_readAheadCacheMaxSizeMb": 64,
    "dbStorage_readAheadCacheBatchSize": 1000,
}


class BenchError(RuntimeError):
    """A benchmark step failed (the message says which and why)."""


class Unavailable(BenchError):
    """A part of the benchmark cannot run here (client, bookie or Spark not ready); the others still run."""


# -- machine facts -------------------------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        return (out.stderr or out.stdout).splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def _mem_total_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def _busy_processes() -> int:
    """Processes of other users/sessions in state R (running) right now, a rough measure of concurrent load."""
    n = 0
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        state = stat.rsplit(")", 1)[-1].split()[0]
        if state == "R":
            n += 1
    return n


def code_version() -> str:
    """The commit, plus a fingerprint of the working tree's client and bookie sources (the checkout is shared
    and changes between runs: two runs with the same fingerprint measured the same code)."""
    import hashlib

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT,
                              timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        head = "?"
    h = hashlib.sha1()
    for top in ("bkspark", "bookie_server", "bench", "tools/java/src"):
        for path in sorted((REPO_ROOT / top).rglob("*")):
            if path.suffix in (".py", ".java") and path.is_file():
                h.update(str(path.relative_to(REPO_ROOT)).encode())
                h.update(path.read_bytes())
    return f"{head} + tree {h.hexdigest()[:10]}"


def machine_facts() -> dict[str, Any]:
    """What a reader needs to judge a figure: cores, CPU, memory, load, software versions, time."""
    load = os.getloadavg()
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "mem_gib": round(_mem_total_gib(), 1),
        "loadavg_1_5_15": [round(x, 2) for x in load],
        "running_processes": _busy_processes(),
        "python": platform.python_version(),
        "java": _java_version(),
        "kernel": platform.release(),
        "code": code_version(),
    }


# -- results ---------------------------------------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    """a ÷ b, or None when either side is missing or b is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, dict):  # e.g. CPU per record by kind of process: "Spark JVM 5.73, Kafka JVM 4.87"
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    if isinstance(v, list):  # e.g. each round's value: "127,237 / 135,399 / 120,493"
        return " / ".join(_fmt(x) for x in v)
    return str(v)


def _fmt_ratio(r: float) -> str:
    return f"{r:.3f}" if abs(r) < 0.1 else f"{r:.2f}"


@dataclass
class Report:
    """One benchmark's figures, ratios and failures, printed as a text table and as Markdown."""

    name: str
    title: str
    command: str
    params: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    ratios: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    machine_before: dict[str, Any] = field(default_factory=dict)
    machine_after: dict[str, Any] = field(default_factory=dict)
    #: Every JSON result the clients printed, in run order (provenance of the medians in `rows`).
    raw: list[dict[str, Any]] = field(default_factory=list)

    def row(self, what: str, value: float | None, unit: str, **extra: Any) -> None:
        self.rows.append({"what": what, "value": value, "unit": unit, **extra})

    def add_ratio(self, what: str, num: float | None, den: float | None, goal: float | None = None) -> float | None:
        r = ratio(num, den)
        met = None if r is None or goal is None else r >= goal
        self.ratios.append({"what": what, "ratio": r, "goal": goal, "met": met})
        return r

    def fail(self, part: str, exc: BaseException | str) -> None:
        msg = f"{part}: {exc}" if not isinstance(exc, str) else f"{part}: {exc}"
        self.failures.append(msg)
        print(f"[{self.name}] FAILED {msg}", file=sys.stderr, flush=True)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "command": self.command,
            "params": self.params,
            "rows": self.rows,
            "ratios": self.ratios,
            "failures": self.failures,
            "notes": self.notes,
            "machine_before": self.machine_before,
            "machine_after": self.machine_after,
            "raw": self.raw,
        }

    def text(self) -> str:
        lines = [f"== {self.title} ==", f"command: {self.command}"]
        mb, ma = self.machine_before, self.machine_after
        if mb:
            lines.append(
                f"machine: {mb.get('cores')} cores ({mb.get('cpu')}), {mb.get('mem_gib')} GiB; "
                f"load avg before {mb.get('loadavg_1_5_15')}, after {ma.get('loadavg_1_5_15')}; "
                f"{mb.get('python')} / {mb.get('java')}; {mb.get('date')}"
            )
        if self.params:
            lines.append("params: " + ", ".join(f"{k}={v}" for k, v in self.params.items()))
        if self.rows:
            w = max(len(r["what"]) for r in self.rows)
            lines.append("")
            for r in self.rows:
                extra = "  ".join(
                    f"{k}={_fmt(v)}" for k, v in r.items() if k not in ("what", "value", "unit") and v is not None
                )
                lines.append(f"  {r['what']:<{w}}  {_fmt(r['value']):>12} {r['unit']:<10} {extra}")
        if self.ratios:
            w = max(len(r["what"]) for r in self.ratios)
            lines.append("")
            for r in self.ratios:
                goal = "" if r["goal"] is None else f"  goal >= {r['goal']}x: {'met' if r['met'] else 'NOT met'}"
                val = "n/a" if r["ratio"] is None else f"{_fmt_ratio(r['ratio'])}x"
                lines.append(f"  {r['what']:<{w}}  {val:>8}{goal}")
        for n in self.notes:
            lines.append(f"note: {n}")
        for f in self.failures:
            lines.append(f"FAILED: {f}")
        return "\n".join(lines)

    def markdown(self) -> str:
        mb, ma = self.machine_before, self.machine_after
        out = [f"### {self.title}", ""]
        out.append(f"Command: `{self.command}`  ")
        if mb:
            out.append(
                f"Run: {mb.get('date')}; machine: {mb.get('cores')} cores ({mb.get('cpu')}), {mb.get('mem_gib')} GiB; "
                f"load average (1/5/15 min) {mb.get('loadavg_1_5_15')} before, {ma.get('loadavg_1_5_15')} after; "
                f"Python {mb.get('python')}, {mb.get('java')}."
                + (f" Code: `{mb['code']}`." if mb.get("code") else "")
            )
        if self.params:
            out.append("")
            out.append("Parameters: " + ", ".join(f"`{k}={v}`" for k, v in self.params.items()))
        if self.rows:
            extras: list[str] = []
            for r in self.rows:
                for k in r:
                    if k not in ("what", "value", "unit") and k not in extras:
                        extras.append(k)
            labels = {"mb_s": "MB/s", "p50_ms": "p50 ms", "p99_ms": "p99 ms",
                      "cpu_us_per_record": "CPU µs per record", "rounds": "each round"}
            heads = [labels.get(k, k) for k in extras]
            out += ["", "| measurement | value | unit | " + " | ".join(heads) + (" |" if extras else "")]
            out.append("|---|---:|---|" + "---|" * len(extras))
            for r in self.rows:
                cells = [_fmt(r.get(k)) if r.get(k) is not None else "" for k in extras]
                out.append(f"| {r['what']} | {_fmt(r['value'])} | {r['unit']} | " + " | ".join(cells) + (" |" if extras else ""))
        if self.ratios:
            out += ["", "| ratio | value | goal |", "|---|---:|---|"]
            for r in self.ratios:
                val = "n/a" if r["ratio"] is None else f"{_fmt_ratio(r['ratio'])}×"
                goal = "" if r["goal"] is None else f"≥ {r['goal']}× ({'met' if r['met'] else 'not met'})"
                out.append(f"| {r['what']} | {val} | {goal} |")
        if self.notes:
            out.append("")
            out += [f"- {n}" for n in self.notes]
        if self.failures:
            out.append("")
            out += [f"- **Not measured**: {f}" for f in self.failures]
        return "\n".join(out) + "\n"

    def finish(self, json_path: str | None = None) -> None:
        print()
        print(self.text(), flush=True)
        if json_path:
            Path(json_path).parent.mkdir(parents=True, exist_ok=True)
            Path(json_path).write_text(json.dumps(self.as_dict(), indent=1) + "\n")


def median_run(runs: list[dict[str, Any]], key: str = "entries_per_sec") -> dict[str, Any] | None:
    """The run whose ``key`` is the median (lower median for an even count); None when there is none."""
    if not runs:
        return None
    ordered = sorted(runs, key=lambda r: float(r[key]))
    return ordered[(len(ordered) - 1) // 2]


def medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the median of the rounds' figures (every round has the same keys)."""
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


def run_main(
    make_parser: Callable[[], argparse.ArgumentParser],
    run: Callable[[argparse.Namespace], "Report"],
    argv: list[str] | None,
) -> int:
    """The ``main`` of every side-by-side benchmark: parse, run, print the report; 1 if any part failed."""
    args = make_parser().parse_args(argv)
    report = run(args)
    report.finish(args.json)
    return 1 if report.failures else 0


def command_line(module: str) -> str:
    """The command that reproduces this run, as typed from the repository root."""
    return " ".join(["python", "-m", module, *map(shlex.quote, sys.argv[1:])])


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", help="where servers keep their data (default: a fresh temporary directory)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs) afterwards")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument("--bk-version", default=DEFAULT_BK_VERSION, help="Apache BookKeeper version of the Java side")
    p.add_argument(
        "--no-make",
        action="store_true",
        help="use the BookKeeper jars already in .cache without running `make jars` (when make cannot run)",
    )


def add_spark_job_args(p: argparse.ArgumentParser, rounds: int) -> None:
    """The arguments of a benchmark of Spark jobs on one bookie: rows, payload size, bookie kind, rounds."""
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--bookie-kind", choices=("java", "python"), default="java")
    p.add_argument("--rounds", type=int, default=rounds)


def payload_frame(spark: Any, rows: int, size: int, partitions: int, column: str = "payload") -> Any:
    """``rows`` rows of one binary column of ``size`` bytes in ``partitions`` Spark partitions (the rows a
    benchmark writes)."""
    from pyspark.sql import functions as F

    return spark.range(0, rows, 1, partitions).select(F.expr(f"cast(repeat('x', {size}) as binary)").alias(column))


# -- clusters --------------------------------------------------------------------------------------------------------


class Cluster(contextlib.ExitStack):
    """One ZooKeeper and any number of ledger roots, each with its bookies; everything stops on exit."""

    def __init__(self, workdir: str | None = None, keep: bool = False, make_jars: bool = True) -> None:
        super().__init__()
        self.make_jars = make_jars
        if workdir:
            self.base = Path(workdir)
            self.base.mkdir(parents=True, exist_ok=True)
        else:
            self.base = Path(tempfile.mkdtemp(prefix="bkspark-bench-"))
            if not keep:
                import shutil

                self.callback(shutil.rmtree, self.base, True)
        self.callback(kill_all)  # the harness's safety net: nothing we started outlives us
        self.zk = ZooKeeperServer(self.base / "zookeeper")
        self._roots = 0
        self._java_runs = 0
        self._classes: dict[str, Path] = {}

    def __enter__(self) -> "Cluster":
        super().__enter__()
        try:
            self.zk.start()
        except BaseException:
            self.close()
            raise
        self.callback(self.zk.stop)
        return self

    def new_root(self, name: str) -> str:
        """A fresh ledgers root formatted like `bookkeeper shell initnewcluster`; returns its metadata URI."""
        self._roots += 1
        path = f"/bench-{name}-{self._roots}"
        zk = self.zk.client()
        try:
            init_new_cluster(zk, path)
        finally:
            zk.stop()
            zk.close()
        return f"zk+hierarchical://{self.zk.connect_string}{path}"

    def _jars(self, version: str) -> Path:
        """`.cache/bookkeeper/<version>`, checked; with make_jars=False the harness is told not to run make."""
        vdir = cache_dir() / "bookkeeper" / version
        if not self.make_jars:
            if not (vdir / "lib" / ".ok").is_file():
                raise Unavailable(f"no BookKeeper {version} jars in {vdir / 'lib'}: run `make jars` (without --no-make)")
            _jbk._jars_status.setdefault(version, None)  # the harness then uses the jars as they are
        return vdir

    def bench_classes(self, version: str) -> Path:
        """Where BenchClient.class is: make's classes/ when up to date, else compiled here with javac."""
        vdir = self._jars(version)
        if version in self._classes:
            return self._classes[version]
        src_dir = REPO_ROOT / "tools" / "java" / "src" / "main" / "java"
        main_src = src_dir / "bkspark" / "tools" / "BenchClient.java"
        newest = max(p.stat().st_mtime for p in (src_dir / "bkspark" / "tools").glob("*.java"))
        made = vdir / "classes" / "bkspark" / "tools" / "BenchClient.class"
        if self.make_jars and not made.is_file():
            _jbk.ensure_jars(version)
        if made.is_file() and made.stat().st_mtime >= newest:
            out = vdir / "classes"
        else:
            out = self.base / "bench-classes" / version
            out.mkdir(parents=True, exist_ok=True)
            proc = subprocess.run(
                ["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(out), "-sourcepath", str(src_dir),
                 "-cp", str(vdir / "lib" / "*"), str(main_src)],
                capture_output=True, text=True, timeout=300,
            )
            if proc.returncode != 0:
                raise Unavailable(f"BenchClient.java does not compile against BookKeeper {version}:\n{proc.stderr[-3000:]}")
        self._classes[version] = out
        return out

    def run_java(self, version: str, main_class: str, args: Sequence[str], uri: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run a tools/java program with the benchmark JVM flags; its log goes to a file, stdout is its own."""
        classes = self.bench_classes(version)
        jars = sorted(str(p) for p in (cache_dir() / "bookkeeper" / version / "lib").glob("*.jar"))
        self._java_runs += 1
        run_dir = self.base / "java-runs" / f"{self._java_runs:03d}-{main_class.rsplit('.', 1)[-1]}"
        run_dir.mkdir(parents=True, exist_ok=True)
        log4j = write_log4j2(run_dir / "log4j2.properties", run_dir / "java.log", console=True, console_target="SYSTEM_ERR")
        argv = [
            java_executable(), *JVM_OPTS, f"-Dlog4j.configurationFile={log4j}", f"-Dlog4j2.configurationFile={log4j}",
            "-Dlog4j2.disable.jmx=true", *JAVA_BENCH_JVM, f"-Dbkspark.metadataServiceUri={uri}",
            "-cp", os.pathsep.join([str(classes), *jars]), main_class, *args,
        ]
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=run_dir, start_new_session=True)
        except subprocess.TimeoutExpired as exc:
            raise BenchError(f"{main_class} {' '.join(args[:1])} timed out after {timeout}s") from exc

    def java_bookies(self, uri: str, n: int, version: str, name: str) -> JavaBookieCluster:
        """n Java bookies (fsync journal) of `version` registered under `uri`, started."""
        self._jars(version)
        cluster = JavaBookieCluster(
            version=version,
            metadata_service_uri=uri,
            base_dir=self.base / f"java-{name}",
            bookies=n,
            journal_sync_data=True,
            conf_overrides=JAVA_BOOKIE_CONF,
            jvm_args=JAVA_BOOKIE_JVM,
        )
        cluster.start_all()
        self.callback(cluster.close)
        return cluster

    def one_bookie(self, kind: str, version: str) -> str:
        """A fresh ledgers root served by one bookie of ``kind`` ("java": Apache BookKeeper ``version``, or
        "python"); returns its metadata URI."""
        uri = self.new_root(kind)
        if kind == "java":
            self.java_bookies(uri, 1, version, "java")
        else:
            self.python_bookies(uri, 1, "python")
        return uri

    def python_bookies(self, uri: str, n: int, name: str, bookie_ids: Sequence[str | None] | None = None) -> Any:
        """n Python bookies (bookie_server, fsync journal) registered under `uri` (with BookieIds ``bookie_ids``
        when given, e.g. their fault proxies' addresses), started."""
        try:
            from tests.harness.python_bookie import PythonBookieCluster
        except ImportError as exc:
            raise Unavailable(f"the Python bookie harness is missing ({exc})") from exc
        try:
            import bookie_server.__main__  # noqa: F401
        except Exception as exc:  # noqa: BLE001 - any import failure means the bookie is not ready
            raise Unavailable(f"bookie_server does not import: {exc!r}") from exc
        cluster = PythonBookieCluster(uri, self.base / f"python-{name}", bookies=n, bookie_ids=bookie_ids,
                                      journal_sync_data=True)
        try:
            cluster.start_all()
        except HarnessError as exc:
            tail = cluster.log_tail(0, 30) if cluster.bookies else ""
            raise Unavailable(f"the Python bookie did not start: {exc}\n{tail}") from exc
        self.callback(cluster.close)
        return cluster


# -- the two benchmark clients ---------------------------------------------------------------------------------------


def _last_json(stdout: str, wanted: Sequence[str]) -> dict[str, Any] | None:
    found = None
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and obj.get("event") in (*wanted, "error", "unsupported"):
            found = obj
    return found


def _check(result: dict[str, Any] | None, what: str, proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    if result is None:
        raise BenchError(
            f"{what}: no result (exit {proc.returncode})\nstdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-3000:]}"
        )
    if result.get("event") == "unsupported":
        raise Unavailable(f"{what}: {result.get('message')}")
    if result.get("event") == "error":
        raise BenchError(f"{what}: {result.get('error')}: {result.get('message')}\nstderr:\n{proc.stderr[-2000:]}")
    return result


def java_bench(
    cluster: Cluster, version: str, uri: str, command: str, *, timeout: float = 1800.0, **opts: Any
) -> dict[str, Any]:
    """Run `BenchClient <command> --opt value...` (Apache BookKeeper's Java client) and return its JSON result."""
    args = [command]
    for k, v in opts.items():
        args += [f"--{k.replace('_', '-')}", str(v).lower() if isinstance(v, bool) else str(v)]
    print(f"  [java {version}] BenchClient {' '.join(args)}", flush=True)
    try:
        proc = cluster.run_java(version, "bkspark.tools.BenchClient", args, uri, timeout)
    except HarnessError as exc:
        raise BenchError(f"Java BenchClient {command}: {exc}") from exc
    return _check(_last_json(proc.stdout, (command,)), f"Java BenchClient {command}", proc)


def py_bench(
    uri: str, command: str, *, timeout: float = 1800.0, tree: Path | None = None, **opts: Any
) -> dict[str, Any]:
    """Run `python -m bench.pyclient <command> ...` (the bkspark client, its own process) and return its JSON.

    ``tree`` names another checkout of the repository (e.g. an older commit's worktree): the client process then
    runs there with PYTHONPATH naming it, so it imports that tree's ``bkspark`` instead of this one."""
    args = [command, "--zk", uri]
    for k, v in opts.items():
        args += [f"--{k.replace('_', '-')}", str(v).lower() if isinstance(v, bool) else str(v)]
    argv = [sys.executable, "-m", "bench.pyclient", *args]
    root = REPO_ROOT if tree is None else Path(tree).resolve()
    env = dict(os.environ, PYTHONPATH=str(root))
    print(f"  [bkspark{'' if tree is None else ' @ ' + str(root)}] python -m bench.pyclient {' '.join(args)}", flush=True)
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=root, env=env)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"bkspark client {command} timed out after {timeout}s") from exc
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = _check(_last_json(proc.stdout, (command,)), f"bkspark client {command}", proc)
    # the client process's CPU time (user + system, start-up and warm-up included): what the load cannot inflate
    result["process_cpu_s"] = round(
        cpu_after.ru_utime - cpu_before.ru_utime + cpu_after.ru_stime - cpu_before.ru_stime, 3
    )
    return result


@contextlib.contextmanager
def timed(label: str) -> Iterator[None]:
    t0 = time.monotonic()
    print(f"-- {label}", flush=True)
    yield
    print(f"   ({time.monotonic() - t0:.1f}s)", flush=True)


def spark_session(cores: int, app: str, jars: Sequence[str] = (), driver_memory: str = "1g",
                  java_options: str = "") -> Any:
    """A ``local[cores]`` SparkSession on loopback whose Python workers run this interpreter, with the
    ``bookkeeper`` data source registered, ``jars`` (e.g. Spark's Kafka connector) on its classpath and
    ``java_options`` added to its JVM's command line."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise Unavailable(f"pyspark is not installed ({exc})") from exc
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.driver.memory", driver_memory)
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from bkspark.datasource.source import BookKeeperDataSource

    spark.dataSource.register(BookKeeperDataSource)
    return spark
