"""The compiled split of Pulsar batches (bkspark/pulsar/_batch.c, behind ``MessageColumns.add_batch``) against
the pure-Python reference (``entry_messages`` then ``MessageColumns.add`` per message): the same Arrow batch for
every batch Pulsar wrote in the golden vectors and for generated ones (keys, properties, null values and keys,
``compacted_out``, event times, sequence ids, fields the split skips), and every batch it does not take (a base64
key, malformed bytes) handed back to the reference, which raises the precise error (docs/pulsar.md, "Speed")."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from typing import Any

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkspark.pulsar import columns as columns_module
from bkspark.pulsar.columns import MessageColumns, batch_message_ids, entry_message_id, message_id_bytes
from bkspark.pulsar.entry import entry_messages, parse_entry
from bkspark.pulsar.errors import PulsarEntryError
from bkspark.protocol.speedups import DISABLE_ENV
from bkspark.pulsar.proto.PulsarApi_pb2 import MessageMetadata, SingleMessageMetadata
from tests.unit.test_pulsar_entry import ALL

TOPIC = "persistent://public/default/split"


def test_the_split_is_built_and_on() -> None:
    """make builds it (pip install runs the C compiler); CI must run the compiled split, not only the reference."""
    assert columns_module._batch is not None, "bkspark.pulsar._batch was not built: run `make venv`"


def test_the_switch_turns_it_off_in_a_new_process() -> None:
    code = "from bkspark.pulsar import columns; print(columns._batch)"
    for value, off in (("1", True), ("0", False)):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, DISABLE_ENV: value},
                             capture_output=True, text=True, check=True).stdout.strip()
        assert (out == "None") is off


def _both_ways(data: bytes, partition: int = -1, ledger: int = 7, entry: int = 3,
               fast_path: str = "add_batch") -> tuple[Any, Any, bool]:
    """(the reference's batch, the fast path's batch or None, whether the fast path took the entry): the split
    (``add_batch``), or ``add_single`` for an entry of one plain message."""
    parsed = parse_entry(data)
    reference = MessageColumns()
    for message in entry_messages(parsed):
        reference.add(message, TOPIC, partition, ledger, entry)
    fast = MessageColumns()
    taken = getattr(fast, fast_path)(parsed, TOPIC, partition, ledger, entry)
    return reference.batch(), fast.batch() if taken else None, taken


@pytest.mark.parametrize("topic", sorted(t for t in ALL if "batch" in t))
def test_split_equals_the_reference_on_bytes_pulsar_wrote(topic: str) -> None:
    batches = 0
    for e in ALL[topic]["entries"]:
        parsed = parse_entry(e["data"])
        if not parsed.is_batch:
            continue
        reference, fast, taken = _both_ways(e["data"], partition=2, ledger=e["ledger"], entry=e["entry"])
        assert taken, "a batch Pulsar wrote must take the compiled split"
        assert fast.equals(reference), (fast.to_pydict(), reference.to_pydict())
        batches += 1
    assert batches > 0


def test_a_run_of_entries_of_several_topics_equals_the_reference() -> None:
    """Entries of every vector topic (batches, single messages, a null partition) into one set of columns: the
    split's runs are built together, between the single messages, in the order added."""
    reference, fast = MessageColumns(), MessageColumns()
    taken = 0
    for number, topic in enumerate(sorted(t for t in ALL if "chunked" not in t)):
        for e in ALL[topic]["entries"]:
            parsed = parse_entry(e["data"])
            partition = number % 3 - 1
            for message in entry_messages(parsed):
                reference.add(message, topic, partition, e["ledger"], e["entry"])
            if parsed.is_batch and fast.add_batch(parsed, topic, partition, e["ledger"], e["entry"]):
                taken += 1
                continue
            for message in entry_messages(parsed):
                fast.add(message, topic, partition, e["ledger"], e["entry"])
    assert taken > 5 and len(fast) == len(reference)
    assert fast.batch().equals(reference.batch())


def _record(smm: SingleMessageMetadata, value: bytes, extra: bytes = b"") -> bytes:
    body = smm.SerializeToString() + extra
    return struct.pack(">i", len(body)) + body + value


def _entry(records: list[bytes], count: int | None = None, **metadata: Any) -> bytes:
    payload = b"".join(records)
    md = MessageMetadata(producer_name="producer-1", sequence_id=100, publish_time=1_700_000_000_123,
                         num_messages_in_batch=len(records) if count is None else count, **metadata)
    header = md.SerializeToString()
    rest = struct.pack(">i", len(header)) + header + payload
    return struct.pack(">HI", 0x0E01, crc32c.crc32c(rest)) + rest


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
_message = st.fixed_dictionaries({
    "value": st.binary(max_size=40),
    "key": st.one_of(st.none(), _text, st.just("")),
    "null_key": st.booleans(),
    "properties": st.lists(st.tuples(_text, _text), max_size=3),
    "null_value": st.booleans(),
    "compacted_out": st.booleans(),
    "event_time": st.one_of(st.none(), st.integers(0, 2**62 // 1000)),  # ms since the epoch
    "sequence_id": st.one_of(st.none(), st.integers(0, 2**63 - 1)),  # a Java long
    "ordering_key": st.one_of(st.none(), st.binary(max_size=5)),
    "unknown_field": st.booleans(),
})


def _smm(m: dict[str, Any]) -> tuple[SingleMessageMetadata, bytes]:
    smm = SingleMessageMetadata(payload_size=0 if m["null_value"] else len(m["value"]))
    if m["key"] is not None:
        smm.partition_key = m["key"]
    if m["null_key"]:
        smm.null_partition_key = True
    for k, v in m["properties"]:
        smm.properties.add(key=k, value=v)
    if m["null_value"]:
        smm.null_value = True
    if m["compacted_out"]:
        smm.compacted_out = True
    if m["event_time"] is not None:
        smm.event_time = m["event_time"]
    if m["sequence_id"] is not None:
        smm.sequence_id = m["sequence_id"]
    if m["ordering_key"] is not None:
        smm.ordering_key = m["ordering_key"]
    # field 99, a varint and a length-delimited field: a newer producer's field the split must skip
    extra = b"\x98\x06\x05\x9a\x06\x02ab" if m["unknown_field"] else b""
    return smm, extra


@settings(max_examples=150, deadline=None)
@given(st.lists(_message, min_size=1, max_size=12), st.integers(-1, 3), st.integers(0, 1_000))
def test_split_equals_the_reference_on_generated_batches(messages: list[dict[str, Any]], partition: int,
                                                         event_time: int) -> None:
    records = []
    for m in messages:
        smm, extra = _smm(m)
        records.append(_record(smm, b"" if m["null_value"] else m["value"], extra))
    reference, fast, taken = _both_ways(_entry(records, event_time=event_time), partition=partition)
    assert taken
    assert fast.equals(reference), (fast.to_pydict(), reference.to_pydict())


def test_batches_the_split_hands_back() -> None:
    smm = SingleMessageMetadata(payload_size=1, partition_key="a2V5", partition_key_b64_encoded=True)
    reference, fast, taken = _both_ways(_entry([_record(smm, b"x")]))
    assert not taken and fast is None
    assert reference.column("__key").to_pylist() == [b"key"]
    bad_utf8 = b"\x0a\x06\x0a\x01\xff\x12\x01v"  # a property whose key is not UTF-8
    assert columns_module._batch.split_batch(_record(SingleMessageMetadata(payload_size=0), b"", bad_utf8), 1) is None


@pytest.mark.parametrize("case", ["truncated", "trailing", "no-payload-size", "count-too-large", "negative-size",
                                  "group-wire-type", "key-value-incomplete"])
def test_malformed_batches_go_to_the_reference_which_raises(case: str) -> None:
    good = _record(SingleMessageMetadata(payload_size=3), b"abc")
    records, count = [good], None
    if case == "truncated":
        records = [good[:-1]]
    elif case == "trailing":
        records = [good, b"\x00"]
        count = 1
    elif case == "no-payload-size":
        records = [struct.pack(">i", 2) + b"\x40\x01"]  # field 8 (sequence_id) only
    elif case == "count-too-large":
        count = 2
    elif case == "negative-size":
        records = [struct.pack(">i", -5) + b"abc"]
    elif case == "group-wire-type":
        body = SingleMessageMetadata(payload_size=3).SerializeToString() + b"\x9b\x06\x9c\x06"  # field 99 group
        records = [struct.pack(">i", len(body)) + body + b"abc"]
    elif case == "key-value-incomplete":
        body = SingleMessageMetadata(payload_size=3).SerializeToString() + b"\x0a\x03\x0a\x01k"  # no value
        records = [struct.pack(">i", len(body)) + body + b"abc"]
    data = _entry(records, count=count)
    parsed = parse_entry(data)
    columns = MessageColumns()
    if case == "group-wire-type":
        # protobuf's parser takes a group as an unknown field: only the split refuses it, and the reference
        # decodes the batch
        assert not columns.add_batch(parsed, TOPIC, -1, 1, 1)
        assert [bytes(m.value) for m in entry_messages(parsed)] == [b"abc"]
        return
    assert not columns.add_batch(parsed, TOPIC, -1, 1, 1)
    assert len(columns) == 0
    with pytest.raises(PulsarEntryError):
        entry_messages(parsed)


def test_split_not_built_leaves_every_batch_to_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columns_module, "_batch", None)
    data = _entry([_record(SingleMessageMetadata(payload_size=1), b"x")])
    assert not MessageColumns().add_batch(parse_entry(data), TOPIC, -1, 1, 1)


def test_messages_added_both_ways_keep_their_order() -> None:
    batch = _entry([_record(SingleMessageMetadata(payload_size=1, sequence_id=i), bytes([65 + i])) for i in range(3)])
    single = MessageMetadata(producer_name="p", sequence_id=9, publish_time=5)
    header = single.SerializeToString()
    plain = struct.pack(">i", len(header)) + header + b"z"
    columns = MessageColumns()
    columns.add(entry_messages(parse_entry(plain))[0], TOPIC, -1, 1, 0)
    assert columns.add_batch(parse_entry(batch), TOPIC, -1, 1, 1)
    columns.add(entry_messages(parse_entry(plain))[0], TOPIC, -1, 1, 2)
    assert len(columns) == 5
    out = columns.batch()
    assert out.column("value").to_pylist() == [b"z", b"A", b"B", b"C", b"z"]
    assert out.column("__entryId").to_pylist() == [0, 1, 1, 1, 2]
    assert out.column("__batchIndex").to_pylist() == [-1, 0, 1, 2, -1]


@pytest.mark.parametrize("partition", [-1, 0, 7])
@pytest.mark.parametrize("batch_size", [1, 127, 128, 300])
def test_batch_message_ids_equal_protobufs(partition: int, batch_size: int) -> None:
    ledger, entry = 2**40 + 3, 129
    want = [message_id_bytes(ledger, entry, partition, i, batch_size) for i in range(batch_size)]
    assert batch_message_ids(ledger, entry, partition, range(batch_size), batch_size) == want
    some = [0, batch_size - 1]
    assert batch_message_ids(ledger, entry, partition, some, batch_size) == [want[i] for i in some]


@pytest.mark.parametrize("field", ["event_time", "sequence_id"])
def test_a_time_or_sequence_id_past_the_columns_range_is_a_typed_error_both_ways(field: str) -> None:
    """Pulsar's fields are uint64: a time whose µs do not fit Arrow's int64 timestamp, or a sequence id past a
    Java long, names the entry on both paths instead of failing the batch's build with Arrow's overflow."""
    big = {"event_time": 2**62, "sequence_id": 2**63 + 5}[field]
    data = _entry([_record(SingleMessageMetadata(payload_size=1, **{field: big}), b"x")])
    parsed = parse_entry(data)
    with pytest.raises(PulsarEntryError, match="ledger 7 entry 3"):
        MessageColumns().add_batch(parsed, TOPIC, -1, 7, 3)
    with pytest.raises(PulsarEntryError, match="ledger 7 entry 3"):
        MessageColumns().add(entry_messages(parsed)[0], TOPIC, -1, 7, 3)


# -- entries of one plain message (batching off): MessageColumns.add_single against the reference -------------------


def test_single_message_entries_pulsar_wrote_equal_the_reference() -> None:
    """Every entry of the vector topics that is one plain message (batching off, keys, properties, compression)
    takes add_single, with the reference's row; batches, chunks and markers do not."""
    singles = 0
    for topic in sorted(ALL):
        for e in ALL[topic]["entries"]:
            parsed = parse_entry(e["data"])
            if parsed.is_chunk:
                assert not MessageColumns().add_single(parsed, TOPIC, 1, e["ledger"], e["entry"])
                continue
            reference, fast, taken = _both_ways(e["data"], partition=1, ledger=e["ledger"], entry=e["entry"],
                                                fast_path="add_single")
            plain = not (parsed.is_batch or parsed.is_marker or parsed.is_encrypted)
            assert taken == plain, (topic, e["entry"])
            if taken:
                assert fast.equals(reference), (fast.to_pydict(), reference.to_pydict())
                singles += 1
    assert singles > 0


def _plain_entry(value: bytes, **metadata: Any) -> bytes:
    md = MessageMetadata(**{"producer_name": "producer-1", "sequence_id": 100, "publish_time": 1_700_000_000_123,
                            **metadata})
    header = md.SerializeToString()
    rest = struct.pack(">i", len(header)) + header + value
    return struct.pack(">HI", 0x0E01, crc32c.crc32c(rest)) + rest


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=40), st.one_of(st.none(), _text), st.booleans(), st.lists(st.tuples(_text, _text), max_size=3),
       st.booleans(), st.integers(0, 2**62 // 1000), st.integers(0, 2**63 - 1), st.integers(-1, 3),
       st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1))
def test_generated_single_message_entries_equal_the_reference(
        value: bytes, key: str | None, null_key: bool, properties: list[tuple[str, str]], null_value: bool,
        event_time: int, sequence_id: int, partition: int, ledger: int, entry: int) -> None:
    md: dict[str, Any] = {"event_time": event_time, "sequence_id": sequence_id}
    if key is not None:
        md["partition_key"] = key
    if null_key:
        md["null_partition_key"] = True
    if null_value:
        md["null_value"] = True
    data = _plain_entry(b"" if null_value else value, **md)
    parsed = parse_entry(data)
    for k, v in properties:
        parsed.metadata.properties.add(key=k, value=v)
    reference = MessageColumns()
    for message in entry_messages(parsed):
        reference.add(message, TOPIC, partition, ledger, entry)
    fast = MessageColumns()
    assert fast.add_single(parsed, TOPIC, partition, ledger, entry)
    assert fast.batch().equals(reference.batch()), (fast.batch().to_pydict(), reference.batch().to_pydict())


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(-1, 2**31 - 1))
def test_entry_message_ids_equal_protobufs(ledger: int, entry: int, partition: int) -> None:
    assert entry_message_id(ledger, entry, partition) == message_id_bytes(ledger, entry, partition)


def test_entries_add_single_leaves_to_the_reference() -> None:
    """A batch, a marker, an encrypted entry, a chunk and any entry of a typed read (a schema's decoder) are not
    taken, with nothing added: the reader then goes through entry_messages."""
    batch = _entry([_record(SingleMessageMetadata(payload_size=1), b"x")])
    marker = _plain_entry(b"", marker_type=1)
    encrypted = _plain_entry(b"secret", encryption_keys=[{"key": "k", "value": b"v"}])
    chunk = _plain_entry(b"part", uuid="u-1", num_chunks_from_msg=2, chunk_id=0, total_chunk_msg_size=8)
    for data in (batch, marker, encrypted, chunk):
        columns = MessageColumns()
        assert not columns.add_single(parse_entry(data), TOPIC, -1, 1, 1)
        assert len(columns) == 0
    typed = MessageColumns()
    typed.decoder = object()  # type: ignore[assignment]
    assert not typed.add_single(parse_entry(_plain_entry(b"v")), TOPIC, -1, 1, 1)


@pytest.mark.parametrize("field", ["event_time", "sequence_id", "publish_time"])
def test_a_single_message_past_the_columns_range_is_the_references_typed_error(field: str) -> None:
    big = {"event_time": 2**62, "sequence_id": 2**63 + 5, "publish_time": 2**62}[field]
    parsed = parse_entry(_plain_entry(b"x", **{field: big}))
    with pytest.raises(PulsarEntryError, match="ledger 7 entry 3"):
        MessageColumns().add_single(parsed, TOPIC, -1, 7, 3)
    with pytest.raises(PulsarEntryError, match="ledger 7 entry 3"):
        MessageColumns().add(entry_messages(parsed)[0], TOPIC, -1, 7, 3)


def test_single_messages_batches_and_references_keep_their_order() -> None:
    batch = _entry([_record(SingleMessageMetadata(payload_size=1, sequence_id=i), bytes([65 + i])) for i in range(2)])
    columns = MessageColumns()
    assert columns.add_single(parse_entry(_plain_entry(b"s")), TOPIC, -1, 1, 0)
    assert columns.add_batch(parse_entry(batch), TOPIC, -1, 1, 1)
    columns.add(entry_messages(parse_entry(_plain_entry(b"r")))[0], TOPIC, -1, 1, 2)
    assert columns.add_single(parse_entry(_plain_entry(b"t")), TOPIC, -1, 1, 3)
    out = columns.batch()
    assert out.column("value").to_pylist() == [b"s", b"A", b"B", b"r", b"t"]
    assert out.column("__entryId").to_pylist() == [0, 1, 1, 2, 3]
