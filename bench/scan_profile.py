"""Where a Spark scan of the ``bookkeeper`` source spends its Python time, from a whole-job py-spy profile.

    py-spy record --subprocesses --nonblocking --format raw -r 50 -o scan.txt -- \\
        python -m bench.spark_compare --rows 200000 --size 100 --bookies 1 --ensemble 1 --write 1 --ack 1
    python -m bench.scan_profile scan.txt [--out bench/results/profiles/spark-scan.txt]

``--subprocesses`` follows the driver into Spark's Python workers (and the bench's other children); this keeps
only the samples of the scan: inside the data source reader's ``read()`` (the task's thread: waiting for and
converting batches), and the client's read path on the event-loop thread of the same Python workers (reads,
digests, decoding; the write path's frames are left out), writes them as collapsed stacks to --out, and prints the shares
per area and the top functions by self time, as ``bench.profile`` does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.profile import render, summarize

#: A sample belongs to the scan when its stack passes through the reader's read() (the task's thread) ...
SCAN_FRAME = "read (bkspark/datasource/reader.py"
#: ... or, in a process that ran the reader, through the client's read path on its event-loop thread.
READ_PATH = ("bkspark/client/reader.py", "bkspark/client/ops.py", "bkspark/client/connection.py", "bkspark/protocol/")
WRITE_PATH = ("bkspark/client/writer.py", "bkspark/datasource/writer.py")


def _process(stack: str) -> str:
    """The ``process N:...`` frames py-spy --subprocesses puts first: which process the sample is from."""
    frames = stack.split(";")
    return ";".join(f for f in frames if f.startswith("process "))


def scan_stacks(raw: Path, out: Path) -> int:
    """Copy the scan's stacks of ``raw`` (py-spy's collapsed format) to ``out``; how many samples they hold."""
    lines = [line.rpartition(" ") for line in raw.read_text().splitlines()]
    lines = [(stack, int(count)) for stack, _, count in lines if stack and count.isdigit()]
    scanners = {_process(stack) for stack, _ in lines if SCAN_FRAME in stack}
    kept = []
    samples = 0
    for stack, count in lines:
        if SCAN_FRAME in stack:
            # From the reader down: the frames above it are PySpark's worker loop.
            kept.append(f"{stack[stack.index(SCAN_FRAME):]} {count}")
        elif (_process(stack) in scanners and any(k in stack for k in READ_PATH)
              and not any(k in stack for k in WRITE_PATH)):
            frames = [f for f in stack.split(";") if not f.startswith("process ")]
            kept.append(f"{';'.join(frames)} {count}")
        else:
            continue
        samples += count
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(kept) + "\n")
    return samples


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scan_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("raw", help="py-spy raw (collapsed) output of a whole Spark job")
    p.add_argument("--out", default="bench/results/profiles/spark-scan.txt", help="the scan's stacks go here")
    p.add_argument("--title", default="Spark scan (reader.read on the Python workers)")
    args = p.parse_args(argv)
    out = Path(args.out)
    if scan_stacks(Path(args.raw), out) == 0:
        print(f"no sample of {args.raw} passes through the reader's read()", file=sys.stderr)
        return 1
    text, md = render(args.title, f"python -m bench.scan_profile {args.raw}", summarize(out, top=15))
    print(text)
    print()
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
