"""The Python bookie's event loop alone: its CPU per v2 add, in-process, with no client and no network.

    python -m bench.bookie_loop [--entries 100000] [--size 1024] [--chunk 70] [--rounds 3] [--batch-reads 0]
                                [--single-reads 0] [--profile]

A real ``Bookie`` and ``BookieServer`` (journal without fsync, write cache of --write-cache-mb) serve one
``Connection`` whose transport only counts what it is given.  --chunk v2 ADDENTRY frames at a time are handed
to ``data_received`` as one received chunk (about what the Java client's adds arrive in), with at most --in-flight
adds unanswered (the Java client's 1000), the loop runs between chunks so that journal completions and replies go
out, and the loop thread's CPU time
(``time.thread_time``) is divided by the adds.  Every variant runs --rounds times in one process, interleaved,
and the best round is reported:

* ``bookie GC``: the collector as a bookie process sets it (``bookie_server.app.tune_gc``);
* ``Python GC``: Python's default thresholds, nothing frozen;
* ``reference``: bookie GC, with the compiled loops of ``bkspark.protocol`` and ``bookie_server`` turned off.

With ``--batch-reads PASSES`` each round then reads its ledger back PASSES times in v2 batch reads of 100 entries
(one request per loop iteration, as a client reading one batch at a time sends them) and also reports the loop
thread's CPU per entry read.  The write cache is then made large enough to hold every add, so each read is
answered from memory on the loop (the reads the read threads serve from disk are another measurement).  With
``--single-reads PASSES`` it reads the ledger back PASSES times in pipelined v2 single reads (a striped ledger's
scan), --read-chunk READENTRY requests per received chunk, and reports the loop thread's CPU per read.

Why a separate program: under a Java client the machine's two cores are shared by the client's JVM, the bookie's
threads and the kernel, so ``bench.bookie_compare``'s rates move by ±20 % from run to run; this isolates the
part of the bookie's work that runs on its one event-loop thread (BENCHMARKS.md, "The Python bookie's adds").
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bkspark.protocol import framing as framing_module
from bkspark.protocol import v2, v2_bulk
from bkspark.protocol.digest import Digester, DigestType, master_key
from bookie_server import app as app_module
from bookie_server import entry_logs as entry_logs_module
from bookie_server import journal as journal_module
from bookie_server import v2_handlers as v2_handlers_module
from bookie_server.connection import Connection
from tests.harness.inprocess_bookie import started_bookie

VARIANTS = ("bookie GC", "Python GC", "reference")
#: Entries per batch read of --batch-reads.
BATCH = 100
#: What an entry stores besides its payload: the V1 header (32 bytes) and the CRC32C digest (4).
ENTRY_OVERHEAD = 36
#: Every module that reads a compiled module at call time (the "reference" variant sets them to None).
COMPILED_USERS = (v2, v2_bulk, framing_module, journal_module, entry_logs_module, v2_handlers_module)


class CountingTransport(asyncio.Transport):
    """What the connection writes is counted, not sent."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes_written = 0

    def write(self, data: Any) -> None:
        self.bytes_written += len(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def chunks_of_adds(entries: int, size: int, per_chunk: int, ledger: int) -> list[bytes]:
    key = master_key(b"bench")
    digester = Digester(DigestType.CRC32C, b"bench")
    payload = os.urandom(size)
    frames = [v2.encode_add_request(0, key, digester.package_entry(ledger, i, i - 1, 0, payload))
              for i in range(entries)]
    return [b"".join(frames[i : i + per_chunk]) for i in range(0, entries, per_chunk)]


async def read_back(conn: Connection, transport: CountingTransport, chunks: list[bytes], passes: int,
                    answer_bytes: int, entries: int) -> float:
    """Loop-thread CPU microseconds per entry of ``passes`` passes of these chunks of read requests, whose answers
    take ``answer_bytes`` per pass (one chunk per loop iteration)."""
    expected = transport.bytes_written + passes * answer_bytes
    started = time.thread_time()
    for _pass in range(passes):
        for chunk in chunks:
            conn.data_received(chunk)
            await asyncio.sleep(0)
    deadline = time.monotonic() + 120
    while transport.bytes_written < expected:
        if time.monotonic() > deadline:  # e.g. batches cut short by the bookie's maxBatchReadSize
            raise RuntimeError(f"reads answered {transport.bytes_written} of {expected} bytes in 120 s")
        await asyncio.sleep(0.0005)
    return (time.thread_time() - started) / (entries * passes) * 1e6


async def one_round(
    args: argparse.Namespace, workdir: Path, ledger: int, profile: cProfile.Profile | None
) -> tuple[float, float | None, float | None]:
    """Loop-thread CPU microseconds per add of one round on a fresh bookie, per entry of its batch reads and per
    single read (None without --batch-reads, --single-reads)."""
    async with started_bookie(workdir, dbStorage_writeCacheMaxSizeMb=args.write_cache_mb) as (_bookie, server):
        conn = Connection(server)
        transport = CountingTransport()
        conn.connection_made(transport)
        chunks = chunks_of_adds(args.entries, args.size, args.chunk, ledger)
        response = len(v2.encode_add_response(v2.EOK, ledger, 0))  # one ADDENTRY response frame per add
        answers = args.entries * response
        started = time.thread_time()
        if profile is not None:
            profile.enable()
        for sent, chunk in enumerate(chunks, 1):
            conn.data_received(chunk)
            await asyncio.sleep(0)
            while sent * args.chunk - transport.bytes_written // response > args.in_flight:
                await asyncio.sleep(0.0002)  # as a client with --in-flight adds outstanding waits
        while transport.bytes_written < answers:
            await asyncio.sleep(0.0005)
        if profile is not None:
            profile.disable()
        per_add = (time.thread_time() - started) / args.entries * 1e6
        stored = args.size + ENTRY_OVERHEAD
        per_batch = per_single = None
        if args.batch_reads:
            requests = [v2.encode_batch_read_request(ledger, first, first, BATCH, 1 << 20)
                        for first in range(0, args.entries, BATCH)]
            answer_bytes = sum(v2.BATCH_RESPONSE_OVERHEAD + min(BATCH, args.entries - first) * (4 + stored)
                               for first in range(0, args.entries, BATCH))
            per_batch = await read_back(conn, transport, requests, args.batch_reads, answer_bytes, args.entries)
        if args.single_reads:
            frames = [v2.encode_read_request(ledger, i) for i in range(args.entries)]
            requests = [b"".join(frames[i : i + args.read_chunk]) for i in range(0, args.entries, args.read_chunk)]
            answer_bytes = args.entries * (4 + v2.RESPONSE_HEADER_SIZE + stored)
            per_single = await read_back(conn, transport, requests, args.single_reads, answer_bytes, args.entries)
        return per_add, per_batch, per_single


def set_variant(variant: str, compiled: dict[Any, Any], thresholds: tuple[int, int, int]) -> None:
    gc.unfreeze()
    gc.collect()
    if variant == "Python GC":
        gc.set_threshold(*thresholds)
    else:
        app_module.tune_gc()
    for module in COMPILED_USERS:
        module._speedups = None if variant == "reference" else compiled[module]


def print_variants(results: dict[str, list[float]], unit: str) -> None:
    """Each variant's best round and all its rounds (µs per ``unit``), then the ratios between them."""
    best = {variant: min(values) for variant, values in results.items()}
    for variant in VARIANTS:
        rounds = ", ".join(f"{value:.2f}" for value in results[variant])
        print(f"  {variant:10s} {best[variant]:.2f} µs/{unit}  ({rounds})")
    print(f"  Python GC ÷ bookie GC: {best['Python GC'] / best['bookie GC']:.2f}x; "
          f"reference ÷ compiled: {best['reference'] / best['bookie GC']:.2f}x")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bookie_loop", description=__doc__.splitlines()[0])
    p.add_argument("--entries", type=int, default=100_000, help="adds per round (default 100000)")
    p.add_argument("--size", type=int, default=1024, help="entry payload bytes (default 1024)")
    p.add_argument("--chunk", type=int, default=70, help="adds per received chunk (default 70)")
    p.add_argument("--in-flight", type=int, default=1000, help="adds sent and not yet answered (default 1000)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of each variant, interleaved (default 3)")
    p.add_argument("--write-cache-mb", type=int, default=64, help="the bookie's write cache (default 64: checkpoints run)")
    p.add_argument("--batch-reads", type=int, default=0, metavar="PASSES",
                   help="then read the ledger back PASSES times in batch reads of 100 (default 0: no reads)")
    p.add_argument("--single-reads", type=int, default=0, metavar="PASSES",
                   help="then read the ledger back PASSES times in pipelined single reads (default 0: no reads)")
    p.add_argument("--read-chunk", type=int, default=100, help="single reads per received chunk (default 100)")
    p.add_argument("--profile", action="store_true", help="also print cProfile's top functions of a bookie-GC round")
    args = p.parse_args(argv)
    if args.batch_reads or args.single_reads:  # every add stays in the write cache: reads are answered from memory
        args.write_cache_mb = max(args.write_cache_mb, args.entries * (args.size + 200) // (1 << 20) + 1)
    compiled = {module: module._speedups for module in COMPILED_USERS}
    if any(value is None for value in compiled.values()):
        print("a compiled module is not built or is turned off (BKSPARK_NO_EXTENSIONS): the variants would be equal")
        return 1
    thresholds = gc.get_threshold()
    results: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    reads: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    singles: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bookie-loop-") as tmp:
        for rnd in range(args.rounds):
            for variant in VARIANTS:
                set_variant(variant, compiled, thresholds)
                workdir = Path(tmp) / f"{rnd}-{variant.replace(' ', '-')}"
                per_add, per_read, per_single = asyncio.run(one_round(args, workdir, 7, None))
                results[variant].append(per_add)
                if per_read is not None:
                    reads[variant].append(per_read)
                if per_single is not None:
                    singles[variant].append(per_single)
        profile_text = ""
        if args.profile:
            set_variant("bookie GC", compiled, thresholds)
            profile = cProfile.Profile()
            asyncio.run(one_round(args, Path(tmp) / "profiled", 7, profile))
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(20)
            profile_text = out.getvalue()
    set_variant("bookie GC", compiled, thresholds)
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    print(f"python -m bench.bookie_loop {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"{args.entries} adds of {args.size} B per round, {args.chunk} per received chunk, {args.in_flight} in flight, write cache "
          f"{args.write_cache_mb} MiB; loop-thread CPU per add, best of {args.rounds} (all rounds):")
    print_variants(results, "add")
    if args.batch_reads:
        print(f"then {args.batch_reads} pass(es) of batch reads of {BATCH} over those entries, from the write cache; "
              f"loop-thread CPU per entry read, best of {args.rounds} (all rounds):")
        print_variants(reads, "entry")
    if args.single_reads:
        print(f"then {args.single_reads} pass(es) of single reads of those entries, {args.read_chunk} per received "
              f"chunk, from the write cache; loop-thread CPU per read, best of {args.rounds} (all rounds):")
        print_variants(singles, "read")
    if profile_text:
        print(profile_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
