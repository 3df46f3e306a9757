"""Where a Spark scan (or write) of the ``bookkeeper`` source spends its Python time, from a whole-job py-spy profile.

    py-spy record --subprocesses --nonblocking --format raw -r 50 -o scan.txt -- \\
        python -m bench.spark_compare --rows 200000 --size 100 --bookies 1 --ensemble 1 --write 1 --ack 1
    python -m bench.scan_profile scan.txt [--out bench/results/profiles/spark-scan.txt]
    python -m bench.scan_profile scan.txt --job write --out bench/results/profiles/spark-write.txt

``--subprocesses`` follows the driver into Spark's Python workers (and the bench's other children); this keeps
only the samples of the scan: inside the data source reader's ``read()`` (the task's thread: waiting for and
converting batches), and the client's read path on the event-loop thread of the same Python workers (reads,
digests, decoding; the write path's frames are left out), writes them as collapsed stacks to --out, and prints the shares
per area and the top functions by self time, as ``bench.profile`` does.  ``--job write`` keeps the write job's
samples instead: inside the writer's ``write()`` and, in the processes that ran it, the client's write path
(the writer, the connection and the codecs) on their event-loop threads.
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
#: Frames only reads pass through (left out of a write job's loop-thread samples).
READ_ONLY_PATH = ("bkspark/client/reader.py", "_decode_batch_read_response", "_decode_read_response",
                  "ReadResponse", "verify_")
#: Frames a scan's loop-thread samples leave out: the connection's flush of queued requests.  A scan sends one
#: small batch-read request per 1,000 entries, so its flushes take next to no time; in the same worker processes
#: the write job's flushes (every add frame) pass through here without the writer on the stack, and counted them
#: as the scan's (a fifth of a 1 KiB scan's samples on 2026-11-27).
SCAN_EXCLUDED = ("BookieConnection._flush",)
#: The write job's task frame, and the client's write path on the loop thread of the processes that ran it.
WRITE_FRAME = "write (bkspark/datasource/writer.py"
WRITE_LOOP_PATH = ("bkspark/client/writer.py", "bkspark/client/ops.py", "bkspark/client/connection.py",
                   "bkspark/protocol/")


def _process(stack: str) -> str:
    """The ``process N:...`` frames py-spy --subprocesses puts first: which process the sample is from."""
    frames = stack.split(";")
    return ";".join(f for f in frames if f.startswith("process "))


def scan_stacks(raw: Path, out: Path, job: str = "scan") -> int:
    """Copy the scan's (or with ``job="write"`` the write's) stacks of ``raw`` (py-spy's collapsed format) to
    ``out``; how many samples they hold."""
    lines = [line.rpartition(" ") for line in raw.read_text().splitlines()]
    lines = [(stack, int(count)) for stack, _, count in lines if stack and count.isdigit()]
    task_frame = SCAN_FRAME if job == "scan" else WRITE_FRAME
    scanners = {_process(stack) for stack, _ in lines if task_frame in stack}

    def on_loop(stack: str) -> bool:
        if job == "write":
            # Spark reuses its Python workers: the same loop threads later serve the read jobs
            return any(k in stack for k in WRITE_LOOP_PATH) and not any(k in stack for k in READ_ONLY_PATH)
        return (any(k in stack for k in READ_PATH) and not any(k in stack for k in WRITE_PATH)
                and not any(k in stack for k in SCAN_EXCLUDED))

    kept = []
    samples = 0
    for stack, count in lines:
        if task_frame in stack:
            # From the reader (writer) down: the frames above it are PySpark's worker loop.
            kept.append(f"{stack[stack.index(task_frame):]} {count}")
        elif _process(stack) in scanners and on_loop(stack):
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
    p.add_argument("--job", choices=("scan", "write"), default="scan", help="which job's samples to keep")
    p.add_argument("--title", default=None, help="the report's title")
    args = p.parse_args(argv)
    out = Path(args.out)
    if scan_stacks(Path(args.raw), out, args.job) == 0:
        print(f"no sample of {args.raw} passes through the {args.job} job's task frame", file=sys.stderr)
        return 1
    title = args.title or ("Spark scan (reader.read on the Python workers)" if args.job == "scan"
                           else "Spark write (writer.write and the client's write path on the Python workers)")
    text, md = render(title, f"python -m bench.scan_profile {args.raw}", summarize(out, top=15))
    print(text)
    print()
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
