"""Free TCP ports on 127.0.0.1, never the same one twice in a session."""

from __future__ import annotations

import socket
import threading

__all__ = ["free_port", "port_is_free", "port_is_open"]

_lock = threading.Lock()
_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """Return a port nobody listens on now and that this process never returned before."""
    with _lock:
        for _ in range(200):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port: int = sock.getsockname()[1]
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError("bkspark harness: could not find a free TCP port on 127.0.0.1")


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
