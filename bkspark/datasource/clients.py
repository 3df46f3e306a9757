"""One BookKeeper client per Python worker, shared by every task it runs.

Spark reuses Python workers across tasks and queries, so a module-level cache
keyed by the connection settings saves a ZooKeeper session and bookie
connections per task.  A client that failed is evicted so the next task starts
clean (as Kafka invalidates cached consumers after a task failure).

Before a client is created, ZooKeeper is probed with a plain TCP connect, again
and again with a growing pause, for at most the client's ``zkTimeout``: an
outage shorter than that (a restart, a leader election) only delays the task,
as it delays Apache BookKeeper's Java client, while an unreachable ZooKeeper
fails the query after ``zkTimeout`` with a message naming the option
(docs/reliability.md, "ZooKeeper outages").
"""

from __future__ import annotations

import atexit
import socket
import threading
import time
from typing import Any

__all__ = [
    "get_client",
    "evict_client",
    "evict_if_stale",
    "client_conf",
    "client_zk",
    "client_root",
    "check_zookeeper_reachable",
    "wait_zookeeper_reachable",
    "ZK_PROBE_TIMEOUT",
]

#: Seconds a TCP connect to one ZooKeeper server may take before it counts as unreachable.
ZK_PROBE_TIMEOUT = 5.0

_CLIENTS: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def _client_key_names() -> dict[str, str]:
    """Lower-cased client configuration names (and aliases) -> the name the client knows."""
    from dataclasses import fields

    from bkspark.client.conf import ClientConf

    names = {f.name.lower(): f.name for f in fields(ClientConf) if f.name != "extra"}
    for alias in ClientConf.ALIASES:
        names.setdefault(alias.lower(), alias)
    return names


def client_conf(client_options: tuple[tuple[str, str], ...], **overrides: Any) -> dict[str, Any]:
    """The client configuration: ``bookkeeper.*`` options, then the connector's own settings.

    Spark lower-cases option keys (``bookkeeper.readEntryTimeoutSec`` arrives as
    ``readentrytimeoutsec``); they are mapped back to the client's camelCase
    names here.  Keys the client does not know keep their spelling and reach
    the placement policy through the client's ``extra`` settings.
    """
    names = _client_key_names()
    conf: dict[str, Any] = {}
    for key, value in client_options:
        conf[names.get(key.lower(), key)] = value
    conf.update({k: v for k, v in overrides.items() if v is not None})
    return conf


def client_zk(bk: Any) -> Any:
    """The client's started kazoo client (``bk.zk`` per docs/contracts.md, else its metadata store's)."""
    zk = getattr(bk, "zk", None)
    return zk if zk is not None else bk.store.zk


def client_root(bk: Any) -> str:
    """The ledgers root path of the client's metadata service URI."""
    root = getattr(bk, "ledgers_root", None)
    return root if root is not None else bk.store.root


def _zk_hosts(uri: str) -> list[tuple[str, int]]:
    from bkspark.protocol.layout import parse_metadata_service_uri

    connect = parse_metadata_service_uri(uri).connect_string
    hosts = []
    for part in connect.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("["):  # [ipv6]:port
            host, _, port = part[1:].partition("]:")
        else:
            host, _, port = part.rpartition(":") if ":" in part else (part, "", "")
        hosts.append((host, int(port) if port.isdigit() else 2181))
    return hosts


def check_zookeeper_reachable(uri: str, timeout: float = ZK_PROBE_TIMEOUT) -> None:
    """Raise a clear :class:`MetadataError` unless at least one ZooKeeper server of ``uri`` accepts TCP."""
    from bkspark.errors import InvalidOptionError, MetadataError

    try:
        hosts = _zk_hosts(uri)
    except (ValueError, InvalidOptionError) as exc:
        raise InvalidOptionError(
            f"[BOOKKEEPER_INVALID_OPTION] option 'metadataServiceUri'={uri!r} is invalid: {exc}"
        ) from None
    failures = []
    for host, port in hosts:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            failures.append(f"{host}:{port} ({exc.strerror or type(exc).__name__})")
    raise MetadataError(
        f"[BOOKKEEPER_ZOOKEEPER_UNREACHABLE] cannot reach ZooKeeper at {', '.join(failures) or 'no host'} "
        f"from option 'metadataServiceUri'={uri!r}; check the host and port, and that ZooKeeper is running"
    )


def wait_zookeeper_reachable(uri: str, budget: float, timeout: float = ZK_PROBE_TIMEOUT) -> None:
    """:func:`check_zookeeper_reachable`, tried again every 0.1 s doubling to 1 s until ``budget`` seconds
    (the client's zkTimeout) are spent; then the last :class:`MetadataError`, which says how long it tried."""
    from bkspark.errors import MetadataError
    from bkspark.metadata.retry import RECONNECT_RETRY

    deadline = time.monotonic() + budget
    attempts = RECONNECT_RETRY.start()  # its pauses; the deadline is ours, so that the last attempt falls on it
    while True:
        try:
            check_zookeeper_reachable(uri, min(timeout, max(budget, 0.1)))
            return
        except MetadataError as exc:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MetadataError(f"{exc} (tried for zkTimeout={budget:g} s)") from None
            time.sleep(min(attempts.next_delay(exc), remaining))


def _key(uri: str, conf: dict[str, Any]) -> tuple:
    return (uri, tuple(sorted((k, repr(v)) for k, v in conf.items())))


def get_client(uri: str, conf: dict[str, Any]) -> Any:
    """The cached :class:`bkspark.client.BookKeeper` for these settings, created on first use."""
    key = _key(uri, conf)
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            from bkspark.client import BookKeeper
            from bkspark.client.conf import ClientConf
            from bkspark.errors import MetadataError

            wait_zookeeper_reachable(uri, ClientConf.from_mapping(conf).zkTimeout)
            try:
                client = BookKeeper(metadata_service_uri=uri, conf=conf)
            except MetadataError as exc:
                raise MetadataError(
                    f"[BOOKKEEPER_ZOOKEEPER_UNREACHABLE] cannot open a ZooKeeper session for option "
                    f"'metadataServiceUri'={uri!r}: {exc}"
                ) from exc
            _CLIENTS[key] = client
        return client


def evict_client(uri: str, conf: dict[str, Any]) -> None:
    """Close and forget the cached client for these settings (after a failure)."""
    with _LOCK:
        client = _CLIENTS.pop(_key(uri, conf), None)
    if client is not None:
        try:
            client.close()
        except Exception:  # noqa: BLE001 - closing a broken client must not mask the real error
            pass


def evict_if_stale(uri: str, conf: dict[str, Any], error: BaseException) -> None:
    """Evict the cached client when ``error`` says it may hold stale connections or a stale session.

    Decided by the error's ``invalidates_client`` flag (bkspark/errors.py), not by its type.
    """
    from bkspark.errors import invalidates_client

    if invalidates_client(error):
        evict_client(uri, conf)


#: How long interpreter exit waits for the cached clients to close (their ZooKeeper may be gone already).
EXIT_CLOSE_TIMEOUT = 5.0


@atexit.register
def _close_all() -> None:
    with _LOCK:
        clients = list(_CLIENTS.values())
        _CLIENTS.clear()

    def close_each() -> None:
        for client in clients:
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass

    # A daemon thread, so that a close stuck on an unreachable ZooKeeper never holds the worker's exit.
    closer = threading.Thread(target=close_each, name="bkspark-close-clients", daemon=True)
    closer.start()
    closer.join(EXIT_CLOSE_TIMEOUT)
