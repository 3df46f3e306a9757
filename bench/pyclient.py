"""The bkspark client's side of the benchmarks: the same two commands as tools/java BenchClient, same JSON.

    python -m bench.pyclient write --zk URI [--ensemble 1 --write 1 --ack 1] [--digest CRC32C] [--password P]
        --entries N [--size 1024] [--outstanding 1000] [--warmup 0] [--bulk 0]
    python -m bench.pyclient read --zk URI --ledger L [--digest CRC32C] [--password P] [--mode batch|single|arrow]
        [--batch-size 100] [--max-size 1048576] [--passes 1] [--warmup-passes 1]

write: creates a ledger and appends N entries of S bytes with ``append_async`` (at most ``--outstanding`` in
flight: the client's ``maxPendingAdds``), then closes it; ``--warmup W`` first writes W entries to a separate
ledger, not timed, deleted afterwards; ``--bulk B`` appends with ``append_many`` of B entries per call
(latency then per call).  read: opens a closed ledger without recovery and reads entries 0..LAC,
with ``batch_read(start, batch_size, max_size)`` (mode batch, BP-62) or ``read(first, first+batch_size-1)``
(mode single: one request per entry, pipelined by the client), one call at a time as a blocking user does;
a short batch continues from where it stopped.  Mode arrow reads the whole ledger with ``read_batches``
(Arrow batches, several batch requests in flight over every bookie of the ensemble).  Untimed warm-up passes first.

Prints one JSON line (``event`` write/read/error) with entries/s, MB/s (10^6 bytes of payload) and latency
percentiles in milliseconds (per add, per read call).  Run it under a profiler like any program::

    python -m cProfile -o read.prof -m bench.pyclient read --zk URI --ledger 3
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from typing import Any


def percentiles(nanos: list[int]) -> dict[str, float]:
    if not nanos:
        return {}
    s = sorted(nanos)
    n = len(s)
    out = {"mean": round(sum(s) / n / 1e6, 3)}
    for p in (50, 95, 99, 99.9):
        idx = min(n - 1, max(0, math.ceil(p / 100 * n) - 1))
        key = f"p{p:g}"
        out[key] = round(s[idx] / 1e6, 3)
    out["max"] = round(s[-1] / 1e6, 3)
    return out


def _connect(args: argparse.Namespace, **conf: Any) -> Any:
    from bkspark.client import BookKeeper

    return BookKeeper(metadata_service_uri=args.zk, useV2WireProtocol=True, **conf)


def _add_all(lh: Any, data: bytes, n: int, latencies: list[int] | None, bulk: int = 0) -> float:
    """Append n entries, one ``append_async`` each (``bulk`` 0) or ``append_many`` of ``bulk`` entries per call
    (the client's maxPendingAdds bounds the window); ``latencies`` get one value per call; returns seconds."""
    errors: list[BaseException] = []
    done = threading.Event()
    calls = n if bulk <= 0 else (n + bulk - 1) // bulk
    remaining = [calls]
    lock = threading.Lock()
    perf = time.perf_counter_ns

    def make_cb(i: int, t0: int) -> Any:
        def cb(fut: Any) -> None:
            if latencies is not None:
                latencies[i] = perf() - t0
            exc = fut.exception()
            if exc is not None:
                errors.append(exc)
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

        return cb

    start = time.perf_counter()
    for i in range(calls):
        if errors:
            break
        t0 = perf()
        fut = lh.append_async(data) if bulk <= 0 else lh.append_many([data] * min(bulk, n - i * bulk))
        fut.add_done_callback(make_cb(i, t0))
    if not errors:
        done.wait(600)
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    if not done.is_set():
        raise TimeoutError("adds did not complete in 600 s")
    return elapsed


def cmd_write(args: argparse.Namespace) -> dict[str, Any]:
    data = bytes((ord("a") + i % 26) for i in range(args.size))
    e, w, a = args.ensemble, args.write or args.ensemble, args.ack or args.write or args.ensemble
    with _connect(args, maxPendingAdds=args.outstanding) as bk:
        create = dict(ensemble_size=e, write_quorum_size=w, ack_quorum_size=a, digest_type=args.digest,
                      password=args.password.encode())
        if args.warmup > 0:
            wl = bk.create_ledger(**create)
            _add_all(wl, data, args.warmup, None, args.bulk)
            wl.close()
            bk.delete_ledger(wl.ledger_id)
        lh = bk.create_ledger(**create)
        lat = [0] * (args.entries if args.bulk <= 0 else (args.entries + args.bulk - 1) // args.bulk)
        secs = _add_all(lh, data, args.entries, lat, args.bulk)
        lh.close()
        return {
            "event": "write",
            "client": "bkspark",
            "ledger_id": lh.ledger_id,
            "last_entry_id": lh.last_add_confirmed,
            "entries": args.entries,
            "size": args.size,
            "outstanding": args.outstanding,
            "bulk": args.bulk,
            "ensemble": f"{e}/{w}/{a}",
            "digest": args.digest,
            "seconds": round(secs, 3),
            "entries_per_sec": round(args.entries / secs, 3),
            "mb_per_sec": round(args.entries * args.size / secs / 1e6, 3),
            "latency_ms": percentiles(lat),
        }


def _read_range_pass(rh: Any, last: int, batch: bool, batch_size: int, max_size: int, stats: dict[str, Any]) -> None:
    perf = time.perf_counter_ns
    lat = stats["lat"]
    cur = 0
    while cur <= last:
        to = min(last, cur + batch_size - 1)
        t0 = perf()
        if batch:
            entries = rh.batch_read(cur, to - cur + 1, max_size)
        else:
            entries = rh.read(cur, to)
        lat.append(perf() - t0)
        if not entries:
            raise RuntimeError(f"read returned no entry at {cur}")
        stats["requests"] += 1
        stats["entries"] += len(entries)
        stats["bytes"] += sum(len(x.payload) for x in entries)
        cur = entries[-1].entry_id + 1


def _arrow_pass(rh: Any, last: int, batch_size: int, max_size: int, stats: dict[str, Any]) -> None:
    """Mode arrow: ``read_batches`` (pipelined batch reads over every bookie); latency per Arrow batch."""
    perf = time.perf_counter_ns
    lat = stats["lat"]
    t0 = perf()
    for batch in rh.read_batches(0, last, batch_size=batch_size, max_size=max_size):
        lat.append(perf() - t0)
        stats["requests"] += 1
        stats["entries"] += batch.num_rows
        stats["bytes"] += batch.column(1).buffers()[2].size if batch.num_rows else 0
        t0 = perf()


def _read_pass(rh: Any, last: int, batch: bool | None, batch_size: int, max_size: int, stats: dict[str, Any]) -> None:
    if batch is None:
        _arrow_pass(rh, last, batch_size, max_size, stats)
        return
    _read_range_pass(rh, last, batch, batch_size, max_size, stats)


def cmd_read(args: argparse.Namespace) -> dict[str, Any]:
    batch = None if args.mode == "arrow" else args.mode == "batch"
    with _connect(args, batchReadEnabled=True) as bk:
        rh = bk.open_ledger(args.ledger, recovery=False, password=args.password.encode(), digest_type=args.digest)
        last = rh.last_add_confirmed
        if last < 0:
            raise RuntimeError(f"ledger {args.ledger} has no entries")
        for _ in range(args.warmup_passes):
            _read_pass(rh, last, batch, args.batch_size, args.max_size, {"lat": [], "requests": 0, "entries": 0, "bytes": 0})
        stats: dict[str, Any] = {"lat": [], "requests": 0, "entries": 0, "bytes": 0}
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(args.passes):
            _read_pass(rh, last, batch, args.batch_size, args.max_size, stats)
        secs = time.perf_counter() - start
        cpu_secs = time.process_time() - cpu_start  # every thread of this process, the timed passes only
        rh.close()
        return {
            "event": "read",
            "client": "bkspark",
            "mode": args.mode,
            "ledger_id": args.ledger,
            "ledger_entries": last + 1,
            "batch_size": args.batch_size,
            "max_size": args.max_size,
            "outstanding": 1,
            "passes": args.passes,
            "requests": stats["requests"],
            "entries": stats["entries"],
            "bytes": stats["bytes"],
            "seconds": round(secs, 3),
            "cpu_seconds": round(cpu_secs, 3),
            "entries_per_sec": round(stats["entries"] / secs, 3),
            "mb_per_sec": round(stats["bytes"] / secs / 1e6, 3),
            "latency_ms": percentiles(stats["lat"]),
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pyclient", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("write", "read"):
        s = sub.add_parser(name)
        s.add_argument("--zk", required=True, help="metadata service URI")
        s.add_argument("--digest", default="CRC32C")
        s.add_argument("--password", default="")
        if name == "write":
            s.add_argument("--ensemble", type=int, default=1)
            s.add_argument("--write", type=int, default=0)
            s.add_argument("--ack", type=int, default=0)
            s.add_argument("--entries", type=int, required=True)
            s.add_argument("--size", type=int, default=1024)
            s.add_argument("--outstanding", type=int, default=1000)
            s.add_argument("--warmup", type=int, default=0)
            s.add_argument("--bulk", type=int, default=0,
                           help="entries per append_many call (0: one append_async per entry)")
        else:
            s.add_argument("--ledger", type=int, required=True)
            s.add_argument("--mode", choices=("batch", "single", "arrow"), default="batch")
            s.add_argument("--batch-size", type=int, default=100)
            s.add_argument("--max-size", type=int, default=1024 * 1024)
            s.add_argument("--outstanding", type=int, default=1, help="only 1 (blocking calls) is supported")
            s.add_argument("--passes", type=int, default=1)
            s.add_argument("--warmup-passes", type=int, default=1)
    args = p.parse_args(argv)
    try:
        if args.command == "read" and args.outstanding != 1:
            raise ValueError("bench.pyclient reads with one blocking call at a time (--outstanding 1)")
        result = cmd_write(args) if args.command == "write" else cmd_read(args)
    except Exception as exc:  # noqa: BLE001 - reported as JSON like the Java program does
        print(json.dumps({"event": "error", "command": args.command, "error": type(exc).__name__, "message": str(exc)}))
        import traceback

        traceback.print_exc()
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
