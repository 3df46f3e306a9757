"""The asyncio API on the caller's own loop (its argument checks, its threads), and entries too large for a frame,
against real Python bookies."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from bkspark.client import BookKeeper
from bkspark.client.aio import AsyncBookKeeper
from bkspark.errors import DigestMismatchError, EntryTooLargeError, InvalidOptionError, LedgerClosedError
from bkspark.protocol.framing import DEFAULT_MAX_FRAME_SIZE
from tests.harness.python_bookie import PythonBookieCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(module_zk_root, tmp_path_factory):  # type: ignore[no-untyped-def]
    with PythonBookieCluster(
        module_zk_root.metadata_service_uri, tmp_path_factory.mktemp("async"), bookies=3, journal_sync_data=False
    ) as c:
        c.start_all()
        yield c


def test_async_client_on_the_callers_loop(cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """Create, pipelined appends, close, open, read, batch read, async iteration, delete: all awaited."""

    async def run() -> None:
        async with AsyncBookKeeper(module_zk_root.metadata_service_uri) as bk:
            assert bk.loop is asyncio.get_running_loop()
            lh = await bk.create_ledger(3, 3, 2, password=b"pw", custom_metadata={"app": b"aio"})
            ids = await asyncio.gather(*(lh.append(b"row-%d" % i) for i in range(200)))
            assert ids == list(range(200)) and lh.last_add_confirmed == 199
            await lh.close()
            assert lh.is_closed
            with pytest.raises(LedgerClosedError):
                await lh.append(b"late")
            rh = await bk.open_ledger(lh.ledger_id, password=b"pw")
            assert rh.last_add_confirmed == 199 and rh.metadata.custom_metadata["app"] == b"aio"
            assert [e.payload for e in await rh.read(0, 9)] == [b"row-%d" % i for i in range(10)]
            batch = await rh.batch_read(10, 50)
            assert [e.entry_id for e in batch] == list(range(10, 10 + len(batch))) and batch
            everything = [e.payload async for e in rh.read_batched(0, 199, batch_size=40)]
            assert everything == [b"row-%d" % i for i in range(200)]
            assert lh.ledger_id in await bk.list_ledgers()
            await bk.delete_ledger(lh.ledger_id)
            assert lh.ledger_id not in await bk.list_ledgers()
        assert bk.closed

    asyncio.run(run())


def test_entry_over_the_frame_limit_is_refused_locally_and_the_ledger_stays_writable(cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """A 6 MB entry (over the 5 MiB frame) fails at once, names the option, blames no bookie; the next append works."""
    with BookKeeper(module_zk_root.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 3, 2)
        lh.append(b"before")
        with pytest.raises(EntryTooLargeError, match="nettyMaxFrameSizeBytes") as info:
            lh.append(b"x" * 6_000_000)
        assert info.value.context["max_payload"] == lh.max_payload < DEFAULT_MAX_FRAME_SIZE
        assert isinstance(info.value, ValueError) and f"at most {lh.max_payload} bytes" in str(info.value)  # names the limit
        with pytest.raises(EntryTooLargeError):
            lh.append_async(b"x" * 6_000_000)
        assert lh.append(b"ok") == 1  # ids stay dense: nothing was taken by the refused entries
        # The largest entry that fits is accepted by every bookie (the limit is exact or conservative).
        assert lh.append(b"y" * lh.max_payload) == 2
        lh.close()
        assert len(lh.metadata.ensembles) == 1  # no ensemble change: no bookie was blamed
        assert bk.aio.pool.failure_history == {}
        rh = bk.open_ledger(lh.ledger_id)
        assert [len(e.payload) for e in rh.read(0, 2)] == [6, 2, lh.max_payload]


def test_entry_limit_over_v3_and_on_the_async_handle(cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """Same rule over v3 (a larger request header), through the asyncio API."""

    async def run() -> None:
        async with AsyncBookKeeper(module_zk_root.metadata_service_uri, useV2WireProtocol=False) as bk:
            lh = await bk.create_ledger(3, 3, 2)
            with pytest.raises(EntryTooLargeError):
                lh.append(b"z" * (lh.max_payload + 1))
            assert await lh.append(b"z" * lh.max_payload) == 0
            assert await lh.append(b"small") == 1
            await lh.close()
            assert len(lh.metadata.ensembles) == 1

    asyncio.run(run())


def test_arguments_are_checked_when_called_the_same_in_both_apis(cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md: a wrong type is a TypeError naming the argument, a wrong value an InvalidOptionError, raised
    by the call itself (iterators included), in the blocking API and the asyncio one underneath alike."""
    with BookKeeper(module_zk_root.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 3, 2)
        for i in range(10):
            lh.append(b"e%d" % i)
        rh = bk.open_ledger(lh.ledger_id, recovery=False)  # the writer goes on
        assert rh.last_add_confirmed == 8  # entry 9 carries LAC 8 (piggy-backed at send time)
        for client, reader in ((bk, rh), (bk.aio, rh.aio)):
            with pytest.raises(TypeError, match="ledger id"):
                client.open_ledger(float(lh.ledger_id))
            with pytest.raises(InvalidOptionError, match="ledger id"):
                client.delete_ledger(-1)
            with pytest.raises(TypeError, match="ack_quorum_size"):
                client.create_ledger(3, 3, True)
            with pytest.raises(InvalidOptionError):
                client.create_ledger(2, 3, 2)  # E < Qw
            with pytest.raises(InvalidOptionError, match="entry range"):
                reader.read(5, 3)
            with pytest.raises(InvalidOptionError, match="last add confirmed"):
                reader.read(0, 9)
            with pytest.raises(InvalidOptionError, match="entry range"):
                reader.read_batched(5, 3)
            with pytest.raises(TypeError, match="first entry id"):
                reader.read_batched("0", 3)
            with pytest.raises(InvalidOptionError, match="entry range"):
                reader.read_batches(5, 3)
            with pytest.raises(InvalidOptionError, match="rows_per_group"):
                reader.read_payload_groups(0, 3, rows_per_group=0)
        assert [e.payload for e in rh.read_unconfirmed(9, 9)] == [b"e9"]  # no LAC check
        lh.close()
        empty = bk.create_ledger(3, 3, 2)
        empty.close()
        assert list(bk.open_ledger(empty.ledger_id)) == []  # iterating reads up to the LAC: none here


def test_zookeeper_calls_run_in_the_clients_own_pool_never_in_the_users_default_executor(cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md, "Threads": kazoo is thread-based, and its calls go to the client's ``bkspark-zk`` pool (8
    threads), so an asyncio user's default executor is left to them; the blocking client's loop is a daemon thread."""

    async def run() -> None:
        users = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="users-default")
        asyncio.get_running_loop().set_default_executor(users)
        async with AsyncBookKeeper(module_zk_root.metadata_service_uri) as bk:
            ran_on: list[tuple[str, str]] = []  # (store method, thread it ran on)
            for name in ("generate_ledger_id", "create_ledger_metadata", "read_ledger_metadata",
                         "write_ledger_metadata", "delete_ledger_metadata", "list_ledgers"):
                method = getattr(bk.store, name)

                def recording(*args, _method=method, _name=name, **kwargs):  # type: ignore[no-untyped-def]
                    ran_on.append((_name, threading.current_thread().name))
                    return _method(*args, **kwargs)

                setattr(bk.store, name, recording)
            lh = await bk.create_ledger(3, 3, 2)
            await lh.append(b"x")
            await lh.close()
            rh = await bk.open_ledger(lh.ledger_id)
            assert [e.payload for e in await rh.read(0, 0)] == [b"x"]
            assert lh.ledger_id in await bk.list_ledgers()
            await bk.get_ledger_metadata(lh.ledger_id)
            await bk.delete_ledger(lh.ledger_id)
            assert {name for name, _ in ran_on} == {"generate_ledger_id", "create_ledger_metadata",
                                                    "read_ledger_metadata", "write_ledger_metadata",
                                                    "delete_ledger_metadata", "list_ledgers"}
            assert all(thread.startswith("bkspark-zk") for _, thread in ran_on), ran_on  # never on the loop
            # 8 threads: twelve ZooKeeper calls that block at once run 8 at a time.
            now, most, lock = [0], [0], threading.Lock()

            def blocking_call() -> None:
                with lock:
                    now[0] += 1
                    most[0] = max(most[0], now[0])
                time.sleep(0.2)
                with lock:
                    now[0] -= 1

            await asyncio.gather(*(bk.services.in_thread(blocking_call) for _ in range(12)))
            assert most[0] == 8
            names = [t.name for t in threading.enumerate()]
            assert 1 <= sum(name.startswith("bkspark-zk") for name in names) <= 8
            assert not [name for name in names if name.startswith("users-default")]  # its threads start on first use

    asyncio.run(run())
    with BookKeeper(module_zk_root.metadata_service_uri):
        loops = [t for t in threading.enumerate() if t.name == "bkspark-client"]
        assert loops and all(t.daemon for t in loops)


def test_a_scoped_ledger_without_an_id_gets_a_random_63_bit_one_and_the_counter_stays(cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md: with a scope id != 0 and no id, a random 63-bit id is drawn, BP-35 style, with no ZooKeeper
    counter: the next scope-0 ledger takes the id after the one before (Python bookies advertise scope ids)."""
    with BookKeeper(module_zk_root.metadata_service_uri) as bk:
        before = bk.create_ledger(3, 3, 2)
        scoped = [bk.create_ledger(3, 3, 2, scope_id=77) for _ in range(3)]
        after = bk.create_ledger(3, 3, 2)
        assert after.ledger_id == before.ledger_id + 1
        scoped_ids = [lh.ledger_id for lh in scoped]
        # bk.zk and bk.ledgers_root (docs/client.md, "More of the API"): the session and the root the ledgers live in
        assert bk.ledgers_root == module_zk_root.path and bk.zk.connected
        znode = bk.store.ledger_path(after.ledger_id)
        assert znode.startswith(f"{bk.ledgers_root}/") and bk.zk.exists(znode) is not None
        assert len(set(scoped_ids)) == 3 and all(0 <= lid < 2**63 for lid in scoped_ids)
        assert max(scoped_ids) - min(scoped_ids) > 1_000  # drawn, not counted (false for one draw in about 2^50)
        assert sorted(bk.list_ledgers(scope_id=77)) == sorted(scoped_ids)
        for lh in (before, after, *scoped):
            lh.close()


def test_digest_type_autodetection_is_on_by_default_and_off_refuses_another_digest(cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md, Configuration: ``enableDigestTypeAutodetection`` (True) reads with the ledger's own digest
    whatever the caller names; turned off, another digest type is refused, as Java's client refuses it."""
    uri = module_zk_root.metadata_service_uri
    with BookKeeper(uri) as bk:
        lh = bk.create_ledger(3, 3, 2, digest_type="CRC32C", password=b"pw")
        lh.append(b"x")
        lh.close()
        with bk.open_ledger(lh.ledger_id, password=b"pw", digest_type="CRC32") as rh:
            assert [e.payload for e in rh.read(0, 0)] == [b"x"]
    with BookKeeper(uri, enableDigestTypeAutodetection=False) as bk:
        with pytest.raises(DigestMismatchError, match="digest type"):
            bk.open_ledger(lh.ledger_id, password=b"pw", digest_type="CRC32")
        with bk.open_ledger(lh.ledger_id, password=b"pw", digest_type="CRC32C") as rh:
            assert [e.payload for e in rh.read(0, 0)] == [b"x"]


def test_flush_waits_for_every_append_and_append_cb_calls_back_in_order(cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md, "More of the API": ``lh.flush()`` returns once every append made before it is acknowledged;
    the asyncio handle's ``append_cb(payload, callback)`` calls ``callback(entry_id, None)`` per entry, in order."""
    with BookKeeper(module_zk_root.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 3, 2)
        futures = [lh.append_async(b"f%d" % i * 100) for i in range(300)]
        lh.flush()
        assert all(f.done() for f in futures) and lh.last_add_confirmed == 299
        lh.close()

    async def run() -> None:
        async with AsyncBookKeeper(module_zk_root.metadata_service_uri) as bk:
            lh = await bk.create_ledger(3, 3, 2)
            called: list[tuple[int | None, BaseException | None]] = []
            for i in range(300):
                lh.append_cb(b"c%d" % i, lambda entry_id, error: called.append((entry_id, error)))
            await lh.flush()
            assert called == [(i, None) for i in range(300)] and lh.last_add_confirmed == 299
            await lh.close()
            rh = await bk.open_ledger(lh.ledger_id)
            assert [e.payload for e in await rh.read(0, 299)] == [b"c%d" % i for i in range(300)]

    asyncio.run(run())


@pytest.mark.parametrize(("conf", "negotiated_ms"), [({}, 10_000), ({"zkTimeout": 6}, 6_000)], ids=["default", "6s"])
def test_zk_timeout_is_the_clients_zookeeper_session_timeout(module_zk_root, conf, negotiated_ms) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md, Configuration: ``zkTimeout`` (10 s by default) is the client's ZooKeeper session timeout:
    the server's ``cons`` lists the client's session with the timeout it negotiated."""
    from tests.harness.zookeeper import four_letter_word

    with BookKeeper(module_zk_root.metadata_service_uri, **conf) as bk:
        session = f"sid=0x{bk.zk.client_id[0]:x}"
        [line] = [ln for ln in four_letter_word(module_zk_root.server.port, "cons").splitlines() if session in ln]
        assert f",to={negotiated_ms}," in line, line


def test_iterating_a_read_handle_gives_every_entry_up_to_the_lac_through_batch_reads(cluster, module_zk_root) -> None:  # type: ignore[no-untyped-def]
    """docs/client.md: ``for entry in rh`` gives every entry up to the LAC (not the entries written past it), read
    through batch reads, not single reads."""
    with BookKeeper(module_zk_root.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 3, 2)
        lh.append_many([b"i%d" % i for i in range(250)]).result(timeout=30)
        lh.append(b"last")  # carries LAC 249: a reader that does not recover sees 249
        rh = bk.open_ledger(lh.ledger_id, recovery=False)
        assert rh.last_add_confirmed == 249
        ops = bk.aio.services.ops
        batch_reads: list[int] = []
        single_reads: list[int] = []
        batch_read_async, read, read_v2_many = ops.batch_read_async, ops.read, ops.read_v2_many

        async def counting_batch(bookie_id, ledger_id, start, *args):  # type: ignore[no-untyped-def]
            batch_reads.append(start)
            return await batch_read_async(bookie_id, ledger_id, start, *args)

        def counting_read(bookie_id, ledger_id, entry_id, *args, **kwargs):  # type: ignore[no-untyped-def]
            single_reads.append(entry_id)
            return read(bookie_id, ledger_id, entry_id, *args, **kwargs)

        def counting_many(bookie_id, ledger_id, entry_ids, *args, **kwargs):  # type: ignore[no-untyped-def]
            single_reads.extend(entry_ids)
            return read_v2_many(bookie_id, ledger_id, entry_ids, *args, **kwargs)

        ops.batch_read_async, ops.read, ops.read_v2_many = counting_batch, counting_read, counting_many  # type: ignore[method-assign]
        assert [e.payload for e in rh] == [b"i%d" % i for i in range(250)]
        assert batch_reads and single_reads == []
        lh.close()
