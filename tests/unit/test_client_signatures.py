"""The blocking client's methods keep their async twins' signatures (issue 45 item 6); so does follow_ledger.

``bkspark/client/bookkeeper.py`` is a facade over ``bkspark/client/aio.py``: each public blocking method runs the
async one of the same name.  The two are written by hand, so this test holds them together: the same parameters
(names, kinds, defaults, annotations) in the same order; only the return annotation differs (a value for an
awaitable of it).  A method on one side only is named in :data:`BLOCKING_ONLY` / :data:`ASYNC_ONLY` with why.
"""

from __future__ import annotations

import inspect

import pytest

from bkspark.client.aio import AsyncBookKeeper, AsyncLedgerHandle, AsyncReadHandle
from bkspark.client.bookkeeper import BookKeeper, LedgerHandle, ReadHandle
from bkspark.client.tail import follow_ledger, follow_ledger_async

PAIRS = [(BookKeeper, AsyncBookKeeper), (LedgerHandle, AsyncLedgerHandle), (ReadHandle, AsyncReadHandle)]

#: Public methods of a blocking class without an async twin, and why.
BLOCKING_ONLY = {
    "BookKeeper": {
        "run_coroutine": "the bridge itself: runs a coroutine of the async client on its loop",
        "open_tail": "tails are loop objects already; the async side opens one with LedgerTail(handle)",
        "refresh_tails": "runs bkspark.client.tail.refresh_tails (the async form) on the loop",
        "wait_for_tails": "runs bkspark.client.tail.wait_for_any_tail (the async form) on the loop",
    },
    "LedgerHandle": {
        "append_async": "the blocking handle's future-returning add (the async handle's append is awaitable)",
    },
    "ReadHandle": {
        "read_batched": "a generator over read_range_batched (the async handle's async iterator is read_batched too)",
    },
}
#: Public methods of an async class without a blocking twin, and why.
ASYNC_ONLY = {
    "AsyncBookKeeper": {"start": "the blocking client starts in its constructor"},
    "AsyncLedgerHandle": {"append_cb": "a loop-thread callback add: the blocking client has append_async"},
    "AsyncReadHandle": {
        "check_open": "the async handle's guard, used by the blocking handle",
        "check_batched_args": "argument checks shared with the blocking handle",
        "read_range_batched": "an async iterator the blocking read_batched drives",
        "read_payload_runs": "the async form under read_batches",
    },
}


def _public_methods(cls: type) -> dict[str, object]:
    return {
        name: member
        for name, member in vars(cls).items()
        if not name.startswith("_") and callable(member) and not isinstance(member, (property, type))
    }


def _parameters(fn: object) -> list[tuple[str, object, object, object]]:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default, p.annotation) for p in sig.parameters.values()]


@pytest.mark.parametrize("blocking, asynchronous", PAIRS, ids=[b.__name__ for b, _ in PAIRS])
def test_each_blocking_method_has_its_async_twins_parameters(blocking: type, asynchronous: type) -> None:
    sync_methods = _public_methods(blocking)
    async_methods = _public_methods(asynchronous)
    only_sync = set(sync_methods) - set(async_methods) - set(BLOCKING_ONLY.get(blocking.__name__, {}))
    only_async = set(async_methods) - set(sync_methods) - set(ASYNC_ONLY.get(asynchronous.__name__, {}))
    assert not only_sync, f"{blocking.__name__} methods without an async twin: {sorted(only_sync)}"
    assert not only_async, f"{asynchronous.__name__} methods without a blocking twin: {sorted(only_async)}"
    for name in sorted(set(sync_methods) & set(async_methods)):
        assert _parameters(sync_methods[name]) == _parameters(async_methods[name]), (
            f"{blocking.__name__}.{name} and {asynchronous.__name__}.{name} take different parameters"
        )


def test_the_exceptions_listed_still_exist() -> None:
    """An entry of BLOCKING_ONLY / ASYNC_ONLY names a real method (the lists do not outlive what they excuse)."""
    classes = {cls.__name__: cls for pair in PAIRS for cls in pair}
    for table in (BLOCKING_ONLY, ASYNC_ONLY):
        for cls_name, names in table.items():
            for name in names:
                assert name in _public_methods(classes[cls_name]), f"{cls_name}.{name}"


def test_the_blocking_facade_keeps_loop_only_parts_private() -> None:
    """The connection pool and the shared services are loop-thread objects: reached through ``bk.aio`` only."""
    assert not hasattr(BookKeeper, "pool") and not hasattr(BookKeeper, "ctx") and not hasattr(BookKeeper, "_run")


def test_follow_ledger_async_takes_follow_ledgers_parameters() -> None:
    """The tail's two generators, blocking and async, are twins written by hand as the clients' methods are
    (docs/architecture.md, "Repeated code"): the same parameters, in the same order, with the same defaults."""
    assert _parameters(follow_ledger) == _parameters(follow_ledger_async)
