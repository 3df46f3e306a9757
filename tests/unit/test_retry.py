"""Retry policies: bounded tries, back-off, deadline, and the errors' flags deciding."""

from __future__ import annotations

import asyncio
import random

import pytest

from bkspark.errors import (
    BookieIOError,
    BookieUnavailableError,
    ClientClosedError,
    LedgerFencedError,
    MetadataError,
    MetadataVersionError,
    NoSuchLedgerMetadataError,
    UnauthorizedAccessError,
    ends_writes,
    invalidates_client,
    is_retriable,
)
from bkspark.metadata.store import ZkMetadataStore
from bkspark import retry as retry_module
from bkspark.retry import BOOKIE_RETRY, METADATA_CAS_RETRY, RetryPolicy


class Flaky:
    """Fails with ``errors`` in turn, then returns ``"ok"``; counts its calls."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_flags_say_what_to_do() -> None:
    assert is_retriable(BookieUnavailableError()) and is_retriable(MetadataVersionError())
    assert not is_retriable(LedgerFencedError()) and not is_retriable(ValueError("not ours"))
    assert ends_writes(LedgerFencedError()) and ends_writes(UnauthorizedAccessError()) and ends_writes(ClientClosedError())
    assert not ends_writes(BookieIOError()) and not ends_writes(BookieUnavailableError())
    assert invalidates_client(BookieIOError()) and invalidates_client(MetadataError())
    assert not invalidates_client(NoSuchLedgerMetadataError()) and not invalidates_client(MetadataVersionError())


def test_retriable_errors_are_retried_until_success() -> None:
    fn = Flaky(BookieUnavailableError(), BookieIOError())
    assert RetryPolicy(max_tries=3, delay=0.0).call(fn) == "ok" and fn.calls == 3


def test_non_retriable_error_is_raised_at_once() -> None:
    fn = Flaky(LedgerFencedError("fenced"))
    with pytest.raises(LedgerFencedError):
        RetryPolicy(max_tries=5, delay=0.0).call(fn)
    assert fn.calls == 1


def test_tries_are_bounded_and_the_last_error_is_raised() -> None:
    errors = [BookieUnavailableError(f"try {i}") for i in range(10)]
    fn = Flaky(*errors)
    with pytest.raises(BookieUnavailableError, match="try 2"):
        RetryPolicy(max_tries=3, delay=0.0).call(fn)
    assert fn.calls == 3


class _FakeClock:
    """``time`` for bkspark.retry: ``monotonic`` advances only by ``sleep`` (the machine's speed plays no part)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_deadline_stops_before_the_tries_run_out(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _FakeClock()
    monkeypatch.setattr(retry_module, "time", clock)
    fn = Flaky(*[BookieUnavailableError() for _ in range(100)])
    with pytest.raises(BookieUnavailableError):
        RetryPolicy(max_tries=100, delay=0.06, backoff=1.0, deadline=0.2, jitter=0.0).call(fn)
    # Tries at 0, 0.06, 0.12 and 0.18 s; the next wait would end at 0.24 s, past the deadline: stop there.
    assert fn.calls == 4 and clock.slept == pytest.approx([0.06] * 3)


def test_backoff_grows_to_the_cap() -> None:
    attempts = RetryPolicy(max_tries=10, delay=0.1, backoff=2.0, max_delay=0.3, jitter=0.0, deadline=None).start()
    delays = [attempts.next_delay(BookieUnavailableError()) for _ in range(5)]
    assert delays == pytest.approx([0.1, 0.2, 0.3, 0.3, 0.3])


def test_retry_on_overrides_the_flag_for_one_call_site() -> None:
    policy = RetryPolicy(max_tries=3, delay=0.0).with_(retry_on=lambda exc: isinstance(exc, KeyError))
    fn = Flaky(KeyError("taken"), KeyError("taken"))
    assert policy.call(fn) == "ok" and fn.calls == 3


def test_call_async_sleeps_on_the_loop() -> None:
    async def run() -> None:
        fn = Flaky(MetadataVersionError(), MetadataVersionError())

        async def attempt() -> str:
            return fn()

        assert await RetryPolicy(max_tries=3, delay=0.01).call_async(attempt) == "ok"
        assert fn.calls == 3

    asyncio.run(run())


def test_bad_policies_are_refused() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_tries=0)
    with pytest.raises(ValueError):
        RetryPolicy(deadline=0)
    with pytest.raises(ValueError):
        RetryPolicy(backoff=0.5)


def test_the_two_policies_are_bounded() -> None:
    for policy in (BOOKIE_RETRY, METADATA_CAS_RETRY):
        assert policy.max_tries < 100 and policy.deadline is not None
    assert METADATA_CAS_RETRY.retry_on(MetadataVersionError()) and not METADATA_CAS_RETRY.retry_on(NoSuchLedgerMetadataError())


def test_jitter_and_ctokens_leave_the_global_random_alone() -> None:
    """A library's retries and create tokens neither consume nor depend on the application's seeded ``random``
    (and, drawn from the system's randomness, differ between processes forked from one parent)."""
    random.seed(1234)
    state = random.getstate()
    attempts = RetryPolicy(max_tries=10, delay=0.1, backoff=1.0, jitter=0.5, deadline=None).start()
    delays = [attempts.next_delay(BookieUnavailableError()) for _ in range(5)]
    tokens = {ZkMetadataStore.new_ctoken(None) for _ in range(5)}  # type: ignore[arg-type] - uses no state
    assert random.getstate() == state
    assert all(0.1 <= d <= 0.15 for d in delays) and len(set(delays)) > 1
    assert len(tokens) == 5 and all(0 <= t < 2**63 - 1 for t in tokens)
