"""Free TCP ports on 127.0.0.1, never the same one twice in a session.

A port is free when it is handed out, not when the server binds it, seconds later for a JVM. The workers of one
test run (pytest-xdist's, docs/contracts.md "Test harness") split the ports between them: with
``BKSPARK_PORT_SHARD=i/n`` in the environment, :func:`free_port` hands out only ports ``p`` with ``p % n == i``,
so two shards never hand out the same port, whatever their timing. Subprocesses inherit the shard. Two runs at
once on one machine are not kept apart: their workers of one index share a shard.
"""

from __future__ import annotations

import os
import random
import socket
import threading

__all__ = ["PORT_RANGE", "PORT_SHARD_ENV", "free_port", "port_is_free", "port_is_open", "port_shard"]

#: ``i/n``: this process and its children hand out only ports that are ``i`` modulo ``n``.
PORT_SHARD_ENV = "BKSPARK_PORT_SHARD"

#: Where :func:`free_port` looks: below the ephemeral ports Linux gives outgoing connections.
PORT_RANGE = (20000, 32768)

_lock = threading.Lock()
_handed_out: set[int] = set()
_random = random.Random()


def port_shard() -> tuple[int, int]:
    """``(i, n)`` from :data:`PORT_SHARD_ENV`; ``(0, 1)`` (every port) when it is unset.  A malformed value is a
    ValueError naming the variable: a silently ignored shard would let two workers collide."""
    value = os.environ.get(PORT_SHARD_ENV, "").strip()
    if not value:
        return 0, 1
    index, sep, count = value.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i, n = -1, 0
    if not sep or n < 1 or not 0 <= i < n:
        raise ValueError(f"{PORT_SHARD_ENV}={value!r}: expected i/n with 0 <= i < n")
    return i, n


def free_port(host: str = "127.0.0.1") -> int:
    """Return a port nobody listens on now, that this process never returned before, and in this process's
    shard (:func:`port_shard`).

    Candidates are drawn at random from :data:`PORT_RANGE`, below Linux's ephemeral range (32768-60999), where
    no outgoing connection takes a port between this check and the server's bind.  (Not ``bind(0)``: Linux hands
    odd ports to it, so the even shard would find none.)"""
    index, count = port_shard()
    low, high = PORT_RANGE
    with _lock:
        for _ in range(1000):
            port = _random.randrange(low + (index - low) % count, high, count)
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    raise RuntimeError(f"bkspark harness: could not find a free TCP port on {host} in {low}-{high - 1}")


def port_is_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a server could listen on host:port now (nothing listens on it, nothing holds it bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    with _lock:
        _handed_out.add(port)  # never hand it to someone else in this process
    return True
