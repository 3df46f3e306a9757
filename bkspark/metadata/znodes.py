"""Znodes outside the ledger metadata, through kazoo: the one door to ZooKeeper above ``bkspark/metadata``.

BookKeeper's ledger metadata (LAYOUT, ledger ids, ledger znodes) is :mod:`bkspark.metadata.store`; every other
ZooKeeper call -- bkspark's datasets, write jobs and orphan audit, the shell's cluster formatting, the bookie's
registration, cookies and garbage collection -- goes through a :class:`Znodes` (and the recipes below), so that no
module outside ``bkspark/metadata`` imports kazoo or reads its private fields (docs/architecture.md, "ZooKeeper:
one door"; ``tests/unit/test_layering.py``):

* An absent znode, a lost compare-and-set or a create that found the znode there are values (``None``,
  ``False``, ``[]``), not exceptions: what callers branch on.
* A ZooKeeper outage shorter than the session is waited out by :meth:`Znodes.outlast_outage` (tried again
  under :data:`OUTAGE_RETRY` until the session timeout has passed), for calls safe to repeat.
* A ``multi`` is a :class:`Multi`; its :meth:`Multi.commit` gives each operation's :class:`Outcome`, or ``None``
  when the connection was lost before the answer (applied or not: the caller looks).
* Any other ZooKeeper failure is kazoo's exception; :func:`zk_errors_as` names it as a :class:`MetadataError`.
"""

from __future__ import annotations

import contextlib
import enum
import time
from typing import Any, Callable, Iterator, Sequence, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
    ZookeeperError,
)
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.recipe.election import Election
from kazoo.recipe.watchers import DataWatch

from bkspark.errors import MetadataError
from bkspark.metadata.multiread import get_many
from bkspark.metadata.retry import TRANSIENT_ZK_ERRORS, wait_connected
from bkspark.retry import RetryPolicy

__all__ = [
    "DEFAULT_SESSION_TIMEOUT",
    "OUTAGE_RETRY",
    "ZK_FAILURES",
    "LeaderElection",
    "Multi",
    "Outcome",
    "ZkClient",
    "Znodes",
    "ZnodeStat",
    "on_session_lost",
    "session_timeout_of",
    "watch_data",
    "zk_errors_as",
]

T = TypeVar("T")

#: The session timeout assumed for a kazoo client bkspark did not make (seconds): the client's zkTimeout default.
DEFAULT_SESSION_TIMEOUT = 10.0

#: Waiting out a ZooKeeper outage (:meth:`Znodes.outlast_outage`): the call is made again each time the client
#: has reconnected (no pause of its own: :func:`wait_connected` is the pause), for as long as the session lasts
#: (``deadline``, set per client to its session timeout).
OUTAGE_RETRY = RetryPolicy(
    max_tries=1_000_000, delay=0.0, backoff=1.0, max_delay=0.0, deadline=DEFAULT_SESSION_TIMEOUT, jitter=0.0,
    retry_on=lambda exc: isinstance(exc, TRANSIENT_ZK_ERRORS),
)


class ZkClient(KazooClient):
    """A kazoo client that says its session timeout (``session_timeout``, seconds): kazoo keeps it private."""

    def __init__(self, *args: Any, timeout: float = DEFAULT_SESSION_TIMEOUT, **kwargs: Any) -> None:
        super().__init__(*args, timeout=timeout, **kwargs)
        self.session_timeout = float(timeout)


def session_timeout_of(zk: Any) -> float:
    """``zk``'s session timeout in seconds: a :class:`ZkClient`'s own, else :data:`DEFAULT_SESSION_TIMEOUT`."""
    timeout = getattr(zk, "session_timeout", None)
    return float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else DEFAULT_SESSION_TIMEOUT


@contextlib.contextmanager
def zk_errors_as(what: str, **context: object) -> Iterator[None]:
    """Raise a ZooKeeper failure inside the block as ``MetadataError("<what>: <kazoo's error name>")``."""
    try:
        yield
    except ZookeeperError as exc:
        raise MetadataError(f"{what}: {type(exc).__name__}", **context) from exc


class Outcome(enum.Enum):
    """What one operation of a ``multi`` came to."""

    OK = "ok"
    #: A compare-and-set or version check found another version.
    BAD_VERSION = "bad version"
    #: The znode (or, for a create, its parent) does not exist.
    NO_NODE = "no node"
    #: A create found the znode there.
    NODE_EXISTS = "node exists"
    #: Not applied because another operation of the ``multi`` failed (an earlier one rolled back, or a later one
    #: never tried: ZooKeeper's "runtime inconsistency").
    ROLLED_BACK = "rolled back"
    #: Any other ZooKeeper error (:attr:`Multi.errors` holds it).
    FAILED = "failed"


_OUTCOMES: tuple[tuple[type[BaseException], Outcome], ...] = (
    (BadVersionError, Outcome.BAD_VERSION),
    (NoNodeError, Outcome.NO_NODE),
    (NodeExistsError, Outcome.NODE_EXISTS),
    (RolledBackError, Outcome.ROLLED_BACK),
    (RuntimeInconsistency, Outcome.ROLLED_BACK),
)


def _outcome(result: object) -> Outcome:
    if not isinstance(result, Exception):
        return Outcome.OK
    for kind, outcome in _OUTCOMES:
        if isinstance(result, kind):
            return outcome
    return Outcome.FAILED


class Multi:
    """The operations of one ZooKeeper ``multi`` (kazoo's transaction), applied all or none by :meth:`commit`."""

    __slots__ = ("_tx", "errors")

    def __init__(self, zk: KazooClient) -> None:
        self._tx = zk.transaction()
        #: After :meth:`commit`: the ZooKeeper error of each operation (None where it was applied).
        self.errors: list[BaseException | None] = []

    def check(self, path: str, version: int = -1) -> "Multi":
        """Require ``path`` at ``version`` (-1: merely existing)."""
        self._tx.check(path, version)
        return self

    def create(self, path: str, data: bytes = b"") -> "Multi":
        self._tx.create(path, data)
        return self

    def set(self, path: str, data: bytes, version: int = -1) -> "Multi":
        self._tx.set_data(path, data, version=version)
        return self

    def delete(self, path: str, version: int = -1) -> "Multi":
        self._tx.delete(path, version=version)
        return self

    def commit(self) -> list[Outcome] | None:
        """Send the ``multi``: each operation's outcome in order, or None when the connection was lost before the
        answer (it may or may not have been applied)."""
        try:
            results = self._tx.commit()
        except TRANSIENT_ZK_ERRORS:
            return None
        self.errors = [r if isinstance(r, Exception) else None for r in results]
        return [_outcome(r) for r in results]

    def raise_failure(self) -> None:
        """Raise the first error of a committed ``multi`` that is not a rollback (kazoo's exception), if any."""
        for error in self.errors:
            if error is not None and not isinstance(error, (RolledBackError, RuntimeInconsistency)):
                raise error


class Znodes:
    """Plain znode reads and writes on a started kazoo client (any thread: kazoo is thread-safe).

    ``session_timeout`` (seconds) bounds :meth:`outlast_outage`; by default the client's own
    (:func:`session_timeout_of`).
    """

    __slots__ = ("zk", "session_timeout")

    def __init__(self, zk: Any, session_timeout: float | None = None) -> None:
        #: The kazoo client, for kazoo's recipes (the audit's leader election and data watch).
        self.zk = zk
        self.session_timeout = session_timeout_of(zk) if session_timeout is None else float(session_timeout)

    # -- reads -------------------------------------------------------------------------------------------

    def get(self, path: str, watch: Callable[[Any], None] | None = None) -> tuple[bytes, ZnodeStat] | None:
        """``(data, stat)`` of ``path``; None when it does not exist."""
        try:
            return self.zk.get(path, watch=watch)
        except NoNodeError:
            return None

    def stat(self, path: str, watch: Callable[[Any], None] | None = None) -> ZnodeStat | None:
        """``path``'s stat; None when it does not exist (``watch`` fires on its creation, change or deletion)."""
        return self.zk.exists(path, watch=watch)

    def children(self, path: str) -> list[str]:
        """The names of ``path``'s children; empty when it does not exist."""
        try:
            return self.zk.get_children(path)
        except NoNodeError:
            return []

    def get_each(self, paths: Sequence[str], timeout: float = 60.0) -> list[tuple[bytes, ZnodeStat] | None]:
        """:meth:`get` of every path, pipelined (all sent, then every answer awaited), in order."""
        pending = [self.zk.get_async(path) for path in paths]
        out: list[tuple[bytes, ZnodeStat] | None] = []
        for result in pending:
            try:
                out.append(result.get(timeout=timeout))
            except NoNodeError:
                out.append(None)
        return out

    def read_many(
        self, paths: Sequence[str], timeout: float = 60.0, retry: Any = None
    ) -> Iterator[tuple[str, tuple[bytes, ZnodeStat] | None]]:
        """``(path, (data, stat) or None when absent)`` for every path, in order, read with ZooKeeper's read-only
        multi reads (:func:`bkspark.metadata.multiread.get_many`; a lost connection retried under ``retry``).
        A znode's other error (``NoAuth``) is raised."""
        for path, result in get_many(self.zk, paths, timeout=timeout, retry=retry):
            if isinstance(result, NoNodeError):
                yield path, None
            elif isinstance(result, BaseException):
                raise result
            else:
                yield path, result

    def missing(self, paths: Sequence[str], timeout: float = 60.0) -> list[bool]:
        """Whether each path does not exist, read with multi reads (a few hundred znodes per round trip)."""
        return [isinstance(result, NoNodeError) for _, result in get_many(self.zk, paths, timeout=timeout)]

    # -- writes ------------------------------------------------------------------------------------------

    def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents where missing."""
        self.zk.ensure_path(path)

    def create(self, path: str, data: bytes = b"", *, makepath: bool = False, ephemeral: bool = False) -> Outcome:
        """Create ``path``: OK, NODE_EXISTS when it is there, NO_NODE when its parent is missing (without
        ``makepath``).  An ``ephemeral`` znode goes with this client's session."""
        try:
            self.zk.create(path, data, makepath=makepath, ephemeral=ephemeral)
        except NodeExistsError:
            return Outcome.NODE_EXISTS
        except NoNodeError:
            return Outcome.NO_NODE
        return Outcome.OK

    def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat | None:
        """Set ``path``'s data (compare-and-set on ``version`` unless -1); the new stat, or None when the znode is
        at another version or gone."""
        try:
            return self.zk.set(path, data, version=version)
        except (BadVersionError, NoNodeError):
            return None

    def owns(self, stat: ZnodeStat) -> bool:
        """Whether the znode of ``stat`` is an ephemeral one of this client's current session."""
        return bool(stat.ephemeralOwner == self.zk.client_id[0])

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Delete ``path`` (with its children when ``recursive``); False when it was already gone."""
        try:
            self.zk.delete(path, recursive=recursive)
        except NoNodeError:
            return False
        return True

    def multi(self) -> Multi:
        """A new ``multi`` to fill and commit."""
        return Multi(self.zk)

    # -- outages -----------------------------------------------------------------------------------------

    def outlast_outage(self, call: Callable[[], T]) -> T:
        """``call()``, made again once the client has reconnected after each ``ConnectionLoss`` or
        ``OperationTimeoutError``, until the session timeout has passed since the first try (then the error).

        The one rule for waiting out a ZooKeeper outage shorter than the session; only for a call that is safe to
        repeat whether or not the lost try reached the server (a read, a create whose ``NODE_EXISTS`` is its own).
        """
        attempts = OUTAGE_RETRY.with_(deadline=self.session_timeout).start()
        while True:
            try:
                return call()
            except TRANSIENT_ZK_ERRORS as exc:
                attempts.backoff(exc)  # re-raises once the session timeout has passed
                wait_connected(self.zk, max(0.05, self.session_timeout - (time.monotonic() - attempts.started)))


# -- kazoo's recipes, for the orphan audit ------------------------------------------------------------------------

#: Every failure a kazoo call may raise (ZooKeeper's errors and the client's own), for a loop that must survive them.
ZK_FAILURES: tuple[type[BaseException], ...] = (KazooException,)


class LeaderElection:
    """One contender of the leader election at ``path`` (kazoo's ``Election`` recipe: a lock of sequential
    ephemeral znodes, the lowest one leads)."""

    __slots__ = ("_election",)

    def __init__(self, zk: Any, path: str, identifier: str | None = None) -> None:
        self._election = Election(zk, path, identifier)

    def contenders(self) -> list[str]:
        """The identifiers of every contender, the leader first."""
        return list(self._election.contenders())

    def run(self, lead: Callable[[], None]) -> None:
        """Block until this contender leads, then call ``lead()``; leadership ends when it returns."""
        self._election.run(lead)

    def cancel(self) -> None:
        """Leave the election (a :meth:`run` waiting to lead returns)."""
        self._election.cancel()

    @property
    def own_znode(self) -> str:
        """This contender's election znode, while it leads: the fence of its writes (a ``multi``'s check)."""
        lock = self._election.lock
        return f"{lock.path}/{lock.node}"


def watch_data(zk: Any, path: str, callback: Callable[[bytes | None, Any], bool | None]) -> Any:
    """Call ``callback(data or None, stat)`` now and on every change of ``path`` until it returns False (kazoo's
    ``DataWatch``)."""
    return DataWatch(zk, path, callback)


def on_session_lost(
    zk: Any, callback: Callable[[], None], renewed: Callable[[], None] | None = None
) -> Callable[[], None]:
    """Call ``callback()`` whenever ``zk``'s session is lost (its ephemeral znodes are gone), and ``renewed()``
    when the client is connected again after such a loss, with a new session (the time to make its ephemeral znodes
    again); both on kazoo's event thread, which they must not block.  Returns the function that stops this."""
    lost = False

    def listener(state: str) -> None:
        nonlocal lost
        if state == KazooState.LOST:
            lost = True
            callback()
        elif state == KazooState.CONNECTED and lost:
            lost = False
            if renewed is not None:
                renewed()

    zk.add_listener(listener)

    def remove() -> None:
        try:
            zk.remove_listener(listener)
        except Exception:  # noqa: BLE001 - already removed
            pass

    return remove
