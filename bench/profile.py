"""Where the time goes: sampling profiles of the bkspark client and of the Python bookie under benchmark load.

    python -m bench.profile [--entries 30000] [--rate 250] [--out bench/results/profiles]

Needs py-spy (``pip install py-spy``; it samples every thread, which matters: the client's work runs on its
event-loop thread, where ``python -m cProfile`` sees nothing).  Three profiles, each under the load of the
benchmarks (1 KiB entries; ensemble 1/1/1 unless ``--ensemble/--write/--ack`` say otherwise):

* client, adds: ``py-spy record -- python -m bench.pyclient write`` against the Java bookies;
* client, Arrow ``read_batches``, batched reads and single reads of that ledger, the same way;
* Python bookie: ``py-spy record --pid <bookie>`` while the Java BenchClient (no Python in the client)
  writes and then batch-reads against it.

Prints, for each, the share of on-CPU samples per area (our packages, asyncio, the standard library ...) and the
top functions by self time; waits in ``select``/``Condition.wait`` are left out of the shares.  Raw
collapsed stacks (flamegraph input) are kept in --out.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import (
    REPO_ROOT,
    BenchError,
    Cluster,
    Unavailable,
    add_common_args,
    command_line,
    java_bench,
    machine_facts,
    timed,
)

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
#: Leaf frames that are waiting, not working (left out of the shares).
IDLE = {
    "EpollSelector.select",
    "select",
    "Condition.wait",
    "Event.wait",
    "_worker",
    "Thread._wait_for_tstate_lock",
    "Thread.join",
    "SelectSelector.select",
    "poll",
    "sleep",
}

AREAS = (
    ("bkspark/protocol/", "bkspark.protocol (codec, digests)"),
    ("bkspark/client/", "bkspark.client"),
    ("bkspark/metadata/", "bkspark.metadata"),
    ("bkspark/placement/", "bkspark.placement"),
    ("bookie_server/", "bookie_server"),
    ("bench/", "bench harness"),
    ("asyncio/", "asyncio"),
    ("kazoo/", "kazoo (ZooKeeper)"),
    ("lmdb", "lmdb"),
    ("concurrent/", "concurrent.futures"),
    ("threading.py", "threading"),
    ("selectors.py", "selectors"),
    ("socket.py", "socket"),
    ("site-packages/", "other libraries"),
)


def area_of(path: str) -> str:
    for key, name in AREAS:
        if key in path:
            return name
    if path.startswith("<") or "/" not in path:
        return "builtins / C code"
    return "standard library (other)"


def summarize(raw: Path, top: int = 12) -> dict[str, Any]:
    """Shares per area and top functions by self time, from py-spy's collapsed stacks."""
    total = 0
    idle = 0
    startup = 0
    by_area: collections.Counter[str] = collections.Counter()
    by_func: collections.Counter[str] = collections.Counter()
    collector = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        # With py-spy --native the leaves are C functions: charge them to the Python frame that called them,
        # as a profile without --native does, and count the cyclic collector's samples apart.
        python_frames = [f for f in frames if ".py:" in f or ".py)" in f]
        leaf = python_frames[-1] if python_frames else frames[-1]
        m = _FRAME.match(leaf)
        func, path = (m.group("func"), m.group("file")) if m else (leaf, "")
        total += n
        if "_find_and_load" in stack or "_call_with_frames_removed" in stack:
            startup += n  # interpreter start-up and imports, not the measured work
            continue
        if func in IDLE or func.rsplit(".", 1)[-1] in ("select", "wait", "acquire"):
            idle += n
            continue
        if any(f.startswith("gc_collect") for f in frames):
            collector += n
        by_area[area_of(path)] += n
        short = path.split("site-packages/")[-1] if "site-packages/" in path else path
        by_func[f"{func} ({short})"] += n
    busy = total - idle - startup
    pct = (lambda n: round(100.0 * n / busy, 1)) if busy else (lambda n: 0.0)
    return {
        "samples": total,
        "busy_samples": busy,
        "startup_samples": startup,
        "areas": [(a, pct(n)) for a, n in by_area.most_common()],
        "functions": [(f, pct(n)) for f, n in by_func.most_common(top)],
        #: share of busy samples inside the cyclic garbage collector (only a --native profile sees it)
        "collector": pct(collector),
    }


def render(title: str, command: str, s: dict[str, Any]) -> tuple[str, str]:
    counts = f"{s['busy_samples']} on-CPU samples of {s['samples']} ({s['startup_samples']} in start-up/imports, left out)"
    text = [f"-- {title}", f"   {command}", f"   {counts}"]
    md = [f"#### {title}", "", f"`{command}`: {counts}.", ""]
    md += ["| area | share of busy samples |", "|---|---:|"]
    for a, p in s["areas"]:
        text.append(f"   {p:5.1f}%  {a}")
        md.append(f"| {a} | {p}% |")
    if s.get("collector"):
        text.append(f"   {s['collector']:5.1f}%  of them inside the cyclic garbage collector (gc_collect)")
        md.append(f"\nOf the busy samples, {s['collector']}% are inside the cyclic garbage collector (`gc_collect`).")
    text.append("   top functions by self time:")
    md += ["", "| function (self time) | share |", "|---|---:|"]
    for f, p in s["functions"]:
        text.append(f"   {p:5.1f}%  {f}")
        md.append(f"| `{f}` | {p}% |")
    return "\n".join(text), "\n".join(md) + "\n"


class _Skipped(Exception):
    """A part of the profile that --only leaves out."""


def pyspy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise Unavailable("py-spy is not installed (pip install py-spy)")
    return found


def profile_client(
    spy: str, out: Path, name: str, uri: str, pyargs: list[str], rate: int, native: bool = False,
    tree: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """py-spy over one ``bench.pyclient`` run (``native``: C frames too; ``tree``: another checkout's client)."""
    raw = out / f"{name}.txt"
    spy_args = ["record", *(["--native"] if native else []), "--format", "raw", "-o", str(raw), "--rate", str(rate)]
    argv = [spy, *spy_args, "--", sys.executable, "-m", "bench.pyclient", *pyargs]
    cmd = " ".join(["py-spy", *spy_args, "--", "python", "-m", "bench.pyclient", *pyargs])
    root = REPO_ROOT if tree is None else Path(tree).resolve()
    if tree is not None:
        cmd = f"(in {root}) {cmd}"
    print(f"  {cmd}", flush=True)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, cwd=root,
                          env=dict(os.environ, PYTHONPATH=str(root)))
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
    if result is None or result.get("event") == "error" or not raw.is_file():
        raise BenchError(f"profiled client run failed (exit {proc.returncode}):\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}")
    return summarize(raw), result, cmd


def profile_bookie(spy: str, out: Path, pid: int, rate: int, load: Any, tag: str = "") -> tuple[dict[str, Any], str]:
    raw = out / f"bookie{tag}.txt"
    argv = [spy, "record", "--format", "raw", "-o", str(raw), "--rate", str(rate), "--pid", str(pid)]
    cmd = f"py-spy record --format raw -o {raw} --rate {rate} --pid <python bookie pid>"
    print(f"  {cmd}", flush=True)
    rec = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        load()
    finally:
        rec.send_signal(2)  # SIGINT: py-spy writes its output and exits
        try:
            rec.wait(60)
        except subprocess.TimeoutExpired:
            rec.kill()
    if not raw.is_file():
        raise BenchError(f"py-spy wrote no profile of the bookie: {rec.stderr.read() if rec.stderr else ''}")
    return summarize(raw), cmd


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=30_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    p.add_argument("--out", default=str(REPO_ROOT / "bench" / "results" / "profiles"))
    p.add_argument("--only", choices=("client", "bookie"), help="profile only the client or only the Python bookie")
    p.add_argument("--bulk", type=int, default=0, help="the client's adds with append_many of this many entries")
    p.add_argument("--tag", default="", help="suffix of the raw stack files' names (e.g. -before, -after)")
    p.add_argument("--ensemble", type=int, default=1, help="the client profiles' Java bookies and ensemble size")
    p.add_argument("--write", type=int, default=0, help="write quorum of the client profiles (default: ensemble)")
    p.add_argument("--ack", type=int, default=0, help="ack quorum of the client profiles (default: write quorum)")
    p.add_argument("--native", action="store_true",
                   help="client profiles with py-spy --native (C frames: the garbage collector's share shows)")
    p.add_argument("--tree", help="profile another checkout's client (e.g. a `git worktree` of an older commit)")
    add_common_args(p)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_facts()
    texts: list[str] = []
    mds: list[str] = [
        "### Profiles (bench.profile)",
        "",
        f"Command: `{command_line('bench.profile')}`  ",
        f"Run: {machine['date']}; {machine['cores']} cores, load average {machine['loadavg_1_5_15']} at the start; "
        f"code `{machine['code']}`.",
        "",
    ]
    failures: list[str] = []
    try:
        spy = pyspy()
    except Unavailable as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        if args.json:
            Path(args.json).write_text(json.dumps({"markdown": "\n".join(mds) + f"\n- **Not measured**: {exc}\n"}))
        return 1
    with Cluster(args.workdir, args.keep, make_jars=not args.no_make) as cluster:
        java_uri = py_uri = None
        with timed(f"starting {args.ensemble} Java bookie(s) and one Python bookie"):
            java_uri = cluster.new_root("java")
            cluster.java_bookies(java_uri, args.ensemble, args.bk_version, "java")
            try:
                py_uri = cluster.new_root("python")
                py_cluster = cluster.python_bookies(py_uri, 1, "python")
            except Unavailable as exc:
                failures.append(f"Python bookie profile: {exc}")
                py_uri = None
        common = ["--zk", java_uri, "--digest", "CRC32C"]
        quorum = args.write or args.ensemble
        ledger = None
        with timed("client profiles"):
            try:
                if args.only == "bookie":
                    raise _Skipped()
                s, r, cmd = profile_client(
                    spy, out, f"client-write{args.tag}", java_uri,
                    ["write", *common, "--entries", str(args.entries), "--size", str(args.size), "--warmup", "2000",
                     "--bulk", str(args.bulk), "--ensemble", str(args.ensemble), "--write", str(quorum),
                     "--ack", str(args.ack or quorum)],
                    args.rate, args.native, args.tree,
                )
                ledger = r["ledger_id"]
                t, m = render(f"bkspark client, adds ({r['entries_per_sec']:.0f} entries/s under the profiler)", cmd, s)
                texts.append(t)
                mds.append(m)
                for mode in ("arrow", "batch", "single"):
                    s, r, cmd = profile_client(
                        spy, out, f"client-read-{mode}{args.tag}", java_uri,
                        ["read", *common, "--ledger", str(ledger), "--mode", mode, "--passes", "1", "--warmup-passes", "0"],
                        args.rate, args.native, args.tree,
                    )
                    t, m = render(f"bkspark client, {mode} reads ({r['entries_per_sec']:.0f} entries/s under the profiler)", cmd, s)
                    texts.append(t)
                    mds.append(m)
            except _Skipped:
                pass
            except BenchError as exc:
                failures.append(f"client profile: {exc}")
        if py_uri is not None and args.only != "client":
            with timed("Python bookie profile"):
                results: list[dict[str, Any]] = []

                def load() -> None:
                    w = java_bench(cluster, args.bk_version, py_uri, "write", ensemble=1, entries=args.entries,
                                   size=args.size, outstanding=1000, warmup=2000)
                    results.append(w)
                    results.append(java_bench(cluster, args.bk_version, py_uri, "read", ledger=w["ledger_id"],
                                              mode="batch", passes=3, warmup_passes=0))

                try:
                    pid = py_cluster.bookies[0].process.pid
                    s, cmd = profile_bookie(spy, out, pid, args.rate, load, args.tag)
                    rates = ", ".join(f"{r['event']} {float(r['entries_per_sec']):.0f} entries/s" for r in results)
                    t, m = render(f"Python bookie under the Java BenchClient's adds then batched reads ({rates})", cmd, s)
                    texts.append(t)
                    mds.append(m)
                except (BenchError, Unavailable) as exc:
                    failures.append(f"bookie profile: {exc}")
    for f in failures:
        mds.append(f"- **Not measured**: {f}")
    print()
    print("\n\n".join(texts))
    for f in failures:
        print(f"FAILED: {f}")
    print(f"raw stacks (flamegraph.pl / speedscope input): {out}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"name": "profile", "markdown": "\n".join(mds) + "\n", "failures": failures}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
