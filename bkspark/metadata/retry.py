"""The retry policy for ZooKeeper connection loss: kazoo's ``KazooRetry``.

Every metadata call that is safe to repeat goes through a :class:`ZkRetry`
call.  Calls that are *not* safe to repeat blindly (creating a ledger znode, a
conditional set) check what reached the server after each loss, in a loop
bounded by the same policy (:meth:`ZkRetry.start`, a
:class:`bkspark.retry.Attempts` that retries exactly the transient ZooKeeper
errors).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    OperationTimeoutError,
    SessionClosedRequireSaslError,
    SessionExpiredError,
    ZookeeperError,
)
from kazoo.retry import KazooRetry, RetryFailedError

from bkspark import retry as bk_retry
from bkspark.errors import MetadataError

__all__ = [
    "RECONNECT_RETRY", "ZkRetry", "TRANSIENT_ZK_ERRORS", "ZK_AUTH_FAILURES", "reconnect_forever", "wait_connected",
    "zk_error",
]

T = TypeVar("T")

#: ZooKeeper errors after which the request may or may not have been applied.
TRANSIENT_ZK_ERRORS: tuple[type[BaseException], ...] = (ConnectionLoss, OperationTimeoutError)

#: ZooKeeper refused this client's credentials, or wants some it was not given (SASL): no retry helps.
ZK_AUTH_FAILURES: tuple[type[BaseException], ...] = (AuthFailedError, NoAuthError, SessionClosedRequireSaslError)

#: Reaching ZooKeeper again: every 0.1 s doubling to 1 s, whatever the failure, for as long as the caller's own
#: deadline allows (zkTimeout): kazoo's reconnection (:func:`bkspark.metadata.store.connection_retry`) and a Spark
#: task's probe of ZooKeeper (``bkspark.datasource.clients.wait_zookeeper_reachable``) both pause so
#: (docs/reliability.md, "ZooKeeper outages").
RECONNECT_RETRY = bk_retry.RetryPolicy(
    max_tries=1_000_000, delay=0.1, backoff=2.0, max_delay=1.0, deadline=None, jitter=0.0, retry_on=lambda exc: True
)


def wait_connected(zk: Any, timeout: float) -> bool:
    """Block until the kazoo client ``zk`` is connected again, at most ``timeout`` seconds; whether it is.

    What a caller does after one of :data:`TRANSIENT_ZK_ERRORS` before it looks or tries again (kazoo's own
    connection thread reconnects; a new session if the old one expired). A client without a ``connected``
    attribute (a test's fake) counts as connected."""
    if getattr(zk, "connected", True):
        return True
    event = threading.Event()

    def listener(state: str) -> bool:
        if state == "CONNECTED":
            event.set()
            return True  # remove this listener
        return False

    zk.add_listener(listener)
    try:
        if not zk.connected:
            event.wait(timeout)
    finally:
        zk.remove_listener(listener)
    return bool(zk.connected)


def reconnect_forever(max_delay: float = 5.0) -> KazooRetry:
    """kazoo's ``connection_retry`` for a server that outlives any ZooKeeper outage (the bookie): it never gives
    up, every 0.1 s doubling to ``max_delay``.  A client gives up after zkTimeout instead
    (:func:`bkspark.metadata.store.connection_retry`)."""
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=max_delay)


def zk_error(exc: BaseException, **context: object) -> MetadataError:
    """A :class:`MetadataError` for a ZooKeeper error; authentication failures say what to do (docs/security.md)."""
    name = type(exc).__name__
    if isinstance(exc, ZK_AUTH_FAILURES):
        return MetadataError(
            f"ZooKeeper error: {name}: ZooKeeper requires authentication or refused these credentials "
            "(give them with a JAAS 'Client' section or zkDigestAuthPath; znodes created with "
            "zkEnableSecurity=true belong to their creator: docs/security.md)",
            **context,
        )
    return MetadataError(f"ZooKeeper error: {name}", **context)


class ZkRetry:
    """Retries idempotent ZooKeeper calls on connection loss, with exponential back-off.

    ``max_tries`` and ``deadline`` bound the total effort (``zkTimeout``-like);
    when they are exhausted the call fails with :class:`MetadataError`.
    """

    def __init__(self, max_tries: int = 8, delay: float = 0.1, max_delay: float = 2.0, deadline: float = 30.0) -> None:
        self._template = KazooRetry(
            max_tries=max_tries, delay=delay, backoff=2, max_delay=max_delay, deadline=deadline, ignore_expire=False
        )
        self._bounds = bk_retry.RetryPolicy(
            max_tries=max_tries, delay=delay, backoff=2.0, max_delay=max_delay, deadline=deadline,
            retry_on=lambda exc: isinstance(exc, TRANSIENT_ZK_ERRORS),
        )

    def start(self) -> bk_retry.Attempts:
        """The tries of one hand-checked operation: the same bounds, retrying transient ZooKeeper errors only."""
        return self._bounds.start()

    def __call__(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``func(*args, **kwargs)``, retrying on connection loss (a fresh KazooRetry per call)."""
        try:
            return self._template.copy()(func, *args, **kwargs)
        except RetryFailedError as exc:
            raise MetadataError("ZooKeeper unreachable: retries exhausted", call=getattr(func, "__name__", func)) from exc
        except ConnectionClosedError as exc:  # the client gave up reconnecting (a SessionExpiredError subclass)
            raise MetadataError("ZooKeeper unreachable for longer than zkTimeout: connection closed") from exc
        except SessionExpiredError as exc:
            raise MetadataError("ZooKeeper session expired") from exc

    def wrap_error(self, exc: ZookeeperError, **context: object) -> MetadataError:
        """A :class:`MetadataError` for a ZooKeeper error no retry can fix (see :func:`zk_error`)."""
        return zk_error(exc, **context)
