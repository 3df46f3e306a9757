"""The one retry policy for ZooKeeper calls: kazoo's ``KazooRetry``.

Every metadata call that is safe to repeat goes through :func:`zk_retry`.
Calls that are *not* safe to repeat blindly (creating a ledger znode) catch
``ConnectionLoss`` themselves and check what reached the server first
(see :meth:`ZkMetadataStore.create_ledger_metadata`).
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    OperationTimeoutError,
    SessionExpiredError,
    ZookeeperError,
)
from kazoo.retry import KazooRetry, RetryFailedError

from bkspark.errors import MetadataError

__all__ = ["RetryPolicy", "TRANSIENT_ZK_ERRORS"]

T = TypeVar("T")

#: ZooKeeper errors after which the request may or may not have been applied.
TRANSIENT_ZK_ERRORS: tuple[type[BaseException], ...] = (ConnectionLoss, OperationTimeoutError)


class RetryPolicy:
    """Retries idempotent ZooKeeper calls on connection loss, with exponential back-off.

    ``max_tries`` and ``deadline`` bound the total effort (``zkTimeout``-like);
    when they are exhausted the call fails with :class:`MetadataError`.
    """

    def __init__(self, max_tries: int = 8, delay: float = 0.1, max_delay: float = 2.0, deadline: float = 30.0) -> None:
        self._template = KazooRetry(
            max_tries=max_tries, delay=delay, backoff=2, max_delay=max_delay, deadline=deadline, ignore_expire=False
        )

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
        """A :class:`MetadataError` for a ZooKeeper error no retry can fix."""
        return MetadataError(f"ZooKeeper error: {type(exc).__name__}", **context)
