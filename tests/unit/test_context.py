"""BP-44 ledger context: builders, validation, the customMetadata encoding and defensive parsing."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from bkspark.retry import RetryPolicy
from hypothesis import given, settings
from hypothesis import strategies as st

from bkspark.context import (
    CLOSE_KEY,
    CREATE_KEY,
    MAX_VALUE_BYTES,
    SEAL_TIME_KEY,
    CloseReason,
    EntrySizeHint,
    LedgerCloseContext,
    LedgerCreateContext,
    LedgerLink,
    Party,
    read_close_context,
    read_context,
    read_create_context,
    read_seal_time,
    record_close_context,
)
from bkspark.errors import (
    BadLedgerContextError,
    BadMetadataError,
    InvalidOptionError,
    LedgerClosedError,
    MetadataVersionError,
)
from bkspark.metadata.store import Versioned
from bkspark.protocol import ledger_metadata as md_codec
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState

T0 = datetime(2021, 3, 15, 20, 21, 11, tzinfo=timezone.utc)


def full_create() -> LedgerCreateContext:
    return (
        LedgerCreateContext.builder()
        .created_by("Company X", "System y", "service.z", "host1.z.companyx.com")
        .created_on_behalf_of("Tenant", "Sys", "svc", "inst-7")
        .part_of_data_set("persistent://public/default/test_topic")
        .expected_max_open_duration(timedelta(hours=4))
        .expected_average_entry_size(1024, 12.5)
        .expected_max_entries(50000)
        .expected_max_length(262144000)
        .expected_average_entry_add_rate_per_second(100)
        .expected_maximum_entry_add_rate_per_second(1000)
        .follows_ledger(41)
        .child_of_ledger(7, scope_id=-3)
        .build()
    )


def full_close() -> LedgerCloseContext:
    return (
        LedgerCloseContext.builder()
        .because_client_shutdown()
        .closing_abnormally("executor lost")
        .expect_reads_until(T0 + timedelta(hours=1))
        .expect_delete_after(T0 + timedelta(hours=24))
        .build()
    )


def md(custom: dict[str, bytes] | None = None, state: LedgerState = LedgerState.CLOSED, ctime: int = 1615815339000):
    closed = state == LedgerState.CLOSED
    return LedgerMetadata(
        ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, state=state,
        last_entry_id=9 if closed else -1, length=100 if closed else 0,
        ensembles={0: ("127.0.0.1:3181",)}, custom_metadata=custom or {}, ctime=ctime,
    )


# -- builders --------------------------------------------------------------------------------------------------


def test_create_builder_sets_every_field_and_round_trips():
    ctx = full_create()
    assert ctx.created_by == Party("Company X", "System y", "service.z", "host1.z.companyx.com")
    assert ctx.created_on_behalf_of == Party("Tenant", "Sys", "svc", "inst-7")
    assert ctx.data_set == "persistent://public/default/test_topic"
    assert ctx.expected_max_open_duration == timedelta(hours=4)
    assert ctx.expected_average_entry_size == EntrySizeHint(1024, 12.5)
    assert (ctx.expected_max_entries, ctx.expected_max_length) == (50000, 262144000)
    assert (ctx.expected_average_entry_add_rate_per_second, ctx.expected_maximum_entry_add_rate_per_second) == (100, 1000)
    assert ctx.follows_ledger == LedgerLink(41) and ctx.child_of_ledger == LedgerLink(7, -3)
    assert LedgerCreateContext.from_bytes(ctx.to_bytes()) == ctx


def test_builders_are_immutable():
    base = LedgerCreateContext.builder().part_of_data_set("a")
    other = base.part_of_data_set("b")
    assert base.build().data_set == "a" and other.build().data_set == "b"
    closing = LedgerCloseContext.builder()
    closing.because_inactive()
    assert closing.build().reason is None


def test_seed_camel_case_names_work():
    ctx = (
        LedgerCreateContext.builder()
        .createdBy("e", "s", "sv", "i")
        .partOfDataSet("d")
        .expectedMaxOpenDuration(timedelta(minutes=1))
        .expectedMaxEntries(1)
        .expectedMaxLength(2)
        .expectedAverageEntrySize(3, 0.0)
        .expectedAverageEntryAddRatePerSecond(4)
        .expectedMaximumEntryAddRatePerSecond(5)
        .followsLedger(6)
        .childOfLedger(7)
        .createdOnBehalfOf("e2", "s2", "sv2", "i2")
        .build()
    )
    assert ctx.child_of_ledger == LedgerLink(7)
    close = LedgerCloseContext.builder().becauseTimeRotation().expectDeleteAfter(T0).expectReadsUntil(T0).build()
    assert close.reason is CloseReason.TIME_ROTATION


@pytest.mark.parametrize("builder", [LedgerCreateContext.builder(), LedgerCloseContext.builder()])
def test_every_snake_case_builder_method_has_its_seed_camel_case_alias(builder):
    """Each of the seed's builder methods is reachable by its Java name too (the same method, not a look-alike)."""
    methods = [n for n in dir(builder) if not n.startswith("_") and n != "build" and callable(getattr(builder, n))]
    snake = [n for n in methods if "_" in n]
    assert snake
    for name in snake:
        head, *rest = name.split("_")
        camel = head + "".join(part.capitalize() for part in rest)
        assert getattr(type(builder), camel, None) is getattr(type(builder), name), name


@pytest.mark.parametrize(
    "method, reason",
    [
        ("because_client_shutdown", CloseReason.CLIENT_SHUTDOWN),
        ("because_max_length_reached", CloseReason.MAX_LENGTH_REACHED),
        ("because_max_entry_count_reached", CloseReason.MAX_ENTRY_COUNT_REACHED),
        ("because_no_more_data", CloseReason.NO_MORE_DATA),
        ("because_inactive", CloseReason.INACTIVE),
        ("because_time_rotation", CloseReason.TIME_ROTATION),
    ],
)
def test_every_close_reason_round_trips(method, reason):
    ctx = getattr(LedgerCloseContext.builder(), method)().build()
    assert ctx.reason is reason
    assert LedgerCloseContext.from_bytes(ctx.to_bytes()) == ctx


def test_close_context_round_trips_with_instants_at_millisecond_precision():
    ctx = LedgerCloseContext.builder().because_no_more_data().expect_delete_after(
        datetime(2030, 1, 1, 0, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    ).build()
    assert ctx.expect_delete_after == datetime(2029, 12, 31, 22, 0, 0, 123000, tzinfo=timezone.utc)
    assert LedgerCloseContext.from_bytes(ctx.to_bytes()) == ctx
    assert json.loads(ctx.to_bytes())["expectDeleteAfterMs"] == 1893448800123
    assert LedgerCloseContext.from_bytes(full_close().to_bytes()) == full_close()


# -- validation -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda b: b.part_of_data_set("x" * 257),
        lambda b: b.part_of_data_set("é" * 129),  # 258 bytes of UTF-8
        lambda b: b.part_of_data_set(5),
        lambda b: b.created_by("a", "b", "c", None),
        lambda b: b.created_by("a" * 300, "b", "c", "d"),
        lambda b: b.expected_max_open_duration(timedelta(0)),
        lambda b: b.expected_max_open_duration(3600),
        lambda b: b.expected_max_entries(-1),
        lambda b: b.expected_max_entries(True),
        lambda b: b.expected_max_length(2**63),
        lambda b: b.expected_average_entry_size(10, float("nan")),
        lambda b: b.expected_average_entry_size(10, -1.0),
        lambda b: b.expected_average_entry_size(-10, 1.0),
        lambda b: b.follows_ledger(-1),
        lambda b: b.child_of_ledger(1, scope_id=2**63),
        lambda b: b.expected_average_entry_add_rate_per_second(10).expected_maximum_entry_add_rate_per_second(5).build(),
    ],
)
def test_create_builder_rejects_bad_input(build):
    with pytest.raises(InvalidOptionError):
        build(LedgerCreateContext.builder())


def test_data_set_at_the_256_byte_bound_is_accepted():
    assert LedgerCreateContext.builder().part_of_data_set("é" * 128).build().data_set == "é" * 128


@pytest.mark.parametrize(
    "build",
    [
        lambda b: b.because_inactive().because_no_more_data(),
        lambda b: b.closing_abnormally("x" * 257),
        lambda b: b.closing_abnormally(42),
        lambda b: b.expect_delete_after(datetime(2030, 1, 1)),  # naive
        lambda b: b.expect_delete_after(1893448800),
        lambda b: b.expect_delete_after(datetime(1960, 1, 1, tzinfo=timezone.utc)),
        lambda b: b.expect_delete_after(T0).expect_reads_until(T0 + timedelta(seconds=1)).build(),
    ],
)
def test_close_builder_rejects_bad_input(build):
    with pytest.raises(InvalidOptionError):
        build(LedgerCloseContext.builder())


def test_same_reason_twice_is_fine_and_abnormal_accompanies_a_reason():
    ctx = LedgerCloseContext.builder().because_inactive().because_inactive().closing_abnormally().build()
    assert ctx.reason is CloseReason.INACTIVE and ctx.abnormal and ctx.error_message is None
    assert LedgerCloseContext.builder().closing_abnormally("x" * 256).build().error_message == "x" * 256


def test_error_message_needs_abnormal():
    with pytest.raises(InvalidOptionError):
        LedgerCloseContext(error_message="boom")


def test_error_message_bound_counts_characters_not_bytes():
    """The doc bounds the message at 256 characters: 256 two-byte characters (512 bytes) are fine, 257 are not."""
    message = "é" * 256
    assert LedgerCloseContext.builder().closing_abnormally(message).build().error_message == message
    assert LedgerCloseContext(abnormal=True, error_message=message).error_message == message
    with pytest.raises(InvalidOptionError):
        LedgerCloseContext.builder().closing_abnormally("é" * 257)


@pytest.mark.parametrize(
    "construct",
    [
        lambda: LedgerCreateContext(data_set="x" * 257),
        lambda: LedgerCreateContext(created_by=Party("a" * 257, "s", "sv", "i")),
        lambda: LedgerCreateContext(expected_max_open_duration=timedelta(0)),
        lambda: LedgerCreateContext(expected_max_entries=-1),
        lambda: LedgerCreateContext(expected_average_entry_add_rate_per_second=10,
                                    expected_maximum_entry_add_rate_per_second=5),
        lambda: LedgerCreateContext(child_of_ledger=LedgerLink(1, 2**63)),
        lambda: LedgerCloseContext(abnormal=True, error_message="x" * 257),
        lambda: LedgerCloseContext(expect_delete_after=datetime(2030, 1, 1)),  # naive
        lambda: LedgerCloseContext(expect_delete_after=T0, expect_reads_until=T0 + timedelta(seconds=1)),
        lambda: LedgerCloseContext(reason="BORED"),
    ],
)
def test_contexts_built_directly_are_validated_as_the_builders_are(construct):
    """Building the frozen dataclasses by hand must not bypass the checks the builders make."""
    with pytest.raises(InvalidOptionError):
        construct()


# -- customMetadata encoding -----------------------------------------------------------------------------------


def test_to_custom_metadata_keeps_callers_keys_and_refuses_ours():
    custom = full_create().to_custom_metadata({"app": b"demo"})
    assert custom["app"] == b"demo" and CREATE_KEY in custom
    with pytest.raises(InvalidOptionError):
        full_create().to_custom_metadata({CLOSE_KEY: b"{}"})
    with pytest.raises(InvalidOptionError):  # the whole prefix is reserved, not only today's three keys
        full_create().to_custom_metadata({"bkspark.ctx.somethingLater": b"x"})


def test_encoding_is_compact_key_sorted_utf8_json():
    """Stored values are byte-for-byte reproducible: sorted keys, no spaces, non-ASCII as raw UTF-8."""
    create = LedgerCreateContext.builder().part_of_data_set("données").expected_max_entries(5).follows_ledger(3)
    assert create.build().to_bytes() == (
        '{"dataSet":"données","expectedMaxEntries":5,"followsLedger":{"ledgerId":3,"scopeId":0},"v":1}'.encode()
    )
    close = LedgerCloseContext.builder().because_inactive().closing_abnormally("arrêt").expect_delete_after(T0).build()
    assert close.to_bytes() == (
        '{"abnormal":true,"errorMessage":"arrêt","expectDeleteAfterMs":1615839671000,"reason":"INACTIVE","v":1}'.encode()
    )


@pytest.mark.parametrize("key, reader", [(CREATE_KEY, read_create_context), (CLOSE_KEY, read_close_context)])
def test_readers_refuse_a_value_over_8_kib_even_when_it_is_valid_json(key, reader):
    """The size bound is checked before parsing: a well-formed context padded past 8 KiB is refused."""
    padded = b'{"v": 1}' + b" " * (MAX_VALUE_BYTES - 7)
    assert len(padded) == MAX_VALUE_BYTES + 1
    with pytest.raises(BadLedgerContextError, match="8192"):
        reader({key: padded})
    assert reader({key: padded[:-1]}) is not None  # at the bound: read


def test_encoded_values_are_bounded_even_at_every_maximum():
    big = "é" * 128
    ctx = (
        LedgerCreateContext.builder()
        .created_by(big, big, big, big)
        .created_on_behalf_of(big, big, big, big)
        .part_of_data_set(big)
        .expected_max_open_duration(timedelta(days=10**6))
        .expected_average_entry_size(2**63 - 1, 1e308)
        .expected_max_entries(2**63 - 1)
        .expected_max_length(2**63 - 1)
        .expected_average_entry_add_rate_per_second(2**63 - 1)
        .expected_maximum_entry_add_rate_per_second(2**63 - 1)
        .follows_ledger(2**63 - 1, -(2**63))
        .child_of_ledger(2**63 - 1, -(2**63))
        .build()
    )
    assert len(ctx.to_bytes()) < MAX_VALUE_BYTES // 2
    assert LedgerCreateContext.from_bytes(ctx.to_bytes()) == ctx


def test_context_survives_every_metadata_format_java_writes():
    custom = full_create().to_custom_metadata()
    custom[CLOSE_KEY] = full_close().to_bytes()
    custom[SEAL_TIME_KEY] = b"1615827501000"
    for version in (2, 3):
        parsed = md_codec.parse(md_codec.serialize(md(custom), version=version))
        ctx = read_context(parsed)
        assert ctx.create == full_create() and ctx.close == full_close() and ctx.seal_time_ms == 1615827501000


def test_read_context_without_any_context():
    ctx = read_context(md({"other": b"x"}))
    assert ctx.create is None and ctx.close is None and ctx.seal_time_ms is None
    assert ctx.owner() == {"createdBy": None, "onBehalfOf": None, "dataSet": None}
    assert ctx.lifespan() == {
        "createTime": 1615815339, "expectedSealTime": None, "actualSealTime": None,
        "expectedReadUntilTime": None, "expectedDeleteTime": None,
    }


def test_lifespan_and_owner_have_the_seed_shapes():
    create = LedgerCreateContext.builder().created_by("Company X", "System y", "service.z", "host1.z.companyx.com").part_of_data_set(
        "persistent://public/default/test_topic"
    ).expected_max_open_duration(timedelta(hours=4)).build()
    close = LedgerCloseContext.builder().because_inactive().expect_delete_after(
        datetime.fromtimestamp(1615839671, timezone.utc)
    ).build()
    custom = create.to_custom_metadata()
    custom[CLOSE_KEY] = close.to_bytes()
    custom[SEAL_TIME_KEY] = b"1615827501000"
    ctx = read_context(md(custom))
    assert ctx.owner() == {
        "createdBy": {"enterprise": "Company X", "system": "System y", "service": "service.z", "instance": "host1.z.companyx.com"},
        "onBehalfOf": None,
        "dataSet": "persistent://public/default/test_topic",
    }
    assert ctx.lifespan() == {
        "createTime": 1615815339,
        "expectedSealTime": 1615829739,
        "actualSealTime": 1615827501,
        "expectedReadUntilTime": None,
        "expectedDeleteTime": 1615839671,
    }


def test_unknown_fields_of_a_later_version_are_ignored():
    obj = json.loads(full_create().to_bytes())
    obj.update(v=7, somethingNew={"x": 1})
    assert LedgerCreateContext.from_bytes(json.dumps(obj).encode()) == full_create()
    obj = json.loads(full_close().to_bytes())
    obj.update(v=2, somethingNew=[1, 2])
    assert LedgerCloseContext.from_bytes(json.dumps(obj).encode()) == full_close()


# -- defensive parsing -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        b"{}",
        b'{"v": "1"}',
        b'{"v": true}',
        b'{"v": 1, "dataSet": 5}',
        b'{"v": 1, "dataSet": "' + b"x" * 300 + b'"}',
        b'{"v": 1, "createdBy": "me"}',
        b'{"v": 1, "createdBy": {"enterprise": "a"}}',
        b'{"v": 1, "expectedMaxOpenDurationMs": -5}',
        b'{"v": 1, "expectedMaxOpenDurationMs": 1e3}',
        b'{"v": 1, "expectedMaxEntries": 99999999999999999999999}',
        b'{"v": 1, "childOfLedger": {"ledgerId": "7"}}',
        b'{"v": 1, "childOfLedger": 7}',
        b'{"v": 1, "expectedAverageEntrySize": {"sizeInBytes": 1, "standardDeviation": NaN}}',
        b'{"v": 1, "expectedAverageEntrySize": {"sizeInBytes": 1, "standardDeviation": Infinity}}',
        b"[" * 5000 + b"]" * 5000,
        b" " * (MAX_VALUE_BYTES + 1),
    ],
)
def test_malformed_create_context_is_a_typed_error(data):
    with pytest.raises(BadLedgerContextError) as info:
        read_create_context({CREATE_KEY: data})
    assert isinstance(info.value, BadMetadataError)
    assert CREATE_KEY in str(info.value)


@pytest.mark.parametrize(
    "data",
    [
        b'{"v": 1, "reason": "BORED"}',
        b'{"v": 1, "reason": 3}',
        b'{"v": 1, "abnormal": "yes"}',
        b'{"v": 1, "errorMessage": "x"}',
        b'{"v": 1, "abnormal": true, "errorMessage": "' + b"x" * 300 + b'"}',
        b'{"v": 1, "expectDeleteAfterMs": -1}',
        b'{"v": 1, "expectDeleteAfterMs": 9223372036854775807}',
        b'{"v": 1, "expectDeleteAfterMs": 10, "expectReadsUntilMs": 20}',
        b"null",
    ],
)
def test_malformed_close_context_is_a_typed_error(data):
    with pytest.raises(BadLedgerContextError):
        read_close_context({CLOSE_KEY: data})


@pytest.mark.parametrize("data", [b"", b"-5", b"12a", b"9" * 20, b"1.5", "١٢".encode()])
def test_malformed_seal_time_is_a_typed_error(data):
    with pytest.raises(BadLedgerContextError):
        read_seal_time({SEAL_TIME_KEY: data})


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_never_crash_the_parsers(data):
    for key, reader in ((CREATE_KEY, read_create_context), (CLOSE_KEY, read_close_context), (SEAL_TIME_KEY, read_seal_time)):
        try:
            reader({key: data})
        except BadLedgerContextError:
            pass


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
        max_leaves=20,
    ),
    st.sampled_from(["createdBy", "dataSet", "expectedAverageEntrySize", "childOfLedger", "followsLedger",
                     "expectedMaxEntries", "expectedMaxOpenDurationMs", "reason", "abnormal", "errorMessage",
                     "expectDeleteAfterMs", "expectReadsUntilMs"]),
)
def test_arbitrary_json_values_never_crash_the_parsers(value, field):
    data = json.dumps({"v": 1, field: value}).encode()
    for key, reader in ((CREATE_KEY, read_create_context), (CLOSE_KEY, read_close_context)):
        try:
            reader({key: data})
        except BadLedgerContextError:
            pass


# -- recording the close context by compare-and-set ---------------------------------------------------------------


class FakeStore:
    """A metadata store holding one ledger, losing the CAS ``conflicts`` times to a concurrent writer."""

    def __init__(self, metadata: LedgerMetadata, conflicts: int = 0) -> None:
        self.current = Versioned(metadata, 3)
        self.conflicts = conflicts
        self.writes: list[LedgerMetadata] = []

    def read_ledger_metadata(self, ledger_id: int, scope_id: int = 0) -> Versioned:
        return self.current

    def write_ledger_metadata(self, ledger_id, metadata, version, scope_id=0):
        if self.conflicts:
            self.conflicts -= 1
            # Someone else (a re-replication, say) changed an ensemble meanwhile.
            other = self.current.metadata.replace_ensemble(0, ("10.0.0.9:3181",))
            self.current = Versioned(other, self.current.version + 1)
            raise MetadataVersionError("conflict")
        assert version == self.current.version
        self.writes.append(metadata)
        self.current = Versioned(metadata, version + 1)
        return self.current


def test_record_close_context_retries_the_cas_and_keeps_the_other_writers_change():
    store = FakeStore(md(full_create().to_custom_metadata({"app": b"x"})), conflicts=2)
    result = record_close_context(store, 5, full_close(), seal_time_ms=1234)
    stored = result.metadata
    assert stored.ensembles[0] == ("10.0.0.9:3181",)
    assert read_context(stored).close == full_close() and read_context(stored).seal_time_ms == 1234
    assert read_context(stored).create == full_create() and stored.custom_metadata["app"] == b"x"


def test_record_close_context_keeps_an_existing_seal_time_and_is_idempotent():
    store = FakeStore(md({SEAL_TIME_KEY: b"1000"}))
    record_close_context(store, 5, full_close(), seal_time_ms=2000)
    assert read_seal_time(store.current.metadata.custom_metadata) == 1000
    record_close_context(store, 5, full_close(), seal_time_ms=3000)
    assert len(store.writes) == 1


def test_record_close_context_refuses_an_open_ledger():
    with pytest.raises(LedgerClosedError):
        record_close_context(FakeStore(md(state=LedgerState.OPEN)), 5, full_close())


def test_record_close_context_gives_up_after_too_many_conflicts():
    store = FakeStore(md(), conflicts=100)
    with pytest.raises(MetadataVersionError):
        record_close_context(store, 5, full_close(), retry=RetryPolicy(max_tries=3, delay=0.0))
    assert store.conflicts == 100 - 3  # exactly the policy's three tries
