"""CPU time to turn one batch of entry payloads into the source's Arrow batch: the reader's ``entry_batch``
(built from buffers) against the row-by-row conversion it replaced (tests/unit/test_connector_arrow.py).

    python -m bench.arrow_convert [--rows 10000] [--sizes 100,1024] [--rounds 5] [--loops 100]

Process CPU time (not wall time, so a loaded machine moves it less), best of --rounds rounds of --loops
conversions, with ledger-level columns filled (a creation time and two custom metadata pairs).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

from bench.common import REPO_ROOT  # noqa: F401 - puts the repository on sys.path
from bkspark.datasource.schema import entry_batch
from tests.unit.test_connector_arrow import reference_batch

CUSTOM = (("owner", b"bench"), ("team", b"storage"))


def cpu_ms(fn: Callable[[], object], rounds: int, loops: int) -> float:
    """Best per-call process CPU time in milliseconds over ``rounds`` rounds of ``loops`` calls."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(loops):
            fn()
        best = min(best, (time.process_time() - t0) / loops * 1000)
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.arrow_convert", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=10_000)
    p.add_argument("--sizes", default="100,1024")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--loops", type=int, default=100)
    args = p.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}; {args.rows} rows per batch; CPU ms per batch (best of {args.rounds})")
    for size in (int(s) for s in args.sizes.split(",")):
        payloads = [os.urandom(size) for _ in range(args.rows)]
        new = cpu_ms(lambda: entry_batch(0, 7, 0, payloads, 1_700_000_000_000, CUSTOM, include_custom_metadata=True), args.rounds, args.loops)
        old = cpu_ms(lambda: reference_batch(0, 7, 0, payloads, 1_700_000_000_000, CUSTOM), args.rounds, args.loops)
        print(f"{size:>6} B: entry_batch {new:7.3f} ms ({args.rows / new * 1000:,.0f} rows/s), "
              f"row by row {old:7.3f} ms ({args.rows / old * 1000:,.0f} rows/s): {old / new:.1f}x less CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
