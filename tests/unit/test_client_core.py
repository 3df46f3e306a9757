"""Write/ack/ensemble-change/read logic of the client against in-memory fake bookies and metadata."""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import replace
from typing import Any, Callable

import pytest

from bkspark.client.conf import ClientConf
from bkspark.client.services import ClientServices
from bkspark.protocol.ledger_name import LedgerRef
from bkspark.client.pool import BookiePool
from bkspark.client.reader import LedgerReader
from bkspark.client.recovery import recover_ledger
from bkspark.client.schedule import CoverageSet, is_striped
from bkspark.client.writer import LedgerWriter
from bkspark.errors import (
    BookieIOError,
    BookieTimeoutError,
    BookieUnavailableError,
    DigestMismatchError,
    IllegalOpError,
    InvalidOptionError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataVersionError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    TooManyRequestsError,
    UnauthorizedAccessError,
    WriteOnReadOnlyBookieError,
)
from bkspark.metadata.store import Versioned
from bkspark.placement import policy_from_conf
from bkspark.placement.random_policy import RandomEnsemblePlacementPolicy
from bkspark.protocol.digest import Digester, DigestType
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState, write_set
from bkspark.client.payloads import PackedPayloads
from bkspark.protocol import v2
from bkspark.protocol.speedups import speedups
from bkspark.protocol.v2 import ReadResponse
from tests.harness.deadline import GENEROUS

BOOKIES = [f"b{i}:3181" for i in range(6)]


class FakeBookie:
    """Stores entries; each request can be delayed, failed or left unanswered."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.entries: dict[tuple[int, int], bytes] = {}
        self.add_error: Callable[[int], BaseException | None] = lambda e: None
        self.read_error: Callable[[int], BaseException | None] = lambda e: None
        self.delay = 0.0
        self.hang = False
        self.fenced: set[int] = set()
        self.adds: list[tuple[int, int]] = []
        self.reads: list[int] = []
        self.asked = 0
        self.batches: list[int] = []


class FakeOps:
    """The BookieOps interface over FakeBookies (same callbacks, same threading: the loop)."""

    def __init__(self, bookies: dict[str, FakeBookie], timeout: float = 0.5) -> None:
        self.bookies = bookies
        self.pool = BookiePool(None, max_frame_size=5 * 1024 * 1024)  # type: ignore[arg-type]
        self.timeout = timeout

    def data_version(self, scope_id: int) -> str:
        return "v2"

    @staticmethod
    def encode_v2_add(master_key: bytes, entry: bytes, flags: int) -> bytes:
        return b""

    def add(self, bookie_id, ledger_id, entry_id, master_key, entry, flags, scope_id, callback, arg=None, v2_frame=None):  # type: ignore[no-untyped-def]
        b = self.bookies[bookie_id]

        def answer() -> None:
            err = b.add_error(entry_id)
            if err is None and ledger_id in b.fenced and not flags & 0x2:
                err = LedgerFencedError("fenced")
            if err is None:
                b.entries[(ledger_id, entry_id)] = bytes(entry)
                b.adds.append((ledger_id, entry_id))
            callback(None, err, arg)

        if b.hang:
            asyncio.get_running_loop().call_later(
                self.timeout, callback, None, BookieTimeoutError("timeout", bookie_id=bookie_id), arg
            )
            return
        asyncio.get_running_loop().call_later(b.delay, answer)

    def read(self, bookie_id, ledger_id, entry_id, scope_id, callback, arg=None, *, flags=0, master_key=None):  # type: ignore[no-untyped-def]
        b = self.bookies[bookie_id]
        b.asked += 1  # when sent (b.reads: when answered)

        def reply(data: bytes | None, err: BaseException | None) -> None:
            callback(None if data is None else ReadResponse(0, ledger_id, entry_id, data), err, arg)

        def answer() -> None:
            b.reads.append(entry_id)
            if flags & 0x1:
                b.fenced.add(ledger_id)
            err = b.read_error(entry_id)
            if err is not None:
                reply(None, err)
                return
            if entry_id == -1:
                mine = [e for (lid, e) in b.entries if lid == ledger_id]
                if not mine:
                    reply(None, NoSuchLedgerError("none"))
                    return
                entry_id_ = max(mine)
                reply(b.entries[(ledger_id, entry_id_)], None)
                return
            data = b.entries.get((ledger_id, entry_id))
            if data is None:
                reply(None, NoSuchEntryError("missing"))
            else:
                reply(data, None)

        if b.hang:
            asyncio.get_running_loop().call_later(self.timeout, reply, None, BookieTimeoutError("timeout"))
            return
        asyncio.get_running_loop().call_later(b.delay, answer)

    def read_v2_many(self, bookie_id, ledger_id, entry_ids, args, callback, many=None):  # type: ignore[no-untyped-def]
        """BookieOps.read_v2_many: each read answers as read() would; with ``many``, the successful answers of one
        loop iteration go to it together as (arg, entry) pairs, as a connection hands over a chunk's."""
        self.bulk_reads = getattr(self, "bulk_reads", 0) + 1
        if many is None:
            for entry_id, arg in zip(entry_ids, args):
                self.read(bookie_id, ledger_id, entry_id, 0, callback, arg)
            return
        loop = asyncio.get_running_loop()
        came: list[tuple[object, bytes]] = []

        def hand_over() -> None:
            pairs = list(came)
            came.clear()
            many(pairs)

        def one(response, error, arg):  # type: ignore[no-untyped-def]
            if error is not None:
                callback(response, error, arg)
                return
            if not came:
                loop.call_soon(hand_over)
            came.append((arg, response.entry))

        for entry_id, arg in zip(entry_ids, args):
            self.read(bookie_id, ledger_id, entry_id, 0, one, arg)

    def can_batch_read(self, bookie_id: str, scope_id: int) -> bool:
        return self.pool.supports_batch_read(bookie_id)

    async def batch_read_async(self, bookie_id, ledger_id, start, max_count, max_size, scope_id):  # type: ignore[no-untyped-def]
        b = self.bookies[bookie_id]
        b.batches.append(start)
        await asyncio.sleep(b.delay)
        err = b.read_error(start)
        if err is not None:
            raise err
        out = []
        e = start
        while (ledger_id, e) in b.entries and (max_count <= 0 or len(out) < max_count):
            out.append(b.entries[(ledger_id, e)])
            e += 1
        if not out:
            raise NoSuchEntryError("missing")
        return out


class FakeStore:
    """In-memory ledger metadata with znode versions and an optional injected conflict."""

    def __init__(self) -> None:
        self.data: dict[int, Versioned] = {}
        self.conflicts = 0
        self.writes = 0

    def read_ledger_metadata(self, ledger_id: int, scope_id: int = 0) -> Versioned:
        return self.data[ledger_id]

    def write_ledger_metadata(self, ledger_id: int, md: LedgerMetadata, version: int, scope_id: int = 0) -> Versioned:
        current = self.data[ledger_id]
        if self.conflicts:
            self.conflicts -= 1
            # Someone else wrote meanwhile (custom metadata change): bump the version.
            self.data[ledger_id] = Versioned(current.metadata, current.version + 1)
            raise MetadataVersionError("conflict")
        if version != current.version:
            raise MetadataVersionError("conflict")
        self.writes += 1
        self.data[ledger_id] = Versioned(replace(md, ctoken=0), version + 1)
        return self.data[ledger_id]


class Harness:
    def __init__(self, e: int = 3, w: int = 3, a: int = 2, bookies: int = 4, **conf: Any) -> None:
        self.bookies = {b: FakeBookie(b) for b in BOOKIES[:bookies]}
        self.ops = FakeOps(self.bookies)
        self.store = FakeStore()
        self.conf = ClientConf.from_mapping({"speculativeReadTimeout": 50, **conf})
        self.policy = RandomEnsemblePlacementPolicy().initialize({})
        self.policy.on_cluster_changed(set(self.bookies), set())
        self.e, self.w, self.a = e, w, a
        self.md = LedgerMetadata(
            ensemble_size=e,
            write_quorum_size=w,
            ack_quorum_size=a,
            digest_type=DigestType.CRC32C,
            password=b"pw",
            ensembles={0: tuple(BOOKIES[:e])},
        )
        self.store.data[7] = Versioned(self.md, 0)
        self.ref = LedgerRef(7)
        self.digester = Digester(DigestType.CRC32C, b"pw")

    def ctx(self) -> ClientServices:
        loop = asyncio.get_running_loop()
        return ClientServices(self.conf, loop, self.ops, self.store, None, self.policy)  # type: ignore[arg-type]

    def writer(self) -> LedgerWriter:
        return LedgerWriter(self.ctx(), self.ref, self.store.data[7], b"pw")

    def entry_header(self, bookie: str, entry_id: int) -> tuple[int, int, int, int]:
        return struct.unpack(">qqqq", self.bookies[bookie].entries[(7, entry_id)][:32])


def appended(
    writer: LedgerWriter, payloads: list[bytes], handed_back: list[tuple[int, float]] | None = None
) -> tuple[list[asyncio.Future], list[int]]:
    """Append each payload (in a running loop) with a callback that settles its future; the entry ids go to the
    returned list in the order they are handed back (and, with their time, to ``handed_back``)."""
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future] = []
    order: list[int] = []
    for p in payloads:
        fut = loop.create_future()

        def done(eid: Any, exc: Any, fut: asyncio.Future = fut) -> None:
            if eid is not None:
                order.append(eid)
                if handed_back is not None:
                    handed_back.append((eid, time.monotonic()))
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(eid)

        writer.append(p, done)
        futures.append(fut)
    return futures, order


async def append_all(writer: LedgerWriter, payloads: list[bytes]) -> list[Any]:
    futures, order = appended(writer, payloads)
    results = await asyncio.gather(*futures, return_exceptions=True)
    return [results, order]


# -- pure schedule helpers ---------------------------------------------------------------------


def test_write_sets_round_robin_like_java() -> None:
    assert [write_set(e, 4, 3) for e in range(4)] == [[0, 1, 2], [1, 2, 3], [2, 3, 0], [3, 0, 1]]
    assert write_set(10, 5, 2) == [0, 1]
    assert is_striped(5, 2) and not is_striped(3, 3)


def test_coverage_rule() -> None:
    cov = CoverageSet(3, 3, 2)  # every quorum needs Qw - Qa + 1 = 2 answers
    cov.add(0)
    assert not cov.covered()
    cov.add(2)
    assert cov.covered()
    striped = CoverageSet(5, 2, 2)  # Qw - Qa + 1 = 1 per window of 2
    for i in (0, 2):
        striped.add(i)
    assert not striped.covered()  # window {3, 4} has no answer yet
    striped.add(4)
    assert striped.covered()  # every window of 2 now has one answer


def test_conf_accepts_java_and_snake_names() -> None:
    conf = ClientConf.from_mapping({"addEntryTimeoutSec": "7", "use_v2_wire_protocol": "false", "minNumRacksPerWriteQuorum": 3})
    assert conf.addEntryTimeoutSec == 7.0 and conf.useV2WireProtocol is False
    assert conf.placement_conf()["minNumRacksPerWriteQuorum"] == 3
    assert ClientConf.from_mapping(batch_read_enabled=False).batchReadEnabled is False
    with pytest.raises(InvalidOptionError):
        ClientConf.from_mapping({"batchReadEnabled": "maybe"})


def test_conf_defaults_and_aliases_are_the_documented_ones() -> None:
    """docs/client.md, "Configuration": every default of the table, and the aliases it names."""
    conf = ClientConf()
    assert conf.useV2WireProtocol is True
    assert (conf.addEntryTimeoutSec, conf.readEntryTimeoutSec, conf.zkTimeout) == (5.0, 5.0, 10.0)
    assert conf.speculativeReadTimeout == 2000
    assert conf.batchReadEnabled is True
    assert conf.nettyMaxFrameSizeBytes == 5 * 1024 * 1024
    assert (conf.maxPendingAdds, conf.maxPendingAddBytes, conf.readPipelineDepth) == (5000, 32 * 1024 * 1024, 256)
    assert type(policy_from_conf(conf.placement_conf())) is RandomEnsemblePlacementPolicy
    assert (conf.bookieAddressResolverEnabled, conf.enableBookieAddressTracking) == (True, True)
    assert conf.ledgerMetadataVersion == 3
    assert conf.storeSystemTimeAsLedgerCreationTime is False
    assert (conf.enableDigestTypeAutodetection, conf.reorderReadSequenceEnabled) == (True, True)
    assert (conf.maxNumEnsembleChanges, conf.explicitLacInterval) == (2**31 - 1, 0)
    aliased = ClientConf.from_mapping({"throttle": "7", "batch_read_enabled": "false", "enableBookieAddressResolver": "false"})
    assert (aliased.maxPendingAdds, aliased.batchReadEnabled, aliased.bookieAddressResolverEnabled) == (7, False, False)


# -- write path ------------------------------------------------------------------------------------


def test_acks_complete_in_order_with_lac_piggyback() -> None:
    h = Harness(3, 3, 2)

    async def run() -> None:
        # Later entries answer first: completions must still come in entry order.
        h.bookies[BOOKIES[0]].delay = 0.05
        w = h.writer()
        results, order = await append_all(w, [b"p%d" % i for i in range(20)])
        assert results == list(range(20)) and order == list(range(20))
        assert w.lac == 19 and w.confirmed_length == sum(len(b"p%d" % i) for i in range(20))
        ledger, entry, lac, length = h.entry_header(BOOKIES[1], 19)
        assert (ledger, entry) == (7, 19) and lac <= 18 and length == w.confirmed_length
        # The first entry carries LAC -1.
        assert h.entry_header(BOOKIES[2], 0)[2] == -1

    asyncio.run(run())


def test_each_entry_carries_the_lac_at_send_time_and_the_cumulative_length() -> None:
    """docs/client.md, "Write path": entry ids are dense from 0; each entry carries the LAC at send time and the
    cumulative length: appended one after another's acknowledgement, entry i carries LAC i - 1."""
    h = Harness(3, 3, 2)

    async def run() -> None:
        await _filled(h, 6)  # each append awaited before the next
        for i in range(6):
            for b in BOOKIES[:3]:
                assert h.entry_header(b, i) == (7, i, i - 1, 4 * (i + 1))  # payloads b"v%03d": 4 bytes each

    asyncio.run(run())


def test_an_entry_completes_on_qa_distinct_acknowledgements_not_on_repeated_ones() -> None:
    """docs/client.md, "Write path": an entry completes on Qa *distinct* acknowledgements: one bookie answering an
    add twice (a duplicate, e.g. a request sent again) counts once, so with the other two silent nothing completes."""
    h = Harness(3, 3, 2, bookies=3)
    h.bookies[BOOKIES[1]].hang = h.bookies[BOOKIES[2]].hang = True
    add = h.ops.add

    def doubled(bookie_id, ledger_id, entry_id, key, entry, flags, scope_id, callback, arg=None, v2_frame=None):  # type: ignore[no-untyped-def]
        if bookie_id == BOOKIES[0]:
            def twice(response, error, a):  # type: ignore[no-untyped-def]
                callback(response, error, a)
                callback(response, error, a)

            return add(bookie_id, ledger_id, entry_id, key, entry, flags, scope_id, twice, arg, v2_frame)
        return add(bookie_id, ledger_id, entry_id, key, entry, flags, scope_id, callback, arg, v2_frame)

    h.ops.add = doubled  # type: ignore[method-assign]

    async def run() -> None:
        w = h.writer()
        results, order = await append_all(w, [b"once"])
        assert order == [] and isinstance(results[0], Exception)  # never acknowledged (then no replacement: failed)
        assert w.lac == -1

    asyncio.run(run())


def test_ack_quorum_does_not_wait_for_slow_bookie() -> None:
    h = Harness(3, 3, 2)
    h.bookies[BOOKIES[2]].delay = 5.0  # slow but not failing

    async def run() -> None:
        w = h.writer()
        results, _ = await asyncio.wait_for(append_all(w, [b"x"] * 5), 2.0)
        assert results == list(range(5))

    asyncio.run(run())


@pytest.mark.parametrize(
    "error",
    [
        BookieIOError("disk"),
        WriteOnReadOnlyBookieError("read-only"),
        # ETOOMANYREQUESTS: Java's bookie refuses adds past maxPendingAddRequestsPerThread; Java's client and this
        # one replace the bookie (docs/client.md, "Write path"; docs/connector.md on the Spark writer's window).
        TooManyRequestsError("add queue full"),
        BookieTimeoutError("add timed out"),
        # A lost connection, and a BookieId the registry cannot resolve (BookiePool.get raises this for both).
        BookieUnavailableError("bookie is not registered, its address is unknown"),
    ],
    ids=["EIO", "EREADONLY", "ETOOMANYREQUESTS", "timeout", "unavailable"],
)
def test_failed_bookie_triggers_ensemble_change_and_resend(error: Exception) -> None:
    h = Harness(3, 3, 2, bookies=4)
    h.bookies[BOOKIES[1]].add_error = lambda e: error if e >= 5 else None

    async def run() -> None:
        w = h.writer()
        results, order = await append_all(w, [b"e%d" % i for i in range(15)])
        assert results == list(range(15)) and order == list(range(15))
        md = h.store.data[7].metadata
        # Entry 5's write set is (b2, b0, b1): b2 and b0 acknowledged it before b1's error
        # came back, so the LAC was 5 and the new segment starts at LAC + 1 = 6.
        assert sorted(md.ensembles) == [0, 6]
        new = md.ensembles[6]
        assert BOOKIES[1] not in new and BOOKIES[3] in new
        # The replacement got every entry of the new segment (pending ones re-sent).
        assert all((7, e) in h.bookies[BOOKIES[3]].entries for e in range(6, 15))

    asyncio.run(run())


def test_completions_are_held_while_the_ensemble_changes() -> None:
    """docs/client.md, "Write path": while an ensemble change writes its new segment, entries that reach Qa
    acknowledgements are not handed back; they come back, in entry order, once the new segment is written."""
    h = Harness(3, 3, 2, bookies=4)
    h.bookies[BOOKIES[0]].add_error = lambda e: BookieIOError("disk") if e >= 3 else None
    write = h.store.write_ledger_metadata
    written: list[float] = []

    def slow_write(*args: Any, **kwargs: Any) -> Versioned:
        time.sleep(0.3)  # the compare-and-set of the new segment takes a while (a ZooKeeper thread)
        versioned = write(*args, **kwargs)
        written.append(time.monotonic())
        return versioned

    h.store.write_ledger_metadata = slow_write  # type: ignore[method-assign]
    handed_back: list[tuple[int, float]] = []

    async def run() -> None:
        futures, _ = appended(h.writer(), [b"h%d" % i for i in range(10)], handed_back)
        assert await asyncio.gather(*futures) == list(range(10))

    asyncio.run(run())
    assert len(written) == 1 and sorted(h.store.data[7].metadata.ensembles) == [0, 3]
    assert [eid for eid, _ in handed_back] == list(range(10))
    assert all(at < written[0] for eid, at in handed_back if eid < 3)
    assert all(at >= written[0] for eid, at in handed_back if eid >= 3)  # Qa from b1 and b2 long before, held


def test_recently_failed_bookies_are_passed_over_as_replacements_while_others_can_serve() -> None:
    """docs/client.md, "Write path": a bookie that failed within ``bookieFailureHistoryExpirationMSec`` is not
    chosen as a replacement while another can serve (ten random placements here), and is chosen when none can."""

    def replacement(bookies: int) -> str:
        h = Harness(3, 3, 2, bookies=bookies)
        h.ops.pool.note_failure(BOOKIES[bookies - 1])  # the last bookie failed a moment ago
        h.bookies[BOOKIES[1]].add_error = lambda e: BookieIOError("disk") if e >= 2 else None

        async def run() -> str:
            results, _ = await append_all(h.writer(), [b"r%d" % i for i in range(5)])
            assert results == list(range(5))
            ensembles = h.store.data[7].metadata.ensembles
            assert len(ensembles) == 2
            (new,) = set(ensembles[max(ensembles)]) - set(ensembles[0])
            return new

        return asyncio.run(run())

    assert {replacement(5) for _ in range(10)} == {BOOKIES[3]}  # b4 failed recently: b3 every time
    assert replacement(4) == BOOKIES[3]  # b3 failed recently, and no other bookie can serve


def refusing_as_too_many(times: int) -> Callable[[int], BaseException | None]:
    """An add_error that refuses each entry ``times`` times as too many (ETOOMANYREQUESTS), then takes it."""
    refused: dict[int, int] = {}

    def add_error(entry_id: int) -> BaseException | None:
        refused[entry_id] = refused.get(entry_id, 0) + 1
        return TooManyRequestsError("add queue full") if refused[entry_id] <= times else None

    return add_error


def test_adds_refused_as_too_many_by_a_bookie_none_can_replace_are_sent_to_it_again() -> None:
    # A Java bookie past maxPendingAddRequestsPerThread with no spare bookie: Java's client would fail the ledger;
    # this one backs off and sends the adds again (docs/client.md, "Write path").
    h = Harness(1, 1, 1, bookies=1)
    h.bookies[BOOKIES[0]].add_error = refusing_as_too_many(3)

    async def run() -> None:
        w = h.writer()
        results, order = await append_all(w, [b"e%d" % i for i in range(20)])
        assert results == list(range(20)) and order == list(range(20))
        assert w.ensemble_changes == 0 and w.error is None
        assert h.store.data[7].metadata.ensembles == {0: (BOOKIES[0],)}
        assert sorted(e for _, e in h.bookies[BOOKIES[0]].adds) == list(range(20))

    asyncio.run(run())


def test_adds_refused_as_too_many_for_add_entry_timeout_fail_with_a_clear_error() -> None:
    h = Harness(1, 1, 1, bookies=1, addEntryTimeoutSec=0.3)
    h.bookies[BOOKIES[0]].add_error = lambda e: TooManyRequestsError("add queue full")

    async def run() -> None:
        w = h.writer()
        loop = asyncio.get_running_loop()
        start = loop.time()
        results, order = await asyncio.wait_for(append_all(w, [b"x"] * 5), GENEROUS)
        # Not at the first refusal: when the back-off's next wait would end past addEntryTimeoutSec (and not never).
        assert loop.time() - start >= 0.1
        assert order == [] and all(isinstance(r, TooManyRequestsError) for r in results)
        assert "addEntryTimeoutSec=0.3" in str(results[0]) and BOOKIES[0] in str(results[0])
        assert w.ensemble_changes == 0 and h.store.data[7].metadata.ensembles == {0: (BOOKIES[0],)}
        # The failure sticks, as any failed writer's does.
        again, _ = await append_all(w, [b"y"])
        assert isinstance(again[0], TooManyRequestsError)

    asyncio.run(run())


def test_the_back_off_of_refused_adds_starts_again_once_the_ledger_made_progress() -> None:
    # Refusals spread over longer than addEntryTimeoutSec, with entries taken in between: no failure.
    h = Harness(1, 1, 1, bookies=1, addEntryTimeoutSec=0.2)
    h.bookies[BOOKIES[0]].add_error = refusing_as_too_many(2)

    async def run() -> None:
        w = h.writer()
        loop = asyncio.get_running_loop()
        start = loop.time()
        for wave in range(8):
            results, _ = await append_all(w, [b"w%d" % wave] * 5)
            assert results == list(range(wave * 5, wave * 5 + 5))
            await asyncio.sleep(0.05)
        assert loop.time() - start > 0.4 and w.error is None

    asyncio.run(run())


class SerialBookieOps(FakeOps):
    """One bookie that works through its requests one at a time (``per_request`` s each) and holds at most
    ``queue`` accepted adds for ``hold`` s each, refusing the rest as too many: a Java bookie past
    ``maxPendingAddRequestsPerThread``.  Its refusals come back spread over the time it takes to get through a
    burst, as a real bookie's do."""

    def __init__(self, bookies: dict[str, FakeBookie], per_request: float, queue: int, hold: float) -> None:
        super().__init__(bookies)
        self.per_request, self.queue, self.hold = per_request, queue, hold
        self.free_at = 0.0
        self.held: list[float] = []
        self.tried: list[int] = []

    def add(self, bookie_id, ledger_id, entry_id, master_key, entry, flags, scope_id, callback, arg=None, v2_frame=None):  # type: ignore[no-untyped-def]
        loop = asyncio.get_running_loop()
        at = self.free_at = max(loop.time(), self.free_at) + self.per_request
        self.held = [until for until in self.held if until > at]
        self.tried.append(entry_id)
        if len(self.held) >= self.queue:
            loop.call_at(at, callback, None, TooManyRequestsError("add queue full"), arg)
            return
        self.held.append(at + self.hold)
        b = self.bookies[bookie_id]
        b.entries[(ledger_id, entry_id)] = bytes(entry)
        b.adds.append((ledger_id, entry_id))
        loop.call_at(at + self.hold, callback, None, None, arg)


def test_adds_refused_as_too_many_in_a_long_burst_are_sent_again_lowest_first() -> None:
    # A burst of 1,000 adds on a bookie that queues 10: the back-off's first rounds fire while the burst's
    # refusals still arrive, so the waiting adds interleave rounds.  Sent again in that order, the ledger's next
    # entry sat behind hundreds of later ones each round and the LAC stalled past addEntryTimeoutSec (seen with
    # a Java bookie in tests/integration/test_client_java_bookie_throttle.py); lowest first, every round moves it.
    h = Harness(1, 1, 1, bookies=1, addEntryTimeoutSec=2.0)
    h.ops = SerialBookieOps(h.bookies, per_request=0.0001, queue=10, hold=0.005)

    async def run() -> None:
        w = h.writer()
        results, order = await append_all(w, [b"e%d" % i for i in range(1000)])
        assert results == list(range(1000)) and order == list(range(1000))
        assert w.error is None and w.ensemble_changes == 0
        assert sorted(e for _, e in h.bookies[BOOKIES[0]].adds) == list(range(1000))
        assert len(h.ops.tried) > 2000  # refusals all along: the case under test happened

    asyncio.run(run())


def test_a_bookie_refusing_adds_as_too_many_is_not_asked_again_once_the_others_acknowledged() -> None:
    # E = W = 3, Qa = 2: two bookies acknowledge every entry and the LAC moves; the refusing one gets each entry
    # again until the entry is handed back, then no more (no endless resends), and no ensemble change.
    h = Harness(3, 3, 2, bookies=3)
    tries: list[int] = []

    def always_refuses(entry_id: int) -> BaseException:
        tries.append(entry_id)
        return TooManyRequestsError("add queue full")

    h.bookies[BOOKIES[2]].delay = 0.01
    h.bookies[BOOKIES[2]].add_error = always_refuses

    async def run() -> None:
        w = h.writer()
        results, order = await append_all(w, [b"e%d" % i for i in range(10)])
        assert results == list(range(10)) and order == list(range(10))
        await asyncio.sleep(0.3)
        settled = len(tries)
        await asyncio.sleep(0.3)
        assert len(tries) == settled
        assert w.ensemble_changes == 0 and w.error is None
        assert h.store.data[7].metadata.ensembles == {0: tuple(BOOKIES[:3])}

    asyncio.run(run())


def test_ensemble_change_retries_on_metadata_conflict() -> None:
    h = Harness(3, 3, 2, bookies=4)
    h.store.conflicts = 2
    h.bookies[BOOKIES[0]].hang = True

    async def run() -> None:
        w = h.writer()
        results, _ = await append_all(w, [b"z"] * 4)
        assert results == [0, 1, 2, 3]  # Qa = 2 without the hung bookie
        await asyncio.sleep(0.8)  # its adds time out after 0.5 s: the ensemble changes
        results, _ = await append_all(w, [b"z"] * 2)
        assert results == [4, 5]
        md = h.store.data[7].metadata
        assert sorted(md.ensembles) == [0, 4]
        assert md.ensembles[0] == tuple(BOOKIES[:3]) and BOOKIES[0] not in md.last_ensemble

    asyncio.run(run())


def test_metadata_conflicts_are_bounded_by_the_cas_policy() -> None:
    """A close that keeps losing the compare-and-set gives up after the policy's tries; the metadata stays OPEN."""
    from bkspark.retry import RetryPolicy

    h = Harness(3, 2, 2)
    h.store.conflicts = 100

    async def run() -> None:
        ctx = h.ctx()
        ctx.cas_retry = RetryPolicy(max_tries=3, delay=0.0)
        w = LedgerWriter(ctx, h.ref, h.store.data[7], b"pw")
        await append_all(w, [b"x"] * 2)
        with pytest.raises(MetadataVersionError):
            await w.close()
        assert h.store.conflicts == 100 - 3 and h.store.writes == 0
        assert h.store.data[7].metadata.state == LedgerState.OPEN
        h.store.conflicts = 0
        md = await w.close()  # the race is over: the same handle closes at the same end
        assert md.state == LedgerState.CLOSED and md.last_entry_id == 1

    asyncio.run(run())


def test_close_waits_for_a_running_ensemble_change() -> None:
    """A bookie failing after the last ack starts an ensemble change; close waits for it and keeps its segment."""
    h = Harness(3, 3, 2, bookies=4)

    async def run() -> None:
        w = h.writer()
        await append_all(w, [b"a"] * 3)
        w._on_ack(_late_op(w), 0, BOOKIES[0], BookieIOError("disk"))  # a failure that arrives after the ack
        assert w.changing_ensemble
        md = await w.close()
        assert md.state == LedgerState.CLOSED and sorted(md.ensembles) == [0, 3]
        assert BOOKIES[0] not in md.ensembles[3]

    asyncio.run(run())


def _late_op(w: LedgerWriter):  # type: ignore[no-untyped-def]
    """A stand-in for an add that was acknowledged already (its failure arrives after the ack)."""
    from bkspark.client.writer import _PendingAdd

    op = _PendingAdd(w.lac, b"", w.length, None)  # type: ignore[arg-type]
    op.callback = None  # type: ignore[assignment]
    return op


def test_no_replacement_fails_pending_adds() -> None:
    h = Harness(3, 3, 2, bookies=3)
    h.bookies[BOOKIES[0]].add_error = lambda e: BookieIOError("disk")

    async def run() -> None:
        w = h.writer()
        results, _ = await append_all(w, [b"z"] * 3)
        assert all(isinstance(r, NotEnoughBookiesError) for r in results)

    asyncio.run(run())


def test_max_num_ensemble_changes_bounds_the_changes_of_one_writer() -> None:
    """``maxNumEnsembleChanges`` (Java's key): past that many ensemble changes, a failing bookie fails the writer."""
    h = Harness(3, 3, 2, bookies=6, maxNumEnsembleChanges=1)
    h.bookies[BOOKIES[1]].add_error = lambda e: BookieIOError("disk") if e >= 5 else None
    h.bookies[BOOKIES[2]].add_error = lambda e: BookieIOError("disk") if e >= 10 else None

    async def run() -> None:
        w = h.writer()
        results, _ = await append_all(w, [b"e%d" % i for i in range(15)])
        acked = [r for r in results if isinstance(r, int)]
        assert acked == list(range(len(acked))) and 5 <= len(acked) < 10  # the second failure came during the first change
        assert w.ensemble_changes == 1
        assert all(isinstance(r, NotEnoughBookiesError) and "too many ensemble changes" in str(r) for r in results[len(acked):])
        assert sorted(h.store.data[7].metadata.ensembles) == [0, 6]  # the first change only

    asyncio.run(run())


def test_fenced_writer_never_acknowledges_later_entries() -> None:
    h = Harness(3, 3, 2)

    async def run() -> None:
        w = h.writer()
        results, _ = await append_all(w, [b"a"] * 3)
        assert results == [0, 1, 2]
        for b in h.bookies.values():
            b.fenced.add(7)
        results, order = await append_all(w, [b"b"] * 3)
        assert all(isinstance(r, LedgerFencedError) for r in results) and order == []
        for b in h.bookies.values():
            b.fenced.clear()  # even if a bookie would take it now, the handle refuses
        results, order = await append_all(w, [b"c"])
        assert isinstance(results[0], LedgerFencedError) and order == []
        # close() of a fenced writer leaves the metadata to the recovery (docs/client.md, "Write path")
        writes, before = h.store.writes, h.store.data[7]
        await w.close()
        assert h.store.writes == writes and h.store.data[7] is before and before.metadata.state == LedgerState.OPEN

    asyncio.run(run())


@pytest.mark.parametrize(
    "error",
    [UnauthorizedAccessError("wrong master key"), IllegalOpError("not allowed here")],
    ids=["unauthorized", "illegal-op"],
)
def test_unauthorized_or_illegal_op_fails_the_writer_without_replacing_the_bookie(error: Exception) -> None:
    """docs/client.md, "Write path": fenced / unauthorized / illegal op are the errors that do not replace the bookie;
    unauthorized, as fenced, fails every pending append and every later one with the same error."""
    h = Harness(3, 3, 2, bookies=4)
    h.bookies[BOOKIES[1]].add_error = lambda e: error if e >= 3 else None

    async def run() -> None:
        w = h.writer()
        results, order = await append_all(w, [b"u%d" % i for i in range(8)])
        assert results[:3] == [0, 1, 2] and order == [0, 1, 2]
        assert all(r is error for r in results[3:])
        later, _ = await append_all(w, [b"later"])
        assert later[0] is error
        assert h.store.writes == 0 and sorted(h.store.data[7].metadata.ensembles) == [0]  # no ensemble change
        assert not h.bookies[BOOKIES[3]].adds  # the spare bookie never got an entry
        assert w.lac == 2

    asyncio.run(run())


@pytest.mark.parametrize(
    ("ended", "error"),
    [(LedgerMetadata.in_recovery, LedgerFencedError), (lambda md: md.close(-1, 0), LedgerClosedError)],
    ids=["IN_RECOVERY", "CLOSED"],
)
def test_ensemble_change_on_recovering_or_closed_ledger_reports_fenced_or_closed(
    ended: Callable[[LedgerMetadata], LedgerMetadata], error: type[Exception]
) -> None:
    """docs/client.md: an ensemble change that finds the ledger IN_RECOVERY fails with LedgerFencedError, CLOSED
    with LedgerClosedError."""
    h = Harness(3, 3, 2, bookies=4)
    h.bookies[BOOKIES[2]].add_error = lambda e: BookieIOError("disk")
    h.bookies[BOOKIES[0]].delay = h.bookies[BOOKIES[1]].delay = 0.1  # the error comes first

    async def run() -> None:
        w = h.writer()
        v = h.store.data[7]
        h.store.data[7] = Versioned(ended(v.metadata), v.version + 1)
        results, _ = await append_all(w, [b"q"])
        assert type(results[0]) is error

    asyncio.run(run())


def test_close_waits_for_pending_appends_then_closes_at_their_end() -> None:
    """docs/client.md, "Write path": ``close()`` waits for pending appends, then writes CLOSED with the LAC and length:
    appends still unanswered when close() is called are acknowledged, and the ledger ends after the last of them."""
    h = Harness(3, 3, 2)
    for b in h.bookies.values():
        b.delay = 0.05

    async def run() -> None:
        w = h.writer()
        futures, _ = appended(w, [b"12345"] * 5)
        assert not any(f.done() for f in futures)
        md = await w.close()
        assert [f.result() for f in futures] == [0, 1, 2, 3, 4]
        assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, 4, 25)

    asyncio.run(run())


def test_close_writes_lac_and_length_and_detects_foreign_close() -> None:
    h = Harness(3, 2, 2)

    async def run() -> None:
        w = h.writer()
        await append_all(w, [b"12345"] * 4)
        md = await w.close()
        assert md.state == LedgerState.CLOSED and (md.last_entry_id, md.length) == (3, 20)
        assert h.store.data[7].metadata.last_entry_id == 3
        results, _ = await append_all(w, [b"late"])
        assert isinstance(results[0], LedgerClosedError)

        h2 = Harness(3, 2, 2)
        w2 = h2.writer()
        await append_all(w2, [b"x"] * 2)
        v = h2.store.data[7]
        h2.store.data[7] = Versioned(v.metadata.close(0, 1), v.version + 1)  # a recovery ended it at 0
        with pytest.raises(MetadataVersionError):
            await w2.close()

    asyncio.run(run())


# -- read path -------------------------------------------------------------------------------------


async def _filled(h: Harness, n: int) -> LedgerWriter:
    w = h.writer()
    for i in range(n):  # one at a time, so each entry piggy-backs the previous one as LAC
        await append_all(w, [b"v%03d" % i])
    return w


def test_read_skips_tampered_copy_and_speculates_past_a_slow_bookie() -> None:
    h = Harness(3, 3, 2)

    async def run() -> None:
        await _filled(h, 6)
        h.conf.reorderReadSequenceEnabled = False
        first = BOOKIES[3 % 3]
        bad = bytearray(h.bookies[first].entries[(7, 3)])
        bad[-1] ^= 1
        h.bookies[first].entries[(7, 3)] = bytes(bad)
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        got = await reader.read_range(0, 5)
        assert [e.payload for e in got] == [b"v%03d" % i for i in range(6)]
        # Slow first replica: the speculative read (50 ms) gets the answer from the next one.
        h.bookies[BOOKIES[0]].delay = 3.0
        v = await asyncio.wait_for(reader.read_entry(0), 1.0)
        assert bytes(v.payload) == b"v000"
        h.bookies[BOOKIES[0]].delay = 0.0
        # Every copy bad: a digest error.
        for b in h.bookies.values():
            if (7, 4) in b.entries:
                data = bytearray(b.entries[(7, 4)])
                data[-1] ^= 1
                b.entries[(7, 4)] = bytes(data)
        with pytest.raises(DigestMismatchError):
            await reader.read_entry(4)
        with pytest.raises(NoSuchEntryError):
            await reader.read_entry(99)

    asyncio.run(run())


@pytest.mark.parametrize("wrong", ["entry id", "ledger id"])
def test_a_copy_of_another_entry_or_ledger_is_refused_and_the_next_replica_read(wrong: str) -> None:
    """docs/client.md, "Read path": every entry's digest, ledger id and entry id are checked: a bookie answering
    with a well-formed copy of another entry (or of the same entry of another ledger) is a bad copy, and the next
    replica is read, in a single read and in a range read alike."""
    h = Harness(3, 3, 2)

    async def run() -> None:
        await _filled(h, 6)
        h.conf.reorderReadSequenceEnabled = False
        first = BOOKIES[3 % 3]  # entry 3's write set starts at index 0
        if wrong == "entry id":
            h.bookies[first].entries[(7, 3)] = h.bookies[first].entries[(7, 4)]
        else:
            h.bookies[first].entries[(7, 3)] = h.digester.package_entry(8, 3, 2, 16, b"v003")
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        assert bytes((await reader.read_entry(3)).payload) == b"v003"
        assert [e.payload for e in await reader.read_range(0, 5)] == [b"v%03d" % i for i in range(6)]

    asyncio.run(run())


@pytest.mark.parametrize("enabled", [True, False])
def test_replicas_are_asked_in_the_order_of_the_policys_reorder_read_sequence(enabled: bool) -> None:
    """docs/client.md, "Read path": a bad copy or any error moves on to the next replica of the write set, in the order
    of the policy's ``reorder_read_sequence`` (given the recent failures); ``reorderReadSequenceEnabled=false`` keeps
    the write set's order."""

    class Reversing(RandomEnsemblePlacementPolicy):
        def reorder_read_sequence(self, ensemble, write_set, failures):  # type: ignore[no-untyped-def]
            seen.append(dict(failures))
            return list(reversed(write_set))

    seen: list[dict[str, int]] = []
    h = Harness(3, 3, 2, reorderReadSequenceEnabled=enabled)
    h.policy = Reversing().initialize({})
    h.policy.on_cluster_changed(set(h.bookies), set())
    asked: list[str] = []

    async def run() -> None:
        await _filled(h, 2)
        h.ops.pool.note_failure(BOOKIES[1])
        for b in h.bookies.values():
            b.read_error = lambda e: BookieIOError("disk")
        h.bookies[BOOKIES[0]].read_error = lambda e: None  # only the write set's first member can answer
        read = h.ops.read

        def recording(bookie_id, *args, **kwargs):  # type: ignore[no-untyped-def]
            asked.append(bookie_id)
            return read(bookie_id, *args, **kwargs)

        h.ops.read = recording  # type: ignore[method-assign]
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        assert bytes((await reader.read_entry(0)).payload) == b"v000"

    asyncio.run(run())
    if enabled:
        assert asked == [BOOKIES[2], BOOKIES[1], BOOKIES[0]]  # write set (0, 1, 2) reversed, each error moving on
        assert seen and BOOKIES[1] in seen[0]  # the recent failures are the policy's to weigh
    else:
        assert asked == [BOOKIES[0]] and seen == []


@pytest.mark.parametrize(("speculative_ms", "speculates"), [(0, False), (50, True)])
def test_a_speculative_read_timeout_of_zero_disables_speculation(speculative_ms: int, speculates: bool) -> None:
    """docs/client.md, Configuration: ``speculativeReadTimeout`` 0 disables speculative reads; every bookie answering
    slowly, each entry is then asked of one replica only, in a range read and a single read alike."""
    h = Harness(3, 3, 2, speculativeReadTimeout=speculative_ms)

    async def run() -> None:
        await _filled(h, 6)
        for b in h.bookies.values():
            b.delay = 0.2
            b.asked = 0
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        got = await reader.read_range(0, 5)
        assert [e.payload for e in got] == [b"v%03d" % i for i in range(6)]
        assert bytes((await reader.read_entry(0)).payload) == b"v000"
        asked = sum(b.asked for b in h.bookies.values())
        assert asked > 7 if speculates else asked == 7  # 7 reads, one replica each without speculation

    asyncio.run(run())


@pytest.mark.parametrize("count", [6, 40], ids=["one-range-read", "longer"])
def test_a_range_read_keeps_at_most_read_pipeline_depth_reads_in_flight(count: int) -> None:
    """docs/client.md, Configuration and "Read path": ``readPipelineDepth`` single reads in flight per call; a range
    longer than it keeps that many in flight, one started as each ends, and every entry comes back in order."""
    h = Harness(3, 3, 2, readPipelineDepth=8, speculativeReadTimeout=0)
    in_flight: list[int] = []

    async def run() -> None:
        await _filled(h, count)
        for b in h.bookies.values():
            b.delay = 0.01
            b.asked, b.reads = 0, []
        read = h.ops.read

        def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
            read(*args, **kwargs)
            in_flight.append(sum(b.asked - len(b.reads) for b in h.bookies.values()))

        h.ops.read = counting  # type: ignore[method-assign]
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        got = await reader.read_range(0, count - 1)
        assert [e.payload for e in got] == [b"v%03d" % i for i in range(count)]
        assert sum(b.asked for b in h.bookies.values()) == count  # one replica each: no speculation, no failure
        assert max(in_flight) == min(count, 8)

    asyncio.run(run())


@pytest.mark.parametrize("multiplier", [2.0, 3.0])
def test_speculative_reads_back_off_by_the_configured_multiplier(multiplier: float) -> None:
    """docs/client.md, "Read path": after ``speculativeReadTimeout`` ms without an answer the next replica is asked as
    well, then again after the delay times ``speculativeReadTimeoutBackoffMultiplier``, until every replica was."""
    h = Harness(3, 3, 2, speculativeReadTimeoutBackoffMultiplier=multiplier)

    async def run() -> None:
        await _filled(h, 1)
        h.conf.reorderReadSequenceEnabled = False
        for b in h.bookies.values():
            b.delay, b.asked = 0.5, 0
        loop = asyncio.get_running_loop()
        armed: list[float] = []
        call_later = loop.call_later

        def counting(delay, callback, *args):  # type: ignore[no-untyped-def]
            if getattr(callback, "__name__", "") == "speculate":
                armed.append(delay)
            return call_later(delay, callback, *args)

        loop.call_later = counting  # type: ignore[method-assign]
        try:
            reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
            assert bytes((await reader.read_entry(0)).payload) == b"v000"
        finally:
            loop.call_later = call_later  # type: ignore[method-assign]
        assert armed[:2] == pytest.approx([0.05, 0.05 * multiplier])  # before the second and the third replica
        assert sum(b.asked for b in h.bookies.values()) == 3

    asyncio.run(run())


def test_a_range_read_arms_one_speculative_timer_for_the_reads_it_sends_together() -> None:
    """read_range sends its first readPipelineDepth reads at once and arms one timer for them (not one each); when
    it fires, each read still waiting for the slow bookie speculates as its own timer would have, and a read
    started later, one per answer, arms its own."""
    h = Harness(3, 2, 2, readPipelineDepth=8)  # striped: every entry on 2 of 3 bookies, single reads only

    async def run() -> None:
        await _filled(h, 12)
        h.conf.reorderReadSequenceEnabled = False
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        loop = asyncio.get_running_loop()
        armed: list[float] = []
        call_later = loop.call_later

        def counting(delay, callback, *args):  # type: ignore[no-untyped-def]
            if getattr(callback, "__name__", "") in ("_speculate_group", "speculate"):
                armed.append(delay)  # a speculative timer (the fake bookies answer through call_later too)
            return call_later(delay, callback, *args)

        loop.call_later = counting  # type: ignore[method-assign]
        try:
            got = await reader.read_range(0, 11)
            assert [e.payload for e in got] == [b"v%03d" % i for i in range(12)]
            # 8 reads sent together: one timer; the 4 started one by one as answers came: one each.
            assert armed == [0.05] * 5
            assert h.ops.bulk_reads == 3  # the 8 went as one run of requests to each of the 3 bookies
            armed.clear()
            h.bookies[BOOKIES[0]].delay = 3.0  # the first replica of entries 0, 2, 3, 5, ... answers late
            got = await asyncio.wait_for(reader.read_range(0, 7), 1.0)
            assert [e.payload for e in got] == [b"v%03d" % i for i in range(8)]
            # the group's timer, then each read that speculated armed its backed-off next step
            assert armed[0] == 0.05 and armed[1:] and set(armed[1:]) == {0.1}
        finally:
            loop.call_later = call_later  # type: ignore[method-assign]
            h.bookies[BOOKIES[0]].delay = 0.0

    asyncio.run(run())


def test_a_striped_range_is_read_as_one_range_read_and_its_replicas_step_in() -> None:
    """A striped ledger's batch read falls back to one _RangeRead per readPipelineDepth entries: each entry's first
    replica asked in one run per bookie, answers handed over together, digests checked at the end. A bad copy, a
    failed read and a slow bookie make only the entries concerned ask their next replica (a bad copy after the
    whole range came); an entry no replica holds and an entry every replica spoiled fail the read, typed; a
    cancelled read asks nothing more."""
    h = Harness(3, 2, 2, readPipelineDepth=16, batchReadEnabled=True)

    async def run() -> None:
        await _filled(h, 40)
        h.conf.reorderReadSequenceEnabled = False
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        want = [b"v%03d" % i for i in range(40)]
        h.ops.bulk_reads = 0
        for b in h.bookies.values():
            b.reads.clear()
        assert await reader.batch_read_payloads(0, 0, 0, 39) == want
        assert h.ops.bulk_reads == 3 * 3  # 40 entries: ranges of 16, 16 and 8, one run to each bookie each
        assert sorted(e for b in h.bookies.values() for e in b.reads) == list(range(40))  # each entry asked once

        def spoil(bookie: str, entry_id: int) -> None:
            data = bytearray(h.bookies[bookie].entries[(7, entry_id)])
            data[-1] ^= 1
            h.bookies[bookie].entries[(7, entry_id)] = bytes(data)

        first_of = {e: BOOKIES[e % 3] for e in range(40)}  # write set (e % 3, (e + 1) % 3), asked in that order
        spoil(first_of[3], 3)
        h.bookies[first_of[5]].read_error = lambda e: BookieIOError("disk") if e == 5 else None
        for b in h.bookies.values():
            b.reads.clear()
        assert await reader.batch_read_payloads(0, 0, 0, 39) == want
        assert h.bookies[BOOKIES[1]].reads.count(3) == 1 and h.bookies[BOOKIES[0]].reads.count(5) == 1
        assert {first_of[3], first_of[5]} <= set(h.ops.pool.failures_since(60))
        h.bookies[first_of[5]].read_error = lambda e: None

        # a slow bookie: the first replica of a third of the entries answers in 3 s; the range takes ~50 ms
        slow = h.bookies[BOOKIES[2]]
        slow.delay = 3.0
        assert await asyncio.wait_for(reader.batch_read_payloads(16, 0, 0, 31), 1.0) == want[16:32]
        slow.delay = 0.0

        for bookie in (BOOKIES[1], BOOKIES[2]):  # entry 7's write set: bookies 1 and 2
            spoil(bookie, 7)
        with pytest.raises(DigestMismatchError):
            await reader.batch_read_payloads(0, 0, 0, 39)
        for bookie in (BOOKIES[2], BOOKIES[0]):
            del h.bookies[bookie].entries[(7, 20)]
        with pytest.raises(NoSuchEntryError):
            await reader.batch_read_payloads(16, 0, 0, 31)

    asyncio.run(run())

    # Cancelled while every bookie is slow, after the speculative timer fired (each entry asked its second
    # replica and armed its own timer for the third): no third ask follows. E = W = 3, batch reads off.
    h3 = Harness(3, 3, 2, readPipelineDepth=16, batchReadEnabled=False)

    async def cancelled() -> None:
        await _filled(h3, 10)
        reader = LedgerReader(h3.ctx(), h3.ref, h3.store.data[7].metadata, h3.digester)
        for b in h3.bookies.values():
            b.delay = 3.0
        task = asyncio.ensure_future(reader.batch_read_payloads(0, 0, 0, 9))
        await asyncio.sleep(0.08)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        asked = sum(b.asked for b in h3.bookies.values())
        assert asked == 20  # each entry's first and second replica
        await asyncio.sleep(0.2)
        assert sum(b.asked for b in h3.bookies.values()) == asked

    asyncio.run(cancelled())


def answering_as_a_v2_connection(ops: FakeOps) -> None:
    """Batch reads answered as a v2 connection hands them over: the decoded response's items
    (:class:`bkspark.protocol.v2.BatchItems`, which the compiled check reads straight from the body)."""
    plain = ops.batch_read_async

    async def decoded(*args, **kwargs):  # type: ignore[no-untyped-def]
        entries = [bytes(e) for e in await plain(*args, **kwargs)]
        return v2.decode_response(v2.encode_batch_read_response(0, args[1], args[2], 1, entries)[4:]).entries

    ops.batch_read_async = decoded  # type: ignore[method-assign]


@pytest.mark.parametrize("received", ["list", "v2 answer"])
def test_batch_read_mismatch_inside_batch_returns_prefix_then_next_replica(received: str) -> None:
    """BookKeeper #4789: a bad entry in the middle of a batch is retried on the next replica.  A clean v2 answer
    comes back as one packed run, checked and gathered in one pass; one with a bad entry takes the list path,
    which keeps the verified prefix."""
    h = Harness(3, 3, 2)
    if received == "v2 answer":
        answering_as_a_v2_connection(h.ops)

    async def run() -> None:
        await _filled(h, 10)
        h.conf.reorderReadSequenceEnabled = False
        clean = await LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester).batch_read_payloads(0, 10, 0, 9)
        assert list(clean) == [b"v%03d" % i for i in range(10)]
        assert type(clean) is (PackedPayloads if received == "v2 answer" and speedups is not None else list)
        first = BOOKIES[0]  # write set of entry 0 starts at index 0
        bad = bytearray(h.bookies[first].entries[(7, 4)])
        bad[-1] ^= 1
        h.bookies[first].entries[(7, 4)] = bytes(bad)
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        got = await reader.batch_read(0, 10, 0, 9)
        assert [e.entry_id for e in got] == list(range(10))
        assert [e.payload for e in got] == [b"v%03d" % i for i in range(10)]
        # All replicas tampered at 4: the verified prefix comes back.
        for b in h.bookies.values():
            if (7, 4) in b.entries and b.name != first:
                data = bytearray(b.entries[(7, 4)])
                data[-1] ^= 1
                b.entries[(7, 4)] = bytes(data)
        got = await reader.batch_read(0, 10, 0, 9)
        assert [e.entry_id for e in got] == [0, 1, 2, 3]

    asyncio.run(run())


def test_batch_read_sizes_are_clamped_to_the_frame_size() -> None:
    """docs/client.md: a batch read's request is clamped to ``nettyMaxFrameSizeBytes``; ``max_size <= 0`` means the
    frame size (docs/connector.md: the client clamps ``batchMaxSize`` so)."""
    h = Harness(3, 3, 2, nettyMaxFrameSizeBytes=65536)
    asked: list[int] = []
    answer = h.ops.batch_read_async

    async def recording(bookie_id, ledger_id, start, max_count, max_size, scope_id):  # type: ignore[no-untyped-def]
        asked.append(max_size)
        return await answer(bookie_id, ledger_id, start, max_count, max_size, scope_id)

    h.ops.batch_read_async = recording  # type: ignore[method-assign]

    async def run() -> None:
        await _filled(h, 10)
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        for max_size in (0, -1, 10**9, 2000):
            assert [e.entry_id for e in await reader.batch_read(0, 5, max_size, 9)][0] == 0
        assert asked == [65536, 65536, 65536, 2000]

    asyncio.run(run())


def test_a_batch_read_is_one_request_clamped_to_the_lac_and_to_its_segment() -> None:
    """docs/client.md, "Read path": ``batch_read`` sends one request to one bookie, clamped to the LAC and to the
    segment: a batch never runs into the next segment, whose entries another ensemble holds."""
    h = Harness(3, 3, 2, bookies=4, reorderReadSequenceEnabled=False)
    h.bookies[BOOKIES[1]].add_error = lambda e: BookieIOError("disk") if e >= 5 else None
    asked: list[tuple[str, int, int]] = []
    answer = h.ops.batch_read_async

    async def recording(bookie_id, ledger_id, start, max_count, max_size, scope_id):  # type: ignore[no-untyped-def]
        asked.append((bookie_id, start, max_count))
        return await answer(bookie_id, ledger_id, start, max_count, max_size, scope_id)

    h.ops.batch_read_async = recording  # type: ignore[method-assign]

    async def run() -> None:
        results, _ = await append_all(h.writer(), [b"s%d" % i for i in range(15)])
        assert results == list(range(15))
        md = h.store.data[7].metadata
        assert sorted(md.ensembles) == [0, 6]  # two segments: 0..5 and 6..14
        reader = LedgerReader(h.ctx(), h.ref, md, h.digester)
        assert [e.entry_id for e in await reader.batch_read(2, 100, 0, 14)] == [2, 3, 4, 5]  # the segment's end
        assert [e.entry_id for e in await reader.batch_read(6, 100, 0, 9)] == [6, 7, 8, 9]  # the LAC
        assert [e.entry_id for e in await reader.batch_read(7, 0, 0, 14)] == list(range(7, 15))  # no count limit
        # One request each, to the first bookie of the entry's write set, asking for no more than it may return.
        assert asked == [(BOOKIES[2], 2, 4), (BOOKIES[0], 6, 4), (md.ensembles[6][1], 7, 8)]

    asyncio.run(run())


def test_batch_read_fallbacks_and_limits() -> None:
    h = Harness(3, 3, 2, batchReadEnabled=False)

    async def run() -> None:
        await _filled(h, 10)
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        assert [e.entry_id for e in await reader.batch_read(0, 0, 0, 9)] == list(range(10))  # #4641
        assert [e.entry_id for e in await reader.batch_read(2, 3, 0, 9)] == [2, 3, 4]
        one = await reader.batch_read(0, 10, 1, 9)  # the first entry always comes back
        assert [e.entry_id for e in one] == [0]
        h.conf.batchReadEnabled = True
        for b in h.bookies:
            h.ops.pool.note_no_batch_read(b, "v2")  # e.g. 4.16 bookies
        assert [e.entry_id for e in await reader.batch_read(5, 100, 0, 9)] == list(range(5, 10))
        with pytest.raises(InvalidOptionError):
            await reader.batch_read(10, 1, 0, 9)

    asyncio.run(run())


def test_read_lac_needs_coverage() -> None:
    h = Harness(3, 3, 2)

    async def run() -> None:
        await _filled(h, 5)

        async def read_lac_async(bookie_id: str, ledger_id: int, scope_id: int) -> tuple[Any, Any]:
            b = h.bookies[bookie_id]
            if b.hang:
                raise BookieTimeoutError("timeout")
            mine = [e for (lid, e) in b.entries if lid == ledger_id]
            if not mine:
                raise NoSuchEntryError("none")
            return None, b.entries[(ledger_id, max(mine))]

        h.ops.read_lac_async = read_lac_async  # type: ignore[attr-defined]
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        assert await reader.read_lac() == 3  # entry 4 carries LAC 3
        h.bookies[BOOKIES[0]].hang = True
        # docs/client.md, "Read path": Qw - Qa + 1 = 2 answers per write quorum are enough: one bookie may be down.
        assert await reader.read_lac() == 3
        h.bookies[BOOKIES[1]].hang = True
        with pytest.raises(BookieTimeoutError):
            await reader.read_lac()  # one answer cannot cover quorums needing two

    asyncio.run(run())


# -- recovery ---------------------------------------------------------------------------------------


def test_recovery_finds_tail_readds_and_closes() -> None:
    h = Harness(3, 3, 2)

    async def run() -> None:
        await _filled(h, 8)
        # Entries 8 and 9 reached only one bookie each before the writer died.
        b0 = h.bookies[BOOKIES[0]]
        for eid in (8, 9):
            b0.entries[(7, eid)] = h.digester.package_entry(7, eid, 7, 32 + 4 * (eid - 7), b"v%03d" % eid)
        v = await recover_ledger(h.ctx(), h.ref, h.store.data[7], b"pw")
        md = v.metadata
        assert md.state == LedgerState.CLOSED
        assert (md.last_entry_id, md.length) == (9, 40)
        for b in BOOKIES[:3]:
            assert 7 in h.bookies[b].fenced
        # Re-added with RECOVERY_ADD to the whole write set.
        assert all((7, 9) in h.bookies[b].entries for b in BOOKIES[:3])
        # A second recovery sees CLOSED and does nothing.
        again = await recover_ledger(h.ctx(), h.ref, h.store.data[7], b"pw")
        assert again.version == v.version

    asyncio.run(run())


def test_recovery_fences_reads_and_re_adds_with_the_documented_flags() -> None:
    """docs/client.md, Recovery: mark the metadata IN_RECOVERY, fence with ``READ(-1, DO_FENCING, masterKey)``, read forward from the LAC with
    ``HIGH_PRIORITY | DO_FENCING`` and re-add with ``RECOVERY_ADD | HIGH_PRIORITY`` (a fenced bookie takes those
    only; Java's bookies queue high-priority requests first)."""
    from bkspark.client.ops import FLAG_DO_FENCING, FLAG_HIGH_PRIORITY, FLAG_RECOVERY_ADD
    from bkspark.protocol.digest import master_key

    h = Harness(3, 3, 2)
    reads: list[tuple[int, int, bytes | None]] = []
    adds: list[tuple[int, int]] = []
    states: list[LedgerState] = []

    async def run() -> None:
        await _filled(h, 8)
        b0 = h.bookies[BOOKIES[0]]
        for eid in (8, 9):  # reached one bookie each before the writer died
            b0.entries[(7, eid)] = h.digester.package_entry(7, eid, 7, 32 + 4 * (eid - 7), b"v%03d" % eid)
        read, add = h.ops.read, h.ops.add

        def recording_read(bookie_id, ledger_id, entry_id, scope_id, callback, arg=None, *, flags=0, master_key=None):  # type: ignore[no-untyped-def]
            reads.append((entry_id, flags, master_key))
            read(bookie_id, ledger_id, entry_id, scope_id, callback, arg, flags=flags, master_key=master_key)

        def recording_add(bookie_id, ledger_id, entry_id, key, entry, flags, *rest):  # type: ignore[no-untyped-def]
            adds.append((entry_id, flags))
            add(bookie_id, ledger_id, entry_id, key, entry, flags, *rest)

        h.ops.read, h.ops.add = recording_read, recording_add  # type: ignore[method-assign]
        write = h.store.write_ledger_metadata

        def recording_write(ledger_id: int, md: LedgerMetadata, version: int, scope_id: int = 0) -> Versioned:
            states.append(md.state)
            if md.state == LedgerState.IN_RECOVERY:
                assert not reads  # marked before the first fencing read
            return write(ledger_id, md, version, scope_id)

        h.store.write_ledger_metadata = recording_write  # type: ignore[method-assign]
        v = await recover_ledger(h.ctx(), h.ref, h.store.data[7], b"pw")
        assert v.metadata.last_entry_id == 9
        assert states == [LedgerState.IN_RECOVERY, LedgerState.CLOSED]  # marks the metadata IN_RECOVERY first

    asyncio.run(run())
    fences = [r for r in reads if r[0] == -1]
    assert fences and all(flags == FLAG_DO_FENCING and key == master_key(b"pw") for _, flags, key in fences)
    forward = [r for r in reads if r[0] != -1]
    assert min(e for e, _, _ in forward) == 8  # from LAC + 1 (the fence answers carry LAC 7)
    assert {e for e, _, _ in forward} == {8, 9, 10}  # 10: no bookie has it, the end
    assert all(flags == FLAG_DO_FENCING | FLAG_HIGH_PRIORITY for _, flags, _ in forward)
    assert sorted({e for e, _ in adds}) == [8, 9]
    assert all(flags == FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY for _, flags in adds)


def test_recovery_ends_once_qw_minus_qa_plus_one_bookies_lack_an_entry() -> None:
    """docs/client.md, Recovery: reading forward stops at the first entry that ``Qw - Qa + 1`` bookies lack, without
    waiting for the others: such an entry can never have been acknowledged.  Entry 8 reached only the slow bookie;
    two fast "no such entry" answers end the recovery at 7."""
    h = Harness(3, 3, 2)

    async def run() -> None:
        await _filled(h, 8)
        slow = h.bookies[BOOKIES[2]]
        slow.entries[(7, 8)] = h.digester.package_entry(7, 8, 7, 36, b"v008")
        slow.delay = 0.3
        v = await recover_ledger(h.ctx(), h.ref, h.store.data[7], b"pw")
        assert (v.metadata.state, v.metadata.last_entry_id) == (LedgerState.CLOSED, 7)
        assert (7, 8) not in h.bookies[BOOKIES[0]].entries  # nothing re-added

    asyncio.run(run())


def test_recovery_accepts_a_close_someone_else_wrote_before_its_own() -> None:
    """docs/client.md, Recovery: the recovery writes CLOSED, accepting a close someone else wrote (another recovery
    that got there first): no error, no second close written, and the handle sees the close in force."""
    h = Harness(3, 3, 2)
    write = h.store.write_ledger_metadata
    theirs: list[Versioned] = []

    def racing_write(ledger_id: int, md: LedgerMetadata, version: int, scope_id: int = 0) -> Versioned:
        if md.state == LedgerState.CLOSED and not theirs:  # our final write: another recoverer closed just before
            current = h.store.data[ledger_id]
            closed = replace(current.metadata, state=LedgerState.CLOSED, last_entry_id=md.last_entry_id, length=md.length)
            theirs.append(Versioned(closed, current.version + 1))
            h.store.data[ledger_id] = theirs[0]
            raise MetadataVersionError("conflict")
        return write(ledger_id, md, version, scope_id)

    h.store.write_ledger_metadata = racing_write  # type: ignore[method-assign]

    async def run() -> None:
        await _filled(h, 5)
        writes = h.store.writes
        v = await recover_ledger(h.ctx(), h.ref, h.store.data[7], b"pw")
        assert theirs and v is theirs[0] and h.store.data[7] is theirs[0]
        assert h.store.writes == writes + 1  # IN_RECOVERY only: the close in force is theirs
        assert (v.metadata.state, v.metadata.last_entry_id) == (LedgerState.CLOSED, 4)

    asyncio.run(run())


def test_recovery_of_a_ledger_whose_last_segment_is_empty_starts_at_its_start_with_the_right_length() -> None:
    """docs/client.md, Recovery: the fence answers (entry 4, LAC 3) are older than the last segment (from 5): the
    recovery starts at ``max(LAC, lastSegmentStart - 1)``, reads entry 4 for its length, re-adds nothing and closes
    at 4 with the length the writer had."""
    h = Harness(3, 3, 2, bookies=4)

    async def run() -> None:
        w = await _filled(h, 5)
        v = h.store.data[7]
        segments = {0: tuple(BOOKIES[:3]), 5: (BOOKIES[0], BOOKIES[1], BOOKIES[3])}  # changed after 4, then died
        h.store.data[7] = Versioned(replace(v.metadata, ensembles=segments), v.version + 1)
        for b in h.bookies.values():
            b.adds.clear()
        md = (await recover_ledger(h.ctx(), h.ref, h.store.data[7], b"pw")).metadata
        assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, 4, w.confirmed_length)
        assert md.ensembles == segments
        assert all(b.adds == [] for b in h.bookies.values())  # entry 4 was not re-added

    asyncio.run(run())


def test_recovery_of_empty_ledger_closes_at_minus_one() -> None:
    h = Harness(3, 2, 2)

    async def run() -> None:
        v = await recover_ledger(h.ctx(), h.ref, h.store.data[7], b"pw")
        assert (v.metadata.state, v.metadata.last_entry_id, v.metadata.length) == (LedgerState.CLOSED, -1, 0)

    asyncio.run(run())


def test_parallel_batched_range_is_complete_and_ordered() -> None:
    h = Harness(3, 3, 2)

    async def run() -> None:
        await _filled(h, 50)
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        got = await reader.read_range_batched(3, 47, 10, 0, 49, parallel=3)
        assert [e.entry_id for e in got] == list(range(3, 48))
        assert [e.payload for e in got] == [b"v%03d" % i for i in range(3, 48)]
        # Chunks start on different bookies: the load is spread over the ensemble.
        assert all(not fb.reads for fb in h.bookies.values())  # batch reads, not single reads
        assert sum(1 for fb in h.bookies.values() if fb.batches) == 3

    asyncio.run(run())


async def _slow_counted_reader(h: "Harness", entries: int) -> tuple[LedgerReader, list[int], list[int]]:
    """``entries`` written to ledger 7, bookies answering after 10 ms, and a reader of it whose batch reads are
    counted: at each request's start, how many are in flight then (``seen``) and the ``max_count`` asked."""
    await _filled(h, entries)
    for b in h.bookies.values():
        b.delay = 0.01
    answer = h.ops.batch_read_async
    now = [0]
    seen: list[int] = []
    asked: list[int] = []

    async def counting(bookie_id, ledger_id, start, max_count, max_size, scope_id):  # type: ignore[no-untyped-def]
        now[0] += 1
        seen.append(now[0])
        asked.append(max_count)
        try:
            return await answer(bookie_id, ledger_id, start, max_count, max_size, scope_id)
        finally:
            now[0] -= 1

    h.ops.batch_read_async = counting  # type: ignore[method-assign]
    return LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester), seen, asked


@pytest.mark.parametrize("parallel", [1, 3])
def test_a_batched_range_keeps_parallel_batches_in_flight(parallel: int) -> None:
    """docs/client.md, "More of the API" and "Read path": ``read_batched(..., parallel=4)`` loops until done with
    ``parallel`` batches in flight, never more."""
    h = Harness(3, 3, 2)

    async def run() -> None:
        reader, seen, _asked = await _slow_counted_reader(h, 60)
        got = await reader.read_range_batched(0, 58, 5, 0, 59, parallel=parallel)
        assert [e.entry_id for e in got] == list(range(59))
        assert max(seen) == parallel

    asyncio.run(run())


@pytest.mark.parametrize(
    ("batch_size", "bytes_in_flight", "most"),
    [(5, 1 << 30, 12), (5, 1, 1), (1000, 1 << 30, 2)],
    ids=["at-most-12", "at-least-one", "100-entries-while-sizes-are-unknown"],
)
def test_read_batches_chunks_in_flight_are_bounded(batch_size: int, bytes_in_flight: int, most: int) -> None:
    """docs/client.md, "Read path", ``read_batches``: chunks of ``batch_size`` entries, but no more than 100 before
    the entry sizes are known; as many in flight as fit in ``bytes_in_flight``, at least one, at most 12."""
    h = Harness(3, 3, 2)

    async def run() -> None:
        reader, seen, asked = await _slow_counted_reader(h, 201)
        got: list[bytes] = []
        async for _start, payloads in reader.stream_payloads(
            0, 199, 199, batch_size=batch_size, bytes_in_flight=bytes_in_flight
        ):
            got.extend(bytes(p) for p in payloads)
        assert got == [b"v%03d" % i for i in range(200)]
        assert max(seen) == most
        assert asked[0] == min(batch_size, 100)

    asyncio.run(run())


def test_read_batches_raises_the_first_failing_chunks_error_and_cancels_the_chunks_in_flight() -> None:
    """docs/client.md, "Read path", ``read_batches``: the first failing chunk raises its typed error (after the
    chunks before it were given back, in order); the chunks still in flight are cancelled, not waited for."""
    h = Harness(3, 3, 2)
    for b in h.bookies.values():
        b.read_error = lambda e: BookieIOError("disk") if e == 20 else None
    answer = h.ops.batch_read_async
    cancelled: list[int] = []
    finished: list[int] = []

    async def slow_after_the_failure(bookie_id, ledger_id, start, max_count, max_size, scope_id):  # type: ignore[no-untyped-def]
        try:
            if start >= 30:
                await asyncio.sleep(600)  # far beyond the deadline below: only cancelling them ends the read
            got = await answer(bookie_id, ledger_id, start, max_count, max_size, scope_id)
        except asyncio.CancelledError:
            cancelled.append(start)
            raise
        finished.append(start)
        return got

    async def run() -> None:
        await _filled(h, 101)
        h.ops.batch_read_async = slow_after_the_failure  # type: ignore[method-assign]
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        starts: list[int] = []

        async def consume() -> None:
            async for start, _payloads in reader.stream_payloads(0, 99, 99, batch_size=10, bytes_in_flight=1 << 30):
                starts.append(start)

        with pytest.raises(BookieIOError):
            await asyncio.wait_for(consume(), GENEROUS)  # the slow chunks (600 s) were not waited for
        await asyncio.sleep(0)
        assert starts == [0, 10]
        assert sorted(cancelled) == list(range(30, 100, 10)) and all(s < 30 for s in finished)

    asyncio.run(run())


@pytest.mark.parametrize("received", ["list", "v2 answer"])
def test_streamed_chunks_read_in_several_answers_come_back_answer_by_answer_in_order(received: str) -> None:
    """stream_payloads: a bookie that answers a batch read with at most 3 entries makes each chunk of 10 take
    several requests; each answer comes back as it was (packed runs stay runs, nothing is joined), with its first
    entry id, and together they are the range in order."""
    h = Harness(3, 3, 2)
    whole = h.ops.batch_read_async

    async def at_most_three(*args, **kwargs):  # type: ignore[no-untyped-def]
        return (await whole(*args, **kwargs))[:3]

    h.ops.batch_read_async = at_most_three  # type: ignore[method-assign]
    if received == "v2 answer":
        answering_as_a_v2_connection(h.ops)

    async def run() -> None:
        await _filled(h, 30)
        reader = LedgerReader(h.ctx(), h.ref, h.store.data[7].metadata, h.digester)
        pieces = [(start, payloads) async for start, payloads in reader.stream_payloads(2, 26, 29, batch_size=10)]
        assert all(len(payloads) <= 3 for _, payloads in pieces)
        expected_start = 2
        for start, payloads in pieces:
            assert start == expected_start
            expected_start += len(payloads)
        assert expected_start == 27
        assert [p for _, payloads in pieces for p in payloads] == [b"v%03d" % i for i in range(2, 27)]
        packed = received == "v2 answer" and speedups is not None
        assert all((type(payloads) is PackedPayloads) == packed for _, payloads in pieces)

    asyncio.run(run())
