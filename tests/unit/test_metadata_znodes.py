"""bkspark/metadata/znodes.py with a fake kazoo client: waiting out an outage under the one retry policy, a multi
whose answer a lost connection took, the hand-written back-offs that became policies (the writer's clean-up,
a Spark task's ZooKeeper probe), and the session and ownership rules the bookie's registration uses."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError, OperationTimeoutError

from bkspark.datasource import clients as ds_clients
from bkspark.datasource import cleanup as ds_cleanup
from bkspark.errors import MetadataError
from bkspark.metadata.retry import RECONNECT_RETRY, ZK_AUTH_FAILURES, reconnect_forever, zk_error
from bkspark.metadata.znodes import Outcome, Znodes, on_session_lost, zk_errors_as


class FlakyZk:
    """A kazoo stand-in whose ``get`` fails with ``failures`` transient errors first, connected throughout."""

    connected = True

    def __init__(self, failures: int, session_timeout: float = 10.0) -> None:
        self.failures = failures
        self.calls = 0
        self.session_timeout = session_timeout

    def get(self, path: str, watch: Any = None) -> tuple[bytes, Any]:
        self.calls += 1
        if self.calls <= self.failures:
            raise (ConnectionLoss if self.calls % 2 else OperationTimeoutError)()
        return b"data", None

    def transaction(self) -> Any:
        class Tx:
            def check(self, *a: Any) -> None: ...

            def commit(self) -> list[Any]:
                raise ConnectionLoss()

        return Tx()


def test_an_outage_shorter_than_the_session_is_waited_out() -> None:
    zk = FlakyZk(failures=5)
    znodes = Znodes(zk)
    assert znodes.session_timeout == 10.0
    assert znodes.outlast_outage(lambda: znodes.get("/x")) == (b"data", None)
    assert zk.calls == 6


def test_an_outage_past_the_session_timeout_raises_the_last_transient_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline is the session timeout from the first try: a clock that jumps past it ends the wait."""
    zk = FlakyZk(failures=1_000)
    znodes = Znodes(zk, session_timeout=5.0)
    clock = [1000.0]

    def tick() -> float:
        clock[0] += 1.0  # each look at the clock: one second later
        return clock[0]

    monkeypatch.setattr(time, "monotonic", tick)
    with pytest.raises((ConnectionLoss, OperationTimeoutError)):
        znodes.outlast_outage(lambda: znodes.get("/x"))
    assert 2 <= zk.calls < 10


def test_other_errors_are_not_retried_and_name_what_failed() -> None:
    class Broken:
        def get(self, path: str, watch: Any = None) -> Any:
            raise NoNodeError()

        def get_children(self, path: str) -> Any:
            from kazoo.exceptions import NoAuthError

            raise NoAuthError()

    znodes = Znodes(Broken())
    assert znodes.outlast_outage(lambda: znodes.get("/x")) is None  # absent is a value
    with pytest.raises(MetadataError, match="cannot list things: NoAuthError"):
        with zk_errors_as("cannot list things"):
            znodes.children("/x")


def test_a_multi_whose_answer_the_connection_took_says_so() -> None:
    tx = Znodes(FlakyZk(0)).multi()
    tx.check("/fence")
    assert tx.commit() is None and tx.errors == []
    assert Outcome.NO_NODE.value == "no node"


def test_a_cleanup_step_is_tried_three_times_under_its_policy_then_left_unfinished(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the commit point a failing clean-up step never raises: CLEANUP_RETRY's tries, its doubling pauses, then
    False (the job's record stays for the next write or recoverjobs)."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    cleaner = ds_cleanup.CommitCleaner.__new__(ds_cleanup.CommitCleaner)
    tries: list[int] = []

    def failing() -> None:
        tries.append(1)
        raise MetadataError("ZooKeeper away")

    assert cleaner._retrying("commit.published", "delete", "job-1", failing) is False
    assert len(tries) == ds_cleanup.CLEANUP_ATTEMPTS == 3
    assert slept == [ds_cleanup.CLEANUP_BACKOFF_SECONDS, 2 * ds_cleanup.CLEANUP_BACKOFF_SECONDS]
    tries.clear()
    outcomes = iter([MetadataError("once"), None])

    def flaky() -> None:
        tries.append(1)
        error = next(outcomes)
        if error is not None:
            raise error

    assert cleaner._retrying("commit.published", "delete", "job-1", flaky) is True and len(tries) == 2


def test_a_spark_tasks_zookeeper_probe_pauses_as_the_reconnect_policy_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.1 s doubling to 1 s (RECONNECT_RETRY), the last pause cut to end on the zkTimeout deadline."""
    slept: list[float] = []
    clock = [0.0]

    def sleep(seconds: float) -> None:
        slept.append(round(seconds, 3))
        clock[0] += seconds

    def refuse(uri: str, timeout: float) -> None:
        raise MetadataError("refused")

    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(ds_clients, "check_zookeeper_reachable", refuse)
    with pytest.raises(MetadataError, match=r"tried for zkTimeout=3 s"):
        ds_clients.wait_zookeeper_reachable("zk+hierarchical://127.0.0.1:1/ledgers", budget=3.0)
    assert slept == [0.1, 0.2, 0.4, 0.8, 1.0, 0.5]
    assert (RECONNECT_RETRY.delay, RECONNECT_RETRY.max_delay) == (0.1, 1.0)


class ListenedZk:
    """A kazoo stand-in that only keeps its state listeners (kazoo calls them with its ``KazooState`` strings)."""

    client_id = (77, b"pw")

    def __init__(self) -> None:
        self.listeners: list[Any] = []

    def add_listener(self, listener: Any) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: Any) -> None:
        self.listeners.remove(listener)

    def tell(self, *states: str) -> None:
        for state in states:
            for listener in list(self.listeners):
                listener(state)


def test_a_renewed_session_is_told_once_after_each_loss_and_never_without_one() -> None:
    """The bookie registers again when, and only when, its client is connected with a new session after the old one
    was lost (docs/architecture.md, "ZooKeeper: one door"): a suspended connection that comes back keeps its session
    and its ephemeral znodes."""
    zk = ListenedZk()
    told: list[str] = []
    stop = on_session_lost(zk, lambda: told.append("lost"), lambda: told.append("renewed"))
    zk.tell("CONNECTED", "SUSPENDED", "CONNECTED")
    assert told == []
    zk.tell("SUSPENDED", "LOST", "CONNECTED", "CONNECTED")
    assert told == ["lost", "renewed"]
    zk.tell("LOST", "LOST", "CONNECTED")
    assert told == ["lost", "renewed", "lost", "lost", "renewed"]
    stop()
    zk.tell("LOST", "CONNECTED")
    assert told == ["lost", "renewed", "lost", "lost", "renewed"] and zk.listeners == []
    only_lost: list[str] = []
    on_session_lost(zk, lambda: only_lost.append("lost"))  # without ``renewed``: the audit's use
    zk.tell("LOST", "CONNECTED")
    assert only_lost == ["lost"]


def test_an_ephemeral_znode_is_owned_by_the_session_that_made_it() -> None:
    class Stat:
        def __init__(self, owner: int) -> None:
            self.ephemeralOwner = owner

    nodes = Znodes(ListenedZk())
    assert nodes.owns(Stat(77)) and not nodes.owns(Stat(78)) and not nodes.owns(Stat(0))  # 0: not ephemeral


def test_a_bookie_reconnects_for_ever_and_only_zookeepers_refusals_count_as_authentication_failures() -> None:
    from kazoo.exceptions import AuthFailedError, NoAuthError, SessionClosedRequireSaslError

    policy = reconnect_forever(max_delay=5.0)
    assert (policy.max_tries, policy.delay, policy.max_delay) == (-1, 0.1, 5.0)
    for refused in (AuthFailedError(), NoAuthError(), SessionClosedRequireSaslError()):
        assert isinstance(refused, ZK_AUTH_FAILURES) and "requires authentication" in str(zk_error(refused))
    assert not isinstance(NoNodeError(), ZK_AUTH_FAILURES)
    assert str(zk_error(NoNodeError())).startswith("ZooKeeper error: NoNodeError")
