"""The loopback ceiling: raw TCP throughput over 127.0.0.1 on this machine, from Python.

    python -m bench.rawsocket [--mib 2048] [--buffer-kib 1024]

One connection between two processes (a sender started with multiprocessing's spawn, the receiver here):
the sender pushes --buffer-kib buffers with ``sendall`` until --mib MiB are sent, the receiver ``recv_into``s
a preallocated buffer of the same size.  The time runs from the first byte received to the last.  This is the
most a Python client on one connection can move, so client read MB/s ÷ this figure says how much of the
machine's loopback the client uses (bench.client_compare, part 3).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import sys
import time


def _sender(port: int, total: int, bufsize: int) -> None:
    buf = memoryview(bytearray(b"x" * bufsize))
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = 0
        while sent < total:
            n = min(bufsize, total - sent)
            s.sendall(buf[:n])
            sent += n


def loopback_throughput(total_mib: int = 2048, buffer_kib: int = 1024) -> dict[str, float]:
    """MB/s (10^6 bytes/s) of one TCP connection over 127.0.0.1 between two Python processes."""
    total = total_mib * 1024 * 1024
    bufsize = buffer_kib * 1024
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        ctx = mp.get_context("spawn")
        proc = ctx.Process(target=_sender, args=(port, total, bufsize), daemon=True)
        proc.start()
        try:
            conn, _ = srv.accept()
            with conn:
                buf = bytearray(bufsize)
                view = memoryview(buf)
                got = conn.recv_into(view)
                start = time.perf_counter()
                while got < total:
                    n = conn.recv_into(view)
                    if n == 0:
                        raise ConnectionError(f"sender closed after {got} of {total} bytes")
                    got += n
                secs = time.perf_counter() - start
        finally:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    return {"bytes": got, "seconds": round(secs, 3), "mb_per_sec": round(got / secs / 1e6, 1), "buffer_kib": buffer_kib}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rawsocket", description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=2048, help="MiB to push (default 2048)")
    p.add_argument("--buffer-kib", type=int, default=1024, help="send/receive buffer size in KiB (default 1024)")
    args = p.parse_args(argv)
    print(json.dumps({"event": "loopback", **loopback_throughput(args.mib, args.buffer_kib)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
