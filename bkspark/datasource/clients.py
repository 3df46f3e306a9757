"""One BookKeeper client per Python worker, shared by every task it runs.

Spark reuses Python workers across tasks and queries, so a module-level cache
keyed by the connection settings saves a ZooKeeper session and bookie
connections per task.  A client that failed is evicted so the next task starts
clean (as Kafka invalidates cached consumers after a task failure).
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

__all__ = ["get_client", "evict_client", "client_conf"]

_CLIENTS: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def client_conf(client_options: tuple[tuple[str, str], ...], **overrides: Any) -> dict[str, Any]:
    """The client configuration: ``bookkeeper.*`` options, then the connector's own settings."""
    conf: dict[str, Any] = dict(client_options)
    conf.update({k: v for k, v in overrides.items() if v is not None})
    return conf


def _key(uri: str, conf: dict[str, Any]) -> tuple:
    return (uri, tuple(sorted((k, repr(v)) for k, v in conf.items())))


def get_client(uri: str, conf: dict[str, Any]) -> Any:
    """The cached :class:`bkspark.client.BookKeeper` for these settings, created on first use."""
    key = _key(uri, conf)
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            from bkspark.client import BookKeeper

            client = BookKeeper(metadata_service_uri=uri, **conf)
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


@atexit.register
def _close_all() -> None:
    with _LOCK:
        clients = list(_CLIENTS.values())
        _CLIENTS.clear()
    for client in clients:
        try:
            client.close()
        except Exception:  # noqa: BLE001
            pass
