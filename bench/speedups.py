"""The compiled fast path alone: split and verify one batch-read response, compiled and pure Python.

    python -m bench.speedups [--entries 1000] [--sizes 100,1024] [--repeat 20]

Builds one BATCH_READ_ENTRY response body of --entries CRC32C entries of each size, then times
``v2.decode_batch_read_response_entries`` followed by ``Digester.verify_payloads`` (no copy of the payloads)
with the compiled module (bkspark/protocol/_speedups.c) and with the pure-Python reference, best of --repeat,
and prints microseconds per entry and the ratio.  No servers: this isolates the two loops the Spark scan's
profile put first (BENCHMARKS.md, "The compiled fast path").  Then the same for the Arrow gather of those
payloads (``bkspark.client.arrow.binary_array``), in nanoseconds per payload.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from bkspark.client import arrow as arrow_module
from bkspark.protocol import digest as digest_module
from bkspark.protocol import v2
from bkspark.protocol.digest import Digester, DigestType
from bkspark.protocol.speedups import speedups


def per_entry_us(body: bytes, digester: Digester, entries: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        items = v2.decode_batch_read_response_entries(body)
        payloads, error = digester.verify_payloads(items, 7, 0, 0, False)
        best = min(best, time.perf_counter() - started)
        if error is not None or len(payloads) != entries:
            raise SystemExit(f"verification failed: {error}")
    return best / entries * 1e6


def gather_ns(payloads: list, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        arrow_module.binary_array(payloads)
        best = min(best, time.perf_counter() - started)
    return best / len(payloads) * 1e9


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.speedups", description=__doc__.splitlines()[0])
    p.add_argument("--entries", type=int, default=1000)
    p.add_argument("--sizes", default="100,1024")
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args(argv)
    if speedups is None:
        print("the compiled module is not built or is turned off (BKSPARK_NO_EXTENSIONS): nothing to compare")
        return 1
    digester = Digester(DigestType.CRC32C, b"")
    rng = random.Random(1)
    for size in (int(s) for s in args.sizes.split(",")):
        items = [bytes(digester.package_entry(7, i, i - 1, size * (i + 1), rng.randbytes(size)))
                 for i in range(args.entries)]
        body = v2.encode_batch_read_response(0, 7, 0, 1, items)[4:]
        figures = {}
        for label, module in (("compiled", speedups), ("pure Python", None)):
            digest_module._speedups = module
            v2._speedups = module
            figures[label] = per_entry_us(body, digester, args.entries, args.repeat)
        digest_module._speedups = v2._speedups = speedups
        print(f"{size} B: compiled {figures['compiled']:.2f} µs/entry, pure Python {figures['pure Python']:.2f} "
              f"µs/entry: {figures['pure Python'] / figures['compiled']:.1f}x")
        payloads, _ = digester.verify_payloads(v2.decode_batch_read_response_entries(body), 7, 0, 0, False)
        gather = {}
        for label, module in (("compiled", speedups), ("pure Python", None)):
            arrow_module._speedups = module
            gather[label] = gather_ns(payloads, args.repeat)
        arrow_module._speedups = speedups
        print(f"{size} B: Arrow gather compiled {gather['compiled']:.0f} ns/payload, pure Python "
              f"{gather['pure Python']:.0f} ns/payload: {gather['pure Python'] / gather['compiled']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
