"""The client API checks its arguments when called, before anything is sent or awaited."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from bkspark.client.aio import AsyncBookKeeper, AsyncLedgerHandle, AsyncReadHandle
from bkspark.client.bookkeeper import BookKeeper, LedgerHandle, ReadHandle
from bkspark.errors import ClientClosedError, InvalidOptionError, MetadataError, NoSuchEntryError, NoSuchLedgerError
from bkspark.placement.base import check_quorums
from bkspark.placement.random_policy import RandomEnsemblePlacementPolicy
from bkspark.protocol import v2, v3
from bkspark.protocol.correlation import (
    add_key,
    add_keys,
    batch_read_key,
    is_batch_read_key,
    key_ids,
    read_key,
    read_keys,
    response_error,
    v2_response_key,
)
from bkspark.protocol.ledger_metadata import check_custom_metadata

URI = "zk+hierarchical://127.0.0.1:1/ledgers"  # never contacted: checks come first


def test_create_ledger_checks_types_eagerly() -> None:
    bk = AsyncBookKeeper(URI)
    with pytest.raises(TypeError, match="custom_metadata"):
        bk.create_ledger(3, 2, 2, "CRC32C", b"", {"bookie:3181"})  # type: ignore[arg-type]  # a set, not a mapping
    with pytest.raises(TypeError, match="ensemble_size"):
        bk.create_ledger("3", 2, 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ack_quorum_size"):
        bk.create_ledger(3, 2, True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="password"):
        bk.create_ledger(password="secret")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="custom_metadata"):
        bk.create_ledger(custom_metadata={"app": "text, not bytes"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="scope id"):
        bk.create_ledger(scope_id=1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError):
        bk.create_ledger(2, 3, 2)  # E < Qw
    with pytest.raises(InvalidOptionError, match="ledger id"):
        bk.create_ledger(ledger_id=-1)
    # Good arguments on a client nobody started: a clear error, and no coroutine left behind.
    with pytest.raises(ClientClosedError, match="start"):
        bk.create_ledger(3, 2, 2)


def test_open_and_delete_check_types_eagerly() -> None:
    bk = AsyncBookKeeper(URI)
    with pytest.raises(TypeError, match="ledger id"):
        bk.open_ledger("7")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="recovery"):
        bk.open_ledger(7, recovery="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="password"):
        bk.open_ledger(7, password="pw")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ledger id"):
        bk.delete_ledger(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="metadata_service_uri"):
        AsyncBookKeeper(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="conf"):
        AsyncBookKeeper(URI, ["not", "a", "mapping"])  # type: ignore[arg-type]


def test_quorum_and_custom_metadata_checks() -> None:
    with pytest.raises(TypeError):
        check_quorums(3, 2.0, 2)  # type: ignore[arg-type]
    assert check_custom_metadata(None) == {} and check_custom_metadata({"k": bytearray(b"v")}) == {"k": b"v"}
    with pytest.raises(TypeError):
        check_custom_metadata({"b:1"})
    from bkspark.placement.rackaware import RackawareEnsemblePlacementPolicy

    for policy in (RandomEnsemblePlacementPolicy().initialize({}), RackawareEnsemblePlacementPolicy().initialize({})):
        policy.on_cluster_changed({"a:1", "b:1", "c:1"}, set())
        with pytest.raises(TypeError, match="custom_metadata"):
            policy.new_ensemble(3, 2, 2, {"a:1"})  # type: ignore[arg-type]  # a set taken for custom metadata
        with pytest.raises(TypeError):
            policy.new_ensemble(3, "2", 2)  # type: ignore[arg-type]
        assert sorted(policy.new_ensemble(3, 2, 2, {"app": b"x"}, exclude=frozenset())) == ["a:1", "b:1", "c:1"]


def test_async_client_start_needs_a_reachable_zookeeper() -> None:
    async def run() -> None:
        bk = AsyncBookKeeper(URI, zkTimeout=0.5)
        with pytest.raises(MetadataError):
            await bk.start()
        assert bk.closed
        with pytest.raises(ClientClosedError):
            bk.create_ledger()

    asyncio.run(run())


def test_responses_turn_into_typed_errors_once() -> None:
    """v2 rc and v3 status map to the registered classes; keys match requests to responses."""
    ok = v2.AddResponse(0, 5, 2)
    assert response_error(ok, "b:1") is None and v2_response_key(ok) == add_key(5, 2)
    missing = v2.ReadResponse(2, 5, 1)
    err = response_error(missing, "b:1")
    assert isinstance(err, NoSuchEntryError) and err.context["bookie_id"] == "b:1" and err.context["entry_id"] == 1
    assert v2_response_key(missing) == read_key(5, 1)
    request = v3.read_request(9, 5, 1, 0)
    assert isinstance(response_error(v3.read_response(request, 402), "b:2"), NoSuchLedgerError)
    assert response_error(v3.read_response(request, 0, body=b"x"), "b:2") is None


def test_table_keys_are_integers_one_per_ledger_entry_and_kind() -> None:
    """v2 add and read keys pack (ledger, entry, kind) into one int (never tracked by the garbage collector); every
    pair of ids and kinds has its own, the ids come back out signed, and a range of entries gives the keys one by one
    would.  Batch-read keys stay pairs and are told apart."""
    ids = [0, 1, 2, 7, 2**32, 2**62, 2**63 - 1, -1, -(2**63)]
    keys = {(kind, ledger, entry): f(ledger, entry) for kind, f in (("add", add_key), ("read", read_key))
            for ledger in ids for entry in ids}
    assert len(set(keys.values())) == len(keys) and all(type(k) is int for k in keys.values())
    for (_kind, ledger, entry), key in keys.items():
        assert key_ids(key) == (ledger, entry)
        assert not is_batch_read_key(key)
    for ledger in (0, 5, 2**63 - 1):
        for entries in (range(0), range(3, 3), range(5, 2), range(0, 10), range(2**63 - 3, 2**63), [4, -1, 0, 9],
                        range(0, 10, 3)):
            assert add_keys(ledger, entries) == [add_key(ledger, e) for e in entries]
            assert read_keys(ledger, entries) == [read_key(ledger, e) for e in entries]
    assert is_batch_read_key(batch_read_key(12)) and batch_read_key(12) not in set(keys.values())


def test_requests_to_one_bookie_are_retried_by_the_bookie_policy() -> None:
    """bookie_info: retriable failures are tried again within BOOKIE_RETRY's bounds; others are not."""
    from types import SimpleNamespace

    from bkspark.errors import BookieUnavailableError, UnauthorizedAccessError
    from bkspark.retry import RetryPolicy

    async def run() -> None:
        bk = AsyncBookKeeper(URI)
        answers: list[BaseException | tuple[int, int]] = [BookieUnavailableError("restarting"), (100, 40)]
        asked: list[str] = []

        async def bookie_info_async(bookie_id: str) -> tuple[int, int]:
            asked.append(bookie_id)
            answer = answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer

        bk._started = True  # a started client's services, without servers
        bk.services = SimpleNamespace(  # type: ignore[assignment]
            ops=SimpleNamespace(bookie_info_async=bookie_info_async), bookie_retry=RetryPolicy(max_tries=3, delay=0.0)
        )
        assert await bk.bookie_info("b:1") == (100, 40) and asked == ["b:1", "b:1"]
        answers[:] = [UnauthorizedAccessError("no"), (1, 1)]
        with pytest.raises(UnauthorizedAccessError):
            await bk.bookie_info("b:2")
        assert asked[-1] == "b:2" and len(asked) == 3  # not retried
        bk.zk_executor.shutdown(wait=False)

    asyncio.run(run())


#: The asyncio API's methods docs/client.md lists, per (blocking class, asyncio class); ``None``: asyncio only.
_ASYNC_API = [
    (BookKeeper, AsyncBookKeeper, ["create_ledger", "create_ledger_adv", "open_ledger", "delete_ledger", "list_ledgers",
                                   "get_ledger_metadata", "bookie_info", "list_entries_on_bookie"]),
    (LedgerHandle, AsyncLedgerHandle, ["append", "flush", "write_lac", "force", "close"]),
    (None, AsyncLedgerHandle, ["append_cb", "append_many"]),
    (ReadHandle, AsyncReadHandle, ["read", "read_unconfirmed", "batch_read", "read_batched", "read_last_add_confirmed"]),
    (None, AsyncReadHandle, ["read_range_batched"]),
]


@pytest.mark.parametrize(("blocking", "asyncio_class", "names"), _ASYNC_API)
def test_the_asyncio_api_has_the_blocking_methods_under_the_same_names_and_arguments(
    blocking: type | None, asyncio_class: type, names: list[str]
) -> None:
    """docs/client.md: ``AsyncBookKeeper`` and its handles have the blocking API's methods, same names and arguments."""
    for name in names:
        assert callable(getattr(asyncio_class, name, None)), f"{asyncio_class.__name__}.{name}"
        if blocking is None:
            continue
        async_params = inspect.signature(getattr(asyncio_class, name)).parameters
        params = inspect.signature(getattr(blocking, name)).parameters
        assert [(p.name, p.kind, p.default) for p in params.values()] == [
            (p.name, p.kind, p.default) for p in async_params.values()
        ], name


def test_the_documented_defaults_of_more_of_the_api() -> None:
    """docs/client.md, "More of the API": ``create_ledger_adv(ledger_id, scope_id=0, ...)``, ``list_ledgers(scope_id=0)``,
    ``get_ledger_metadata(ledger_id, scope_id=0)``, ``read_batched(first, last, batch_size=100, max_size=0, parallel=4)``."""

    def defaults(method: object) -> dict[str, object]:
        return {name: p.default for name, p in inspect.signature(method).parameters.items()  # type: ignore[arg-type]
                if p.default is not inspect.Parameter.empty}

    assert defaults(BookKeeper.create_ledger_adv) == {"scope_id": 0}
    assert defaults(BookKeeper.list_ledgers) == {"scope_id": 0}
    assert defaults(BookKeeper.get_ledger_metadata) == {"scope_id": 0}
    assert defaults(ReadHandle.read_batched) == {"batch_size": 100, "max_size": 0, "parallel": 4}
    assert defaults(BookKeeper.open_ledger)["recovery"] is True  # recovery=True by default
