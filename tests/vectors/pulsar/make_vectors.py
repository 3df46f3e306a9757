"""How tests/vectors/pulsar/*.json were made: real entries written by Apache Pulsar 4.0.7, for the unit tests of
bkspark/pulsar (tests/unit/test_pulsar_entry.py), which then run without a broker.

    make pulsar-jars && .venv/bin/python -m tests.vectors.pulsar.make_vectors

starts a Pulsar standalone (tests/harness/pulsar.py) twice: once plain (``entries.json``: batching on and off,
every codec, keys, properties, event times, a chunked message), once with both broker entry metadata interceptors
and the managed-ledger info compressed with LZ4 (``broker-entry-metadata.json``).  For each topic it stores the
managed-ledger znode's bytes, every raw entry of its ledgers (read from the bookie by a read-only bkspark client)
and what Pulsar's Reader gives through the broker: the oracle the decoded entries must equal.
"""

from __future__ import annotations

import base64
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.harness.pulsar import (
    BROKER_ENTRY_METADATA_INTERCEPTORS, PulsarStandalone, raw_ledger_entries, reader_messages,
)

HERE = Path(__file__).resolve().parent
CODECS = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")


def _b64(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {k: _b64(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_b64(v) for v in value]
    return value


def produce(service_url: str, topic: str, count: int, *, batching: bool, codec: str = "NONE",
            chunk_bytes: int = 0) -> None:
    import pulsar

    client = pulsar.Client(service_url)
    try:
        producer = client.create_producer(
            topic, producer_name=f"vectors-{topic.rsplit('/', 1)[-1]}", batching_enabled=batching,
            batching_max_publish_delay_ms=50, compression_type=pulsar.CompressionType(CODECS.index(codec)),
            chunking_enabled=bool(chunk_bytes),
        )
        rng = random.Random(43)
        for i in range(count):
            value = f"message {i} of {topic} ".encode() * (1 + i % 4)
            kwargs: dict[str, Any] = {"properties": {"i": str(i), "codec": codec}} if i % 3 else {}
            if i % 2 == 0:
                kwargs["partition_key"] = f"key-{i % 5}"
            if i % 4 == 1:
                kwargs["event_timestamp"] = 1_700_000_000_000 + i
            producer.send_async(value, lambda result, msg_id: None, **kwargs)
        if chunk_bytes:
            producer.send(bytes(rng.getrandbits(8) for _ in range(chunk_bytes)), properties={"chunked": "yes"},
                          partition_key="big")
            producer.send(b"after the chunked message")
        producer.flush()
        producer.close()
    finally:
        client.close()


def capture(pulsar: PulsarStandalone, topics: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"pulsar_version": "4.0.7", "topics": {}}
    for local, how in topics.items():
        topic = f"persistent://public/default/{local}"
        produce(pulsar.service_url, topic, **how)
    time.sleep(1.0)  # an explicit LAC (100 ms) for the ledgers still open
    for local in topics:
        topic = f"persistent://public/default/{local}"
        entries = raw_ledger_entries(pulsar.metadata_service_uri, topic)
        out["topics"][topic] = {
            "managed_ledger": entries[0]["managed_ledger"],
            "entries": [{k: e[k] for k in ("ledger", "entry", "data")} for e in entries],
            "messages": reader_messages(pulsar.service_url, topic),
        }
    return _b64(out)


def main() -> None:
    plain = {f"batch-{c.lower()}": {"count": 30, "batching": True, "codec": c} for c in CODECS}
    plain.update({f"single-{c.lower()}": {"count": 6, "batching": False, "codec": c} for c in ("NONE", "ZSTD")})
    plain["chunked-lz4"] = {"count": 2, "batching": False, "codec": "LZ4", "chunk_bytes": 150_000}
    conf = {"maxMessageSize": 65536}
    runs = [
        ("entries.json", plain, conf),
        ("broker-entry-metadata.json", {"bem-batch-lz4": {"count": 30, "batching": True, "codec": "LZ4"},
                                        "bem-single": {"count": 4, "batching": False}},
         {**conf, "brokerEntryMetadataInterceptors": BROKER_ENTRY_METADATA_INTERCEPTORS,
          "managedLedgerInfoCompressionType": "LZ4", "managedLedgerInfoCompressionThresholdInBytes": 0}),
    ]
    for name, topics, extra in runs:
        with tempfile.TemporaryDirectory(prefix="pulsar-vectors-") as tmp:
            pulsar = PulsarStandalone(Path(tmp), conf=extra).start()
            try:
                data = capture(pulsar, topics)
            finally:
                pulsar.stop()
        (HERE / name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {HERE / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
