"""The Pulsar decoder alone, no broker and no Spark: batch entries of --batch messages of --size bytes (LZ4, each
message with its own sequence id, as Pulsar's producers write them) turned into the reader's Arrow batches, by the
compiled split (bkspark/pulsar/_batch.c) and by the pure-Python reference, in turns, same run.  ``--batch 0``:
entries of one message each (a producer with batching off), taken by ``MessageColumns.add_single`` on the fast
path.

    python -m bench.pulsar_decode [--messages 200000] [--batch 1000] [--size 100] [--rounds 3] [--profile FILE]
                                  [--spark CORES]

Prints messages/s of each path per round, the medians and their ratio (compiled ÷ reference).  ``--profile``
writes cProfile's top functions of one compiled round to FILE.  ``--spark CORES`` also times what Spark itself
costs: a Python data source whose partitions yield the compiled path's Arrow batches of the same entries (decoded
in the Python workers, from entries each worker makes once and keeps) into the ``noop`` sink on ``local[CORES]``,
the ceiling of a Pulsar scan's rate on this machine whatever the bookies do (docs/pulsar.md, "Speed").
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import struct
import time

TOPIC = "persistent://public/default/bench"


def make_entries(messages: int, batch: int, size: int) -> list[bytes]:
    import cramjam
    import crc32c

    from bkspark.pulsar.compression import LZ4
    from bkspark.pulsar.entry import MAGIC_CRC32C
    from bkspark.pulsar.proto.PulsarApi_pb2 import MessageMetadata, SingleMessageMetadata

    entries = []
    value = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    if batch == 0:  # batching off: one LZ4 message per entry
        for sequence in range(messages):
            md = MessageMetadata(producer_name="bench", sequence_id=sequence, publish_time=1_700_000_000_000,
                                 compression=LZ4, uncompressed_size=size)
            header = md.SerializeToString()
            rest = struct.pack(">i", len(header)) + header + bytes(cramjam.lz4.compress_block(value, store_size=False))
            entries.append(struct.pack(">HI", MAGIC_CRC32C, crc32c.crc32c(rest)) + rest)
        return entries
    for first in range(0, messages, batch):
        count = min(batch, messages - first)
        records = bytearray()
        for index in range(count):
            smm = SingleMessageMetadata(payload_size=size, sequence_id=first + index).SerializeToString()
            records += struct.pack(">i", len(smm)) + smm + value
        raw = bytes(records)
        md = MessageMetadata(producer_name="bench", sequence_id=first, publish_time=1_700_000_000_000,
                             compression=LZ4, uncompressed_size=len(raw), num_messages_in_batch=count)
        header = md.SerializeToString()
        rest = struct.pack(">i", len(header)) + header + bytes(cramjam.lz4.compress_block(raw, store_size=False))
        entries.append(struct.pack(">HI", MAGIC_CRC32C, crc32c.crc32c(rest)) + rest)
    return entries


def decode(entries: list[bytes], compiled: bool) -> int:
    """Rows decoded from ``entries`` by the reader's loop, without the client."""
    return sum(batch.num_rows for batch in decoded_batches(entries, compiled))


def spark_ceiling(messages: int, batch: int, size: int, cores: int, rounds: int) -> list[float]:
    """Rows/s of Spark taking the decoder's batches from a Python data source into ``noop`` (first round: the
    workers' start and their entries; later rounds: the steady rate)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from bench.common import spark_session
    from bkspark.pulsar.columns import PULSAR_SCHEMA_DDL

    per_partition = messages // cores

    class DecodedReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(cores)]

        def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
            import builtins

            from bench.pulsar_decode import decoded_batches, make_entries

            key = ("_bench_pulsar_entries", per_partition, batch, size)
            entries = getattr(builtins, "_bench_pulsar_entries", {}).get(key)
            if entries is None:
                entries = make_entries(per_partition, batch, size)
                builtins._bench_pulsar_entries = {key: entries}  # type: ignore[attr-defined]
            yield from decoded_batches(entries)

    class Decoded(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_pulsar_decoded"

        def schema(self) -> str:
            return PULSAR_SCHEMA_DDL

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return DecodedReader()

    spark = spark_session(cores, "bench-pulsar-decode")
    spark.dataSource.register(Decoded)
    rates = []
    try:
        for _ in range(rounds + 1):
            t0 = time.perf_counter()
            spark.read.format("bench_pulsar_decoded").load().write.format("noop").mode("overwrite").save()
            rates.append(per_partition * cores / (time.perf_counter() - t0))
    finally:
        spark.stop()
    return rates


def decoded_batches(entries: list[bytes], compiled: bool = True):  # type: ignore[no-untyped-def]
    """The Arrow batches the reader's loop (bkspark/datasource/pulsar_reader.py) yields for ``entries``: by the
    compiled split (and ``add_single`` for entries of one message), or with ``compiled`` False by the pure-Python
    reference message by message."""
    from bkspark.datasource.pulsar_reader import ROWS_PER_BATCH
    from bkspark.pulsar.columns import MessageColumns
    from bkspark.pulsar.entry import entry_messages, parse_entry

    columns = MessageColumns()
    for entry_id, data in enumerate(entries):
        entry = parse_entry(data)
        if not (compiled and (entry.is_batch and columns.add_batch(entry, TOPIC, -1, 1, entry_id)
                              or columns.add_single(entry, TOPIC, -1, 1, entry_id))):
            if compiled:
                raise RuntimeError("the compiled split handed a bench entry back")
            for message in entry_messages(entry):
                columns.add(message, TOPIC, -1, 1, entry_id)
        if len(columns) >= ROWS_PER_BATCH:
            yield columns.batch()
            columns.clear()
    if len(columns):
        yield columns.batch()


def main() -> None:
    from bkspark.pulsar import columns as columns_module

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", help="write the compiled path's profile (top 25 by own time) here")
    p.add_argument("--spark", type=int, metavar="CORES", help="also time Spark taking the decoded batches")
    args = p.parse_args()
    if columns_module._batch is None:
        raise SystemExit("bkspark.pulsar._batch is not built (or BKSPARK_NO_EXTENSIONS is set): run `make venv`")
    entries = make_entries(args.messages, args.batch, args.size)
    decode(entries[:2], True), decode(entries[:2], False)  # imports and the schema, untimed
    rounds = []
    for index in range(args.rounds):
        result = {}
        for name, compiled in ([("compiled", True), ("reference", False)] if index % 2 == 0
                               else [("reference", False), ("compiled", True)]):
            t0 = time.perf_counter()
            rows = decode(entries, compiled)
            result[f"{name}_msgs_per_sec"] = rows / (time.perf_counter() - t0)
            assert rows == args.messages, (name, rows)
        rounds.append(result)
        print(json.dumps({"round": index, **{k: round(v) for k, v in result.items()}}), flush=True)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print(json.dumps({"messages": args.messages, "batch": args.batch, "size": args.size,
                      **{k: round(v) for k, v in med.items()},
                      "ratio_compiled_over_reference": round(med["compiled_msgs_per_sec"]
                                                             / med["reference_msgs_per_sec"], 2)}))
    if args.spark:
        rates = spark_ceiling(args.messages, args.batch, args.size, args.spark, args.rounds)
        print(json.dumps({"spark_cores": args.spark, "spark_first_round_msgs_per_sec": round(rates[0]),
                          "spark_msgs_per_sec": [round(r) for r in rates[1:]],
                          "spark_median_msgs_per_sec": round(statistics.median(rates[1:]))}))
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(decode, entries, True)
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        with open(args.profile, "w") as f:
            f.write(f"# python -m bench.pulsar_decode --messages {args.messages} --batch {args.batch} "
                    f"--size {args.size}: the compiled path, one round\n{out.getvalue()}")


if __name__ == "__main__":
    main()
