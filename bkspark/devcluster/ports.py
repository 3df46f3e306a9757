"""Free TCP ports on 127.0.0.1, never the same one twice in a session.

A port is free when it is handed out, not when the server binds it, seconds later for a JVM. The workers of one
test run (pytest-xdist's, docs/contracts.md "Test harness") split the ports between them: with
``BKSPARK_PORT_SHARD=i/n`` in the environment, :func:`free_port` hands out only ports ``p`` with ``p % n == i``,
so two shards never hand out the same port, whatever their timing. Subprocesses inherit the shard.

Two runs at once on one machine (two ``make test``, a benchmark beside tests) are kept apart by a reservation:
every port handed out is also claimed in a directory the whole machine shares (:func:`reservation_dir`), one file
per port, linked in whole (a file already written), holding the claimer's pid.  Another process skips a claimed port until its
claim expires (:data:`RESERVATION_SECONDS`: by then the server has bound the port, and the bind check sees it
taken) or its claimer has exited.  Where the directory cannot be used, ports are handed out as before, with one
warning.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import tempfile
import threading
import time
from pathlib import Path

from bkspark.devcluster.pids import pid_alive

__all__ = [
    "PORT_RANGE", "PORT_SHARD_ENV", "RESERVATION_DIR_ENV", "RESERVATION_SECONDS", "free_port", "port_is_free",
    "port_is_open", "port_shard", "reservation_dir",
]

log = logging.getLogger(__name__)

#: ``i/n``: this process and its children hand out only ports that are ``i`` modulo ``n``.
PORT_SHARD_ENV = "BKSPARK_PORT_SHARD"

#: Where :func:`free_port` looks: below the ephemeral ports Linux gives outgoing connections.
PORT_RANGE = (20000, 32768)

#: The directory of port reservations (default: ``bkspark-ports-<uid>`` in the system's temporary directory).
RESERVATION_DIR_ENV = "BKSPARK_PORT_RESERVATIONS"

#: How long a claim keeps a port from other processes: a server binds its port within seconds of its start (a
#: JVM's too), and from then on the bind check finds the port taken.
RESERVATION_SECONDS = 300.0

_lock = threading.Lock()
_handed_out: set[int] = set()
_random = random.Random()
#: Set once the reservation directory failed: from then on this process hands out ports without claiming them.
_reservations_off = False


def reservation_dir() -> Path:
    """Where claims live: :data:`RESERVATION_DIR_ENV`, else one directory per user under the temporary directory."""
    configured = os.environ.get(RESERVATION_DIR_ENV, "").strip()
    return Path(configured) if configured else Path(tempfile.gettempdir()) / f"bkspark-ports-{os.getuid()}"


def _claimer_alive(claim: Path) -> bool:
    """Whether the claim is in force: younger than :data:`RESERVATION_SECONDS` and its claimer still running."""
    try:
        age = time.time() - claim.stat().st_mtime
        pid = int(claim.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False  # gone meanwhile, or not a claim this module wrote
    return age <= RESERVATION_SECONDS and pid_alive(pid)


def _claim(port: int) -> bool:
    """Claim ``port`` for this process machine-wide; False when another process holds it.  A directory that
    cannot be used turns claiming off for this process (with a warning) and claims nothing.

    The claim appears whole or not at all (a hard link of a file already written: a half-written claim would look
    orphaned to another process, which would take it over).  A claim no longer in force is removed, and the port
    skipped this time: two processes that both found it stale cannot then both take it over.
    """
    if _reservations_off:
        return True
    directory = reservation_dir()
    claim = directory / str(port)
    draft = directory / f".{port}.{os.getpid()}.{threading.get_ident()}"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        draft.write_text(f"{os.getpid()} {time.time():.0f}\n")
        try:
            os.link(draft, claim)
            return True
        except FileExistsError:
            if not _claimer_alive(claim):
                claim.unlink(missing_ok=True)  # expired, or its claimer has exited: free for the next draw
            return False
        finally:
            draft.unlink(missing_ok=True)
    except OSError as exc:
        _turn_reservations_off(directory, exc)
        return True


def _turn_reservations_off(directory: Path, exc: OSError) -> None:
    global _reservations_off
    _reservations_off = True
    log.warning("bkspark harness: cannot claim ports in %s (%s: %s); ports are not reserved across processes",
                directory, type(exc).__name__, exc.strerror or exc)


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
    """Return a port nobody listens on now, that this process never returned before, that no other live process
    on this machine claimed in the last :data:`RESERVATION_SECONDS` (the module's docstring), and in this process's
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
            if not _claim(port):
                continue  # handed out by another process on this machine, not bound yet
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
