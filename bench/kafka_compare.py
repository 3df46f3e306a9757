"""Issue 14's anchor: bkspark against Apache Kafka and Spark's own Kafka connector, same machine, one run.

    python -m bench.kafka_compare [--records 1000000] [--sizes 100,1024] [--bookie-kinds java,python]
                                  [--cores 2] [--kafka-flush-messages N]

One process tree: a ZooKeeper, one Java bookie (Apache BookKeeper --bk-version, fsync journal) and one Python
bookie (bookie_server, fsync journal) on ledger roots of their own, one Kafka broker (KRaft, one node, jars
from ``make kafka-jars``), and one Spark session ``local[--cores]`` whose ``spark.jars`` are Spark's Kafka
connector (resolved by Maven, not Ivy) and which also has the ``bookkeeper`` data source.  For each record
size, --records records:

* Kafka raw: ``ProducerPerformance`` (kafka-producer-perf-test, acks=all) into a 2-partition topic, then
  ``ConsumerPerformance`` (kafka-consumer-perf-test) of that topic (fetch rate: group join excluded).
* Kafka Spark: ``df.write.format("kafka")`` of --records rows into a 2-partition topic (``--cores`` tasks),
  then ``spark.read.format("kafka")`` of that topic (earliest..latest) into the ``noop`` sink.
* per bookie kind, bookkeeper raw: ``bench.pyclient write`` (bkspark's client, one ledger, 1000 in flight)
  and ``bench.pyclient read --mode batch`` of it (1000 entries / 4 MiB per call); Apache BookKeeper's Java
  client the same way (tools/java BenchClient).
* per bookie kind, bookkeeper Spark: ``df.write.format("bookkeeper")`` of --records rows (``--cores`` tasks,
  one ledger each), then ``spark.read.format("bookkeeper")`` of that dataset, one partition per ledger (as
  Kafka's connector makes one per topic partition), into the ``noop`` sink, with ``includeCustomMetadata=false``
  (rows of Kafka's shape: Kafka's source has no ``headers`` column without ``includeHeaders``) and again with
  the default schema; then the write and the first scan again with rows packed into entries of at most 16 KiB
  (``rowsPerEntry``, ``entryMaxBytes``: Kafka's producer batch size).

Before anything is timed, each format runs an untimed Spark write and scan of --warmup-rows rows (200,000 by
default): Kafka's first timed Spark write after a warm-up of 2,000 rows ran at a third of its later rounds, the
JVM's compiled code not yet ready (BENCHMARKS.md, "Rounds in the anchor").  The raw clients run once per side;
then the Spark jobs run in --rounds rounds (3 by default), every side's jobs in each round, the sides taking
turns to go first, each round writing a topic / dataset of its own and scanning it.  Each Spark figure is the
median round (the lower median of an even count), every round's value beside it.  Right before each side's
timed Spark jobs of every round, a write and scan of 2,000 rows runs untimed (Spark stops Python workers idle
for a minute, and the raw clients' runs take longer).  Ratios are bkspark ÷ Kafka, median ÷ median.  Each
Spark job's row also gives the CPU per record of every kind of process meanwhile (``/proc/<pid>/stat``, as
``bench.write_cpu`` reads it): the Spark JVM, its Python workers (with the Python processes that plan and
commit the job), the bookie, the broker.  What is and is not comparable (replication, fsync, batching) is
printed as notes and written up in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

from bench.common import (
    Cluster,
    Report,
    Unavailable,
    add_common_args,
    command_line,
    java_bench,
    machine_facts,
    median_run,
    payload_frame,
    py_bench,
    run_main,
    spark_session,
    timed,
)
from bench.kafka_broker import KAFKA_VERSION, SPARK_KAFKA_VERSION, KafkaBroker, spark_kafka_jars
from bench.write_cpu import cpu_by_process, cpu_seconds_by_kind

BATCH_COUNT = 1000
BATCH_BYTES = 4 * 1024 * 1024
#: The packed Spark write's bounds: entries of up to Kafka's producer batch.size (16 KiB), as many rows as fit
#: (docs/connector.md, "Rows per entry").
PACKED_ENTRY_BYTES = 16 * 1024
PACKED_ROWS = 100_000
#: ``maxBytesPerPartition`` of the scans: no ledger is cut by bytes (1 TiB).
UNBOUNDED_BYTES = 1 << 40
#: Rows of the untimed Spark jobs right before each side's timed ones in every round: enough to start Spark's
#: Python workers and clients again, as the timed jobs would otherwise.
WARM_ROWS = 2000


def _spark(cores: int, jars: list[str]) -> Any:
    """local[cores] with Spark's Kafka connector on the classpath and the bookkeeper data source registered."""
    return spark_session(cores, "bkspark-kafka-compare", jars=jars, driver_memory="2g")


def _noop(df: Any) -> float:
    """Seconds to run ``df`` into the noop sink."""
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


class _Run:
    """The figures of one run: each measurement's rounds keyed by (size, side, what); :meth:`flush` reports the
    median round of each, every raw result kept for the JSON."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.values: dict[tuple[int, str, str], float] = {}
        self.last_cpu: dict[str, float] = {}
        self.samples: dict[tuple[int, str, str], list[dict[str, Any]]] = {}

    def attempt(self, label: str, fn: Any) -> Any:
        """``fn()``, or None if it failed; the CPU seconds every kind of process spent meanwhile are kept in
        :attr:`last_cpu`."""
        self.last_cpu = {}
        before = cpu_by_process()
        try:
            result = fn()
            self.last_cpu = cpu_seconds_by_kind(before, cpu_by_process())
            return result
        except Unavailable as exc:
            self.report.fail(label, f"unavailable: {exc}")
        except Exception as exc:  # noqa: BLE001 - one failed part must not stop the others
            self.report.fail(label, f"{type(exc).__name__}: {str(exc)[:1500]}")
        return None

    def put(self, size: int, side: str, what: str, value: float | None, unit: str, records: int = 0) -> None:
        """One round of a figure; with ``records``, also the CPU per record of every kind of process during the
        last :meth:`attempt` (where a job's time went: the Spark JVM, its Python workers, the bookie, the broker)."""
        if value is None:
            return
        sample: dict[str, Any] = {"value": value, "unit": unit}
        if records:
            sample["cpu_us_per_record"] = {kind: round(secs / records * 1e6, 2)
                                           for kind, secs in sorted(self.last_cpu.items(), key=lambda kv: -kv[1])
                                           if secs >= 0.01}
        self.samples.setdefault((size, side, what), []).append(sample)

    def note(self, text: str) -> None:
        """A note printed once however many rounds make it."""
        if text not in self.report.notes:
            self.report.notes.append(text)

    def flush(self, size: int) -> None:
        """Report each of ``size``'s figures as its median round (the lower median of an even count, with that
        round's CPU per record), every round's value alongside when there was more than one."""
        for (s, side, what), rounds in list(self.samples.items()):
            if s != size:
                continue
            median = median_run(rounds, key="value")
            assert median is not None
            value = float(median["value"])
            self.values[(size, side, what)] = value
            extra: dict[str, Any] = {"mb_s": value * size / 1e6}
            if len(rounds) > 1:
                extra["rounds"] = [float(r["value"]) for r in rounds]
            if "cpu_us_per_record" in median:
                extra["cpu_us_per_record"] = median["cpu_us_per_record"]
            self.report.row(f"{size} B: {side}: {what}", value, median["unit"], **extra)
            del self.samples[(s, side, what)]


def _kafka_raw(run: _Run, kafka: KafkaBroker, size: int, n: int) -> None:
    """Kafka's own perf tools: ProducerPerformance into a 2-partition topic, ConsumerPerformance of it."""
    raw_topic = f"raw-{size}"
    with timed(f"{size} B: Kafka raw producer, {n} records"):
        kafka.create_topic(raw_topic, 2)
        res = run.attempt(f"{size} B Kafka ProducerPerformance", lambda: kafka.produce_perf(raw_topic, n, size))
        if res:
            run.report.raw.append({"size": size, "side": "kafka", "what": "producer", **res})
            run.put(size, "Kafka", "raw producer (Java)", res["records_per_sec"], "records/s")
    with timed(f"{size} B: Kafka raw consumer"):
        res = run.attempt(f"{size} B Kafka ConsumerPerformance", lambda: kafka.consume_perf(raw_topic, n, f"g-{size}"))
        if res:
            run.report.raw.append({"size": size, "side": "kafka", "what": "consumer", **res})
            run.put(size, "Kafka", "raw consumer (Java)", res["fetch_records_per_sec"], "records/s")


def _kafka_spark(run: _Run, kafka: KafkaBroker, spark: Any, size: int, n: int, cores: int, round_no: int) -> None:
    """One round of Spark's Kafka connector: a write of ``n`` rows into a topic of this round's, a scan of it."""
    _kafka_warm(run, spark, kafka, cores, f"{size}-r{round_no}")
    opts = {"kafka.bootstrap.servers": kafka.bootstrap}
    spark_topic = f"spark-{size}-r{round_no}"

    def spark_write() -> float:
        t0 = time.perf_counter()
        payload_frame(spark, n, size, cores, "value").write.format("kafka").options(**opts).option("topic", spark_topic).save()
        return n / (time.perf_counter() - t0)

    def spark_scan() -> float:
        df = (spark.read.format("kafka").options(**opts).option("subscribe", spark_topic)
              .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
        nparts = df.rdd.getNumPartitions()
        secs = _noop(df)
        run.note(f"{size} B: Kafka's connector planned {nparts} partitions for the scan.")
        return n / secs

    with timed(f"{size} B, round {round_no}: Spark write into Kafka"):
        kafka.create_topic(spark_topic, 2)
        run.put(size, "Kafka", "Spark write", run.attempt(f"{size} B Spark write (kafka)", spark_write), "rows/s",
                records=n)
    with timed(f"{size} B, round {round_no}: Spark scan of Kafka"):
        run.put(size, "Kafka", "Spark scan", run.attempt(f"{size} B Spark scan (kafka)", spark_scan), "rows/s",
                records=n)


def _bookkeeper_raw(run: _Run, cluster: Cluster, uri: str, kind: str, size: int, n: int, bk_version: str) -> None:
    """bkspark's client and Apache BookKeeper's Java client: a ledger of ``n`` entries each, a batched read of it."""
    side = f"bkspark ({kind} bookie)"
    common = dict(ensemble=1, write=1, ack=1, digest="CRC32C")
    with timed(f"{size} B: {side}: raw client write + batched read"):
        w = run.attempt(f"{size} B {side} raw write",
                        lambda: py_bench(uri, "write", entries=n, size=size, outstanding=1000, warmup=min(n, 5000),
                                         **common))
        if w:
            run.report.raw.append({"size": size, "side": side, **w})
            run.put(size, side, "raw client write", float(w["entries_per_sec"]), "entries/s")
            r = run.attempt(f"{size} B {side} raw batched read",
                            lambda: py_bench(uri, "read", ledger=int(w["ledger_id"]), mode="batch",
                                             batch_size=BATCH_COUNT, max_size=BATCH_BYTES, passes=1, warmup_passes=1,
                                             digest="CRC32C"))
            if r:
                run.report.raw.append({"size": size, "side": side, **r})
                run.put(size, side, "raw client batched read", float(r["entries_per_sec"]), "entries/s")
    jside = f"BookKeeper Java client ({kind} bookie)"
    with timed(f"{size} B: {jside}: write + batched read"):
        w = run.attempt(f"{size} B {jside} write",
                        lambda: java_bench(cluster, bk_version, uri, "write", entries=n, size=size, outstanding=1000,
                                           warmup=min(n, 5000), **common))
        if w:
            run.report.raw.append({"size": size, "side": jside, **w})
            run.put(size, jside, "raw client write", float(w["entries_per_sec"]), "entries/s")
            r = run.attempt(f"{size} B {jside} batched read",
                            lambda: java_bench(cluster, bk_version, uri, "read", ledger=int(w["ledger_id"]),
                                               mode="batch", batch_size=BATCH_COUNT, max_size=BATCH_BYTES, passes=1,
                                               warmup_passes=1, digest="CRC32C"))
            if r:
                run.report.raw.append({"size": size, "side": jside, **r})
                run.put(size, jside, "raw client batched read", float(r["entries_per_sec"]), "entries/s")


def _bookkeeper_spark(run: _Run, uri: str, kind: str, spark: Any, size: int, n: int, cores: int,
                      round_no: int) -> None:
    """One round of the bookkeeper source: a write of ``n`` rows as a dataset of this round's and two scans of
    it, then the same packed."""
    side = f"bkspark ({kind} bookie)"
    _bookkeeper_warm(run, spark, uri, kind, cores, f"{size}-r{round_no}")
    dataset = f"spark-{size}-r{round_no}"
    wopts = {"metadataServiceUri": uri, "ensembleSize": "1", "writeQuorumSize": "1", "ackQuorumSize": "1",
             "digestType": "CRC32C"}

    def spark_write() -> float:
        t0 = time.perf_counter()
        payload_frame(spark, n, size, cores, "payload").write.format("bookkeeper").options(**wopts).option(
            "dataset", dataset).mode("append").save()
        return n / (time.perf_counter() - t0)

    def spark_scan(name: str = dataset, custom_metadata: bool = False) -> float:
        # One partition per ledger, as Kafka's source makes one per topic partition: no ledger is cut (by entries or
        # by bytes) and packing never joins the two (the packed dataset's ledgers are small enough to be joined).
        # Rows of Kafka's shape (no custom_metadata column, as Kafka's have no headers column) unless asked.
        df = spark.read.format("bookkeeper").options(
            metadataServiceUri=uri, dataset=name, digestType="CRC32C",
            maxEntriesPerPartition=str(max(1, math.ceil(n / cores))), maxBytesPerPartition=str(UNBOUNDED_BYTES),
            minPartitions=str(cores), batchMaxCount=str(BATCH_COUNT), batchMaxSize=str(BATCH_BYTES),
            includeCustomMetadata=str(custom_metadata).lower(),
        ).load()
        nparts = df.rdd.getNumPartitions()
        secs = _noop(df)
        run.note(f"{size} B: {side}: the bookkeeper source planned {nparts} partitions for the scan.")
        return n / secs

    def spark_write_packed() -> float:
        t0 = time.perf_counter()
        payload_frame(spark, n, size, cores, "payload").write.format("bookkeeper").options(**wopts).options(
            rowsPerEntry=str(PACKED_ROWS), entryMaxBytes=str(PACKED_ENTRY_BYTES)
        ).option("dataset", f"{dataset}-packed").mode("append").save()
        return n / (time.perf_counter() - t0)

    with timed(f"{size} B, round {round_no}: Spark write into {side}"):
        run.put(size, side, "Spark write", run.attempt(f"{size} B Spark write ({side})", spark_write), "rows/s",
                records=n)
    with timed(f"{size} B, round {round_no}: Spark scan of {side}"):
        run.put(size, side, "Spark scan", run.attempt(f"{size} B Spark scan ({side})", spark_scan), "rows/s",
                records=n)
    with timed(f"{size} B, round {round_no}: Spark scan of {side}, with the custom_metadata column"):
        run.put(size, side, "Spark scan, with custom_metadata",
                run.attempt(f"{size} B Spark scan, with custom_metadata ({side})",
                            lambda: spark_scan(custom_metadata=True)), "rows/s", records=n)
    with timed(f"{size} B, round {round_no}: Spark write into {side}, rows packed into entries"):
        run.put(size, side, "Spark write, packed",
                run.attempt(f"{size} B Spark write, packed ({side})", spark_write_packed), "rows/s", records=n)
    with timed(f"{size} B, round {round_no}: Spark scan of {side}, rows packed into entries"):
        run.put(size, side, "Spark scan, packed",
                run.attempt(f"{size} B Spark scan, packed ({side})", lambda: spark_scan(f"{dataset}-packed")), "rows/s",
                records=n)


def _spark_rounds(run: _Run, spark: Any, kafka: KafkaBroker | None, uris: dict[str, str], size: int, n: int,
                  cores: int, rounds: int) -> None:
    """``rounds`` rounds of every side's Spark jobs, the sides taking turns to go first (round r starts with side
    r mod sides), so that no side always runs right after the raw clients or always last."""
    sides: list[Any] = ([None] if kafka is not None else []) + list(uris)
    for round_no in range(rounds):
        shift = round_no % max(1, len(sides))
        for kind in sides[shift:] + sides[:shift]:
            if kind is None:
                _kafka_spark(run, kafka, spark, size, n, cores, round_no)  # type: ignore[arg-type]
            else:
                _bookkeeper_spark(run, uris[kind], kind, spark, size, n, cores, round_no)


def _kafka_warm(run: _Run, spark: Any, kafka: KafkaBroker, cores: int, tag: str, rows: int = WARM_ROWS) -> None:
    """An untimed Spark write of ``rows`` rows into Kafka (topic ``warmup-<tag>``) and a scan of it."""
    def warm() -> None:
        kafka.create_topic(f"warmup-{tag}", 2)
        opts = {"kafka.bootstrap.servers": kafka.bootstrap}
        payload_frame(spark, rows, 100, cores, "value").write.format("kafka").options(**opts).option(
            "topic", f"warmup-{tag}").save()
        _noop(spark.read.format("kafka").options(**opts).option("subscribe", f"warmup-{tag}")
              .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())

    with timed(f"Spark warm-up (untimed): Kafka, {tag}"):
        run.attempt(f"Spark warm-up (kafka, {tag})", warm)


def _bookkeeper_warm(run: _Run, spark: Any, uri: str, kind: str, cores: int, tag: str, rows: int = WARM_ROWS) -> None:
    """An untimed Spark write of ``rows`` rows with the bookkeeper source (dataset ``warmup-<tag>``) and a scan
    of it.

    Run right before each side's timed Spark jobs as well as at the start: Spark stops a Python worker that has
    been idle for a minute, and the raw clients' runs take longer than that, so without it the first timed job
    would start new Python workers (imports, a client and its ZooKeeper session, per worker), which Kafka's
    connector, all in Spark's JVM, never does.  BENCHMARKS.md ("Spark's idle Python workers") measures that cost.
    """
    def warm() -> None:
        opts = {"metadataServiceUri": uri, "ensembleSize": "1", "writeQuorumSize": "1", "ackQuorumSize": "1"}
        payload_frame(spark, rows, 100, cores, "payload").write.format("bookkeeper").options(**opts).option(
            "dataset", f"warmup-{tag}").mode("append").save()
        _noop(spark.read.format("bookkeeper").options(metadataServiceUri=uri, dataset=f"warmup-{tag}").load())

    with timed(f"Spark warm-up (untimed): {kind} bookie, {tag}"):
        run.attempt(f"Spark warm-up ({kind} bookie, {tag})", warm)


def _warm_up(run: _Run, spark: Any, kafka: KafkaBroker, uris: dict[str, str], cores: int, rows: int) -> None:
    """An untimed write and scan of ``rows`` rows per format before anything is timed: JVM classes and their
    compiled code (Spark's Kafka producer and consumer, the bookies' JVM), Python workers and clients get
    ready.  Kafka's first timed Spark write after a warm-up of 2,000 rows ran at a third of its later rounds
    (BENCHMARKS.md, "Rounds in the anchor")."""
    _kafka_warm(run, spark, kafka, cores, "start", rows)
    for kind, uri in uris.items():
        _bookkeeper_warm(run, spark, uri, kind, cores, "start", rows)


def run(args: argparse.Namespace) -> Report:
    cores = args.cores
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    kinds = [k.strip() for k in args.bookie_kinds.split(",") if k.strip()]
    n = args.records
    rounds = args.rounds
    report = Report(
        name="kafka_compare",
        title="bkspark vs Apache Kafka and Spark's Kafka connector (issue 14)",
        command=command_line("bench.kafka_compare"),
        params={
            "records": n,
            "sizes": ",".join(map(str, sizes)),
            "spark": f"local[{cores}]",
            "kafka": f"{KAFKA_VERSION}, 1 KRaft node, 2 partitions, RF 1, "
                     + (f"log.flush.interval.messages={args.kafka_flush_messages}" if args.kafka_flush_messages
                        else "no fsync of its own (Kafka's default)"),
            "spark_kafka_connector": SPARK_KAFKA_VERSION,
            "bookies": ", ".join(f"1 x {k}" + (f" {args.bk_version}" if k == "java" else "") for k in kinds)
                       + ", ensemble 1/1/1, fsync journal",
            "batch_read": f"{BATCH_COUNT} entries / {BATCH_BYTES} bytes",
            "spark_rounds": rounds,
            "spark_warmup_rows": args.warmup_rows,
        },
    )
    report.machine_before = machine_facts()
    runs = _Run(report)
    spark = None
    with Cluster(args.workdir, args.keep, make_jars=not args.no_make) as cluster:
        uris: dict[str, str] = {}
        for kind in kinds:
            with timed(f"starting one {kind} bookie"):
                uri = cluster.new_root(kind)
                ok = runs.attempt(f"{kind} bookie", lambda: (cluster.java_bookies(uri, 1, args.bk_version, "java")
                                                              if kind == "java" else
                                                              cluster.python_bookies(uri, 1, "python")))
                if ok is not None:
                    uris[kind] = uri
        kafka = KafkaBroker(cluster.base / "kafka", flush_messages=args.kafka_flush_messages or None)
        with timed(f"starting Kafka {KAFKA_VERSION} (KRaft)"):
            try:
                kafka.start()
            except Exception as exc:  # noqa: BLE001
                report.fail("Kafka broker", exc)
                kafka = None  # type: ignore[assignment]
        if kafka is not None:
            cluster.callback(kafka.stop)
        with timed(f"starting Spark local[{cores}] with Spark's Kafka connector {SPARK_KAFKA_VERSION}"):
            spark = runs.attempt("Spark session", lambda: _spark(cores, spark_kafka_jars()))
        if spark is not None and kafka is not None:
            _warm_up(runs, spark, kafka, uris, cores, args.warmup_rows)
        try:
            for size in sizes:
                if kafka is not None:
                    _kafka_raw(runs, kafka, size, n)
                for kind, uri in uris.items():
                    _bookkeeper_raw(runs, cluster, uri, kind, size, n, args.bk_version)
                if spark is not None:
                    _spark_rounds(runs, spark, kafka, uris, size, n, cores, rounds)
                runs.flush(size)
        finally:
            if spark is not None:
                spark.stop()

    v = runs.values
    for size in sizes:
        for kind in kinds:
            side = f"bkspark ({kind} bookie)"
            jside = f"BookKeeper Java client ({kind} bookie)"
            report.add_ratio(f"{size} B, {kind} bookie: Spark scan, bkspark ÷ Kafka",
                             v.get((size, side, "Spark scan")), v.get((size, "Kafka", "Spark scan")), goal=1.0)
            report.add_ratio(f"{size} B, {kind} bookie: Spark scan with the custom_metadata column, bkspark ÷ Kafka",
                             v.get((size, side, "Spark scan, with custom_metadata")), v.get((size, "Kafka", "Spark scan")))
            report.add_ratio(f"{size} B, {kind} bookie: Spark write, bkspark ÷ Kafka",
                             v.get((size, side, "Spark write")), v.get((size, "Kafka", "Spark write")), goal=1.0)
            report.add_ratio(f"{size} B, {kind} bookie: Spark scan, packed rows, bkspark ÷ Kafka",
                             v.get((size, side, "Spark scan, packed")), v.get((size, "Kafka", "Spark scan")), goal=1.0)
            report.add_ratio(f"{size} B, {kind} bookie: Spark write, packed rows, bkspark ÷ Kafka",
                             v.get((size, side, "Spark write, packed")), v.get((size, "Kafka", "Spark write")), goal=1.0)
            report.add_ratio(f"{size} B, {kind} bookie: raw read, bkspark client ÷ Kafka consumer",
                             v.get((size, side, "raw client batched read")), v.get((size, "Kafka", "raw consumer (Java)")))
            report.add_ratio(f"{size} B, {kind} bookie: raw write, bkspark client ÷ Kafka producer",
                             v.get((size, side, "raw client write")), v.get((size, "Kafka", "raw producer (Java)")))
            report.add_ratio(f"{size} B, {kind} bookie: raw read, BookKeeper Java client ÷ Kafka consumer",
                             v.get((size, jside, "raw client batched read")), v.get((size, "Kafka", "raw consumer (Java)")))
            report.add_ratio(f"{size} B, {kind} bookie: raw write, BookKeeper Java client ÷ Kafka producer",
                             v.get((size, jside, "raw client write")), v.get((size, "Kafka", "raw producer (Java)")))
    report.notes += [
        "Same machine, one run: ZooKeeper, the bookies, the Kafka broker, Spark local[%d] and the clients share the "
        "cores; figures from a loaded machine move a lot (see the load averages)." % cores,
        "Replication: none on either side (Kafka RF 1 on one broker; ledgers 1/1/1 on one bookie).",
        "fsync: each bookie fsyncs its journal before acknowledging an add (group commit); Kafka by default "
        "acknowledges from the page cache and leaves flushing to the OS (--kafka-flush-messages 1 makes it fsync "
        "after every append). Writes are therefore not like for like; reads are (both served from memory).",
        "Batching: Kafka's producer batches records (batch.size 16 KiB, linger 5 ms in 4.x) and its consumer fetches "
        "up to 50 MiB per request; bkspark sends one add per entry (1000 in flight) and reads %d entries / %d bytes "
        "per batch-read call." % (BATCH_COUNT, BATCH_BYTES),
        "Packed rows: the same Spark write with rowsPerEntry=%d and entryMaxBytes=%d, so entries are at most the "
        "size of a Kafka producer batch (batch.size 16 KiB) as a Kafka record batch is, and the scan of that "
        "dataset (docs/connector.md, 'Rows per entry'). One row per entry stays the connector's default."
        % (PACKED_ROWS, PACKED_ENTRY_BYTES),
        "Raw consumer figure: ConsumerPerformance's fetch rate (the consumer group join is left out).",
        "Rounds: the raw clients run once; the Spark jobs run in %d round(s), the sides taking turns to go first, "
        "each round writing and scanning a topic / dataset of its own; a Spark figure is the median round (the "
        "lower median of an even count, with that round's CPU per record), every round's value in the 'each round' "
        "column; a ratio is median ÷ median." % rounds,
        "Spark scans: one Spark partition per Kafka partition / per ledger (2 each), into the noop sink; each Spark "
        "job's time covers planning, tasks and commit, after an untimed write and scan of %d rows per format at the "
        "start (the JVMs' compiled code ready: BENCHMARKS.md, \"Rounds in the anchor\") and one of %d rows right "
        "before each side's timed Spark jobs of every round (Spark stops a Python worker idle for a minute; the "
        "first job after that starts new ones: BENCHMARKS.md, \"Spark's idle Python workers\")." % (args.warmup_rows, WARM_ROWS),
        "Spark rows: Kafka's source yields key, value, topic, partition, offset, timestamp, timestampType (headers "
        "only with includeHeaders); the bookkeeper scans yield scope_id, ledger_id, entry_id, payload, ledger_ctime, "
        "key (the default schema, includeCustomMetadata=false), the same shape. 'with custom_metadata' is the schema "
        "with includeCustomMetadata=true (the default before 2026-11-29), whose map column repeats the ledger's custom metadata (8 pairs, about 460 bytes, for a ledger the "
        "connector wrote) in every row (docs/connector.md, 'Schema').",
    ]
    report.machine_after = machine_facts()
    return report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.kafka_compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000, help="records per size and side (default 1000000)")
    p.add_argument("--sizes", default="100,1024", help="record sizes in bytes, comma-separated (default 100,1024)")
    p.add_argument("--bookie-kinds", default="java,python", help="bookies to compare, reported separately")
    p.add_argument("--cores", type=int, default=2, help="Spark local[N] (default 2)")
    p.add_argument("--warmup-rows", type=int, default=200_000,
                   help="rows of the untimed Spark write and scan per format before anything is timed "
                        "(default 200000)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of every side's Spark jobs, sides taking turns to go first; each figure is the "
                        "median round (default 3)")
    p.add_argument("--kafka-flush-messages", type=int, default=0,
                   help="Kafka's log.flush.interval.messages (0: Kafka's default, no fsync of its own)")
    add_common_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
