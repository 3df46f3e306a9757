"""The Pulsar entry and managed-ledger decoders against bytes Apache Pulsar 4.0.7 wrote (tests/vectors/pulsar,
made by tests/vectors/pulsar/make_vectors.py): every decoded message equals what Pulsar's own Reader gave through
the broker for the same topic (value, key, properties, publish and event time, message id), for batching on and
off, every codec, a chunked message and broker entry metadata; plus the errors for bytes Pulsar does not write."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any, Iterator

import pytest

from bkspark.pulsar.columns import MessageColumns, message_id_bytes
from bkspark.pulsar.compression import decompress
from bkspark.pulsar.entry import ChunkAssembler, PulsarMessage, entry_messages, parse_entry
from bkspark.pulsar.errors import PulsarChecksumError, PulsarChunkError, PulsarEntryError, PulsarMetadataError
from bkspark.pulsar.managed_ledger import parse_managed_ledger_info, topic_ledgers
from bkspark.pulsar.proto.MLDataFormats_pb2 import ManagedLedgerInfo
from bkspark.pulsar.proto.PulsarApi_pb2 import MessageMetadata, SingleMessageMetadata

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "pulsar"


def _unb64(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"b64"}:
            return base64.b64decode(value["b64"])
        return {k: _unb64(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unb64(v) for v in value]
    return value


def _load(name: str) -> dict[str, Any]:
    return _unb64(json.loads((VECTORS / name).read_text()))["topics"]


PLAIN = _load("entries.json")
BEM = _load("broker-entry-metadata.json")
ALL = {**PLAIN, **BEM}


def decode(entries: list[dict[str, Any]], partition: int = -1) -> Iterator[tuple[PulsarMessage, int, int, bytes]]:
    """What the reader does with a topic's entries: (message, ledger, entry, serialized message id)."""
    chunks = ChunkAssembler()
    for e in entries:
        parsed = parse_entry(e["data"])
        if parsed.is_chunk:
            done = chunks.add(parsed, (e["ledger"], e["entry"]))
            if done is not None:
                message, first = done
                yield message, e["ledger"], e["entry"], message_id_bytes(e["ledger"], e["entry"], partition, first_chunk=first)
            continue
        for message in entry_messages(parsed):
            yield message, e["ledger"], e["entry"], message_id_bytes(
                e["ledger"], e["entry"], partition, message.batch_index, message.batch_size
            )
    assert chunks.pending == []


@pytest.mark.parametrize("topic", sorted(ALL))
def test_decoded_messages_equal_the_readers(topic: str) -> None:
    vector = ALL[topic]
    decoded = list(decode(vector["entries"]))
    oracle = vector["messages"]
    assert len(decoded) == len(oracle) > 0
    for (message, ledger, entry, mid), want in zip(decoded, oracle):
        assert bytes(message.value) == want["value"]
        assert message.key == want["key"]
        assert dict(message.properties) == want["properties"]
        assert message.publish_time == want["publish_time"]
        assert message.event_time == want["event_time"]
        assert (ledger, entry, message.batch_index) == (want["ledger"], want["entry"], want["batch_index"])
        assert mid == want["message_id"]


def test_vectors_cover_every_case() -> None:
    """The vectors hold what the decoder must handle: every codec batched, unbatched entries, a chunked message,
    keys, properties, event times, broker entry metadata, a compressed managed-ledger info."""
    codecs = {parse_entry(e["data"]).metadata.compression for v in PLAIN.values() for e in v["entries"]}
    assert codecs == {0, 1, 2, 3, 4}
    parsed = [parse_entry(e["data"]) for v in ALL.values() for e in v["entries"]]
    assert any(p.is_batch for p in parsed) and any(not p.is_batch and not p.is_chunk for p in parsed)
    assert any(p.is_chunk for p in parsed)
    assert all(p.broker_metadata is not None for v in BEM.values() for p in map(parse_entry, (e["data"] for e in v["entries"])))
    assert all(parse_entry(e["data"]).broker_metadata is None for v in PLAIN.values() for e in v["entries"])
    messages = [m for v in ALL.values() for m in v["messages"]]
    assert any(m["key"] for m in messages) and any(m["properties"] for m in messages) and any(m["event_time"] for m in messages)
    assert all(v["managed_ledger"][:2] == b"\x47\x78" for v in BEM.values())


def test_broker_entry_metadata_is_read() -> None:
    for vector in BEM.values():
        indexes = []
        for e in vector["entries"]:
            broker = parse_entry(e["data"]).broker_metadata
            assert broker is not None and broker.broker_timestamp > 1_600_000_000_000
            indexes.append(broker.index)
        assert indexes == sorted(indexes)


@pytest.mark.parametrize("topic", sorted(ALL))
def test_managed_ledger_info_lists_the_entries_ledgers(topic: str) -> None:
    vector = ALL[topic]
    ledgers = topic_ledgers(parse_managed_ledger_info(vector["managed_ledger"]))
    assert [entry_ledger for entry_ledger in sorted({e["ledger"] for e in vector["entries"]})] == [
        ledger.ledger_id for ledger in ledgers
    ]
    assert ledgers[-1].entries is None  # the ledger the broker writes


def test_compressed_managed_ledger_info_matches_its_plain_form() -> None:
    for vector in BEM.values():
        data = vector["managed_ledger"]
        info = parse_managed_ledger_info(data)
        size = struct.unpack_from(">i", data, 2)[0]
        assert info.SerializeToString() == decompress(1, data[6 + size :], len(info.SerializeToString()))


def test_managed_ledger_info_errors() -> None:
    with pytest.raises(PulsarMetadataError):
        parse_managed_ledger_info(b"\x0a\xff\xff")
    info = ManagedLedgerInfo()
    info.ledgerInfo.add(ledgerId=7, entries=3, size=30, timestamp=5)
    info.ledgerInfo.add(ledgerId=9).offloadContext.complete = True
    ledgers = topic_ledgers(parse_managed_ledger_info(info.SerializeToString()))
    assert [(x.ledger_id, x.entries, x.offloaded) for x in ledgers] == [(7, 3, False), (9, None, True)]
    # A compressed header whose body does not decompress falls back to the plain form, as Pulsar does: here the
    # plain form is not a ManagedLedgerInfo either.
    with pytest.raises(PulsarMetadataError):
        parse_managed_ledger_info(b"\x47\x78\x00\x00\x00\x04\x08\x01\x10\x63garbage")


def _plain_entry() -> bytes:
    return next(e["data"] for e in PLAIN["persistent://public/default/single-none"]["entries"])


def test_checksum_is_verified() -> None:
    data = bytearray(_plain_entry())
    data[-1] ^= 0x01
    with pytest.raises(PulsarChecksumError):
        parse_entry(bytes(data))
    assert parse_entry(bytes(data), verify_checksum=False).payload[-1] == data[-1]


def test_entry_without_checksum_is_read() -> None:
    """A producer of protocol version < 6 wrote no magic and no checksum."""
    data = _plain_entry()
    assert struct.unpack_from(">H", data)[0] == 0x0E01
    stripped = data[6:]
    assert bytes(parse_entry(stripped).payload) == bytes(parse_entry(data).payload)


@pytest.mark.parametrize("cut", [1, 3, 8, 12])
def test_truncated_entries_fail_clearly(cut: int) -> None:
    with pytest.raises(PulsarEntryError):
        entry_messages(parse_entry(_plain_entry()[:cut]))


def _entry(md: MessageMetadata, payload: bytes) -> bytes:
    import crc32c

    body = struct.pack(">i", md.ByteSize()) + md.SerializeToString() + payload
    return struct.pack(">HI", 0x0E01, crc32c.crc32c(body)) + body


def _md(**fields: Any) -> MessageMetadata:
    return MessageMetadata(producer_name="p", sequence_id=1, publish_time=1000, **fields)


def _batch(*records: tuple[SingleMessageMetadata, bytes]) -> bytes:
    return b"".join(struct.pack(">i", s.ByteSize()) + s.SerializeToString() + p for s, p in records)


def test_markers_compacted_out_and_null_values() -> None:
    assert entry_messages(parse_entry(_entry(_md(marker_type=10), b"x"))) == []
    payload = _batch(
        (SingleMessageMetadata(payload_size=1, compacted_out=True), b"a"),
        (SingleMessageMetadata(payload_size=0, null_value=True, partition_key="k"), b""),
        (SingleMessageMetadata(payload_size=1, sequence_id=42, event_time=7), b"c"),
    )
    messages = entry_messages(parse_entry(_entry(_md(num_messages_in_batch=3), payload)))
    assert [(m.batch_index, m.value, m.key) for m in messages] == [(1, None, b"k"), (2, b"c", None)]
    assert messages[1].sequence_id == 42 and messages[1].event_time == 7 and messages[0].sequence_id == 2
    assert entry_messages(parse_entry(_entry(_md(null_value=True), b"")))[0].value is None


def test_byte_keys_are_base64_decoded() -> None:
    md = _md(partition_key=base64.b64encode(b"\x00\xff").decode(), partition_key_b64_encoded=True)
    assert entry_messages(parse_entry(_entry(md, b"v")))[0].key == b"\x00\xff"


def test_encrypted_entries_pass_as_stored_with_a_flag() -> None:
    md = _md(num_messages_in_batch=2, compression=1, uncompressed_size=99)
    md.encryption_keys.add(key="k", value=b"secret")
    (message,) = entry_messages(parse_entry(_entry(md, b"ciphertext")))
    assert message.encrypted and message.value == b"ciphertext" and message.batch_index == -1


def test_bad_batches_and_codecs_fail_clearly() -> None:
    with pytest.raises(PulsarEntryError, match="batch"):
        entry_messages(parse_entry(_entry(_md(num_messages_in_batch=2), _batch((SingleMessageMetadata(payload_size=1), b"a")))))
    with pytest.raises(PulsarEntryError, match="records"):
        entry_messages(parse_entry(_entry(_md(num_messages_in_batch=1), _batch((SingleMessageMetadata(payload_size=1), b"a")) + b"zz")))
    with pytest.raises(PulsarEntryError, match="does not decompress"):
        entry_messages(parse_entry(_entry(_md(compression=3, uncompressed_size=10), b"not zstd")))
    with pytest.raises(PulsarEntryError, match="unknown Pulsar compression"):
        decompress(9, b"x", 1)


def test_a_message_belongs_to_the_scan_of_its_last_chunk_which_reads_back_for_the_rest() -> None:
    """A scan that starts after a message's first chunk asks ``earlier`` for the chunks before it when it reaches
    the last one (the message is then whole, with chunk 0's position); without them it is an error; a scan that ends
    before the last chunk leaves the message pending (the next scan gives it); chunks out of order are an error."""
    entries = PLAIN["persistent://public/default/chunked-lz4"]["entries"]
    chunks = [(parse_entry(e["data"]), (e["ledger"], e["entry"])) for e in entries if parse_entry(e["data"]).is_chunk]
    assert len(chunks) == 3
    whole = ChunkAssembler()
    assert whole.add(*chunks[0]) is None and whole.add(*chunks[1]) is None
    message, first = whole.add(*chunks[2])
    assert first == chunks[0][1]
    with pytest.raises(PulsarChunkError, match="without the chunks before it"):
        ChunkAssembler().add(*chunks[2])
    asked: list[tuple[str, str, int]] = []

    def earlier(producer: str, uuid: str, count: int) -> Any:
        asked.append((producer, uuid, count))
        return chunks[0][1], [bytes(chunks[0][0].payload)]

    late = ChunkAssembler()
    assert late.add(*chunks[1], earlier=earlier) is None and asked == []
    again, again_first = late.add(*chunks[2], earlier=earlier)
    md = chunks[0][0].metadata
    assert asked == [(md.producer_name, md.uuid, 1)] and late.pending == []
    assert (again.value, again_first) == (message.value, first)
    with pytest.raises(PulsarChunkError, match="without the chunks before it"):
        ChunkAssembler().add(*chunks[2], earlier=lambda *_: None)
    partial = ChunkAssembler()
    partial.add(*chunks[0])
    assert [p[1:] for p in partial.pending] == [(chunks[0][0].metadata.uuid, chunks[0][1])]
    with pytest.raises(PulsarChunkError, match="out of order"):
        partial.add(*chunks[2])


def test_columns_build_one_arrow_batch() -> None:
    vector = PLAIN["persistent://public/default/batch-zstd"]
    columns = MessageColumns()
    for message, ledger, entry, _ in decode(vector["entries"]):
        columns.add(message, "persistent://public/default/batch-zstd", -1, ledger, entry)
    batch = columns.batch()
    assert batch.num_rows == 30
    rows = batch.to_pylist()
    want = vector["messages"]
    assert [r["value"] for r in rows] == [m["value"] for m in want]
    assert [r["__messageId"] for r in rows] == [m["message_id"] for m in want]
    assert [dict(r["__messageProperties"]) for r in rows] == [m["properties"] for m in want]
    assert [int(r["__publishTime"].timestamp() * 1000) for r in rows] == [m["publish_time"] for m in want]
    assert [r["__eventTime"] and int(r["__eventTime"].timestamp() * 1000) or 0 for r in rows] == [m["event_time"] for m in want]


def test_a_slice_reads_back_through_earlier_ledgers_for_the_first_chunks() -> None:
    """``PulsarReader._chunks_before`` (what a slice holding a message's last chunk calls): chunk 0 found behind
    several read-back windows of the slice's own ledger and in an earlier ledger of the partition; a deleted ledger
    or no earlier ledger at all gives None (the assembler's PulsarChunkError)."""
    from types import SimpleNamespace

    from bkspark.datasource.pulsar_options import parse_pulsar_read_options
    from bkspark.datasource.pulsar_reader import CHUNK_READ_BACK, PulsarReader, PulsarSlice
    from bkspark.errors import NoSuchLedgerMetadataError

    chunk_entries = [e["data"] for e in PLAIN["persistent://public/default/chunked-lz4"]["entries"]
                     if parse_entry(e["data"]).is_chunk]
    filler = PLAIN["persistent://public/default/batch-zstd"]["entries"][0]["data"]
    md = parse_entry(chunk_entries[0]).metadata
    gap = CHUNK_READ_BACK + 3  # entries between chunk 0 and the slice: two windows back
    ledgers = {4: [filler, chunk_entries[0]], 5: [filler] * gap + [chunk_entries[1], chunk_entries[2]],
               6: [chunk_entries[0]] + [filler] * gap + [chunk_entries[1], chunk_entries[2]]}

    class Handle:
        def __init__(self, entries: list[bytes]) -> None:
            self.entries, self.last_add_confirmed = entries, len(entries) - 1

        def read(self, first: int, last: int) -> list[Any]:
            return [SimpleNamespace(entry_id=i, payload=self.entries[i]) for i in range(first, last + 1)]

        def close(self) -> None:
            pass

    class Bk:
        def open_ledger(self, ledger_id: int, **_: Any) -> Handle:
            if ledger_id not in ledgers:
                raise NoSuchLedgerMetadataError("deleted")
            return Handle(ledgers[ledger_id])

    reader = PulsarReader(parse_pulsar_read_options({"metadataServiceUri": "zk:127.0.0.1:2181", "topic": "t"}))

    def back(ledger_id: int, first: int, previous: tuple[int, ...], count: int = 2) -> Any:
        part = PulsarSlice(0, ledger_id, first, first, topic="t", previous_ledgers=previous)
        return reader._chunks_before(Bk(), part, md.producer_name, md.uuid, count)  # noqa: SLF001

    payloads = [bytes(parse_entry(data).payload) for data in chunk_entries]
    assert back(6, gap + 2, ()) == ((6, 0), payloads[:2])  # its own ledger, read back window by window
    assert back(5, gap + 1, (4, 3), count=1) == ((4, 1), payloads[:1])  # into the ledger before
    assert back(5, gap + 1, (3,), count=1) is None  # the ledger that held chunk 0 is deleted
    assert back(5, gap + 1, (), count=1) is None  # no earlier ledger: the first chunks are gone
