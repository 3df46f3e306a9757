"""A real Apache Kafka broker (KRaft, one node) and Kafka's own perf tools, for bench/kafka_compare.py.

The jars come from Maven Central through ``make kafka-jars`` (tools/kafka/broker-pom.xml) into
``.cache/kafka/<version>/lib``; Spark's Kafka connector (tools/kafka/spark-pom.xml) into
``.cache/spark-kafka/<version>/lib``.  Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

from bench.common import JAVA_BENCH_JVM, BenchError, Unavailable
from tests.harness.java import java_executable
from tests.harness.java_bookkeeper import cache_dir, write_log4j2
from tests.harness.ports import free_port
from tests.harness.process import ManagedProcess

__all__ = ["KAFKA_VERSION", "SPARK_KAFKA_VERSION", "KafkaBroker", "spark_kafka_jars"]

#: The versions `make kafka-jars` resolves (the Makefile's KAFKA_VERSION / SPARK_KAFKA_VERSION).
KAFKA_VERSION = "4.1.1"
SPARK_KAFKA_VERSION = "4.2.0"


def _lib(kind: str, version: str) -> Path:
    lib = cache_dir() / kind / version / "lib"
    if not (lib / ".ok").is_file():
        raise Unavailable(f"no {kind} {version} jars in {lib}: run `make kafka-jars`")
    return lib


def spark_kafka_jars(version: str = SPARK_KAFKA_VERSION) -> list[str]:
    """The jars of Spark's Kafka connector that PySpark does not ship, for ``spark.jars`` (no Ivy)."""
    return sorted(str(p) for p in _lib("spark-kafka", version).glob("*.jar"))


def _cluster_id() -> str:
    """A random KRaft cluster id: 16 bytes, URL-safe base64 without padding, never starting with "-" (as Kafka's
    own ``Uuid.randomUuid`` ensures: ``kafka-storage format -t -x...`` reads such an id as an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaBroker:
    """One KRaft node (broker and controller in one JVM) on loopback, with its data under ``base``.

    ``flush_messages``: Kafka's ``log.flush.interval.messages`` (None: Kafka's default, no fsync of its own,
    the page cache and replication give durability; 1: fsync after every append, like a bookie's journal).
    """

    def __init__(self, base: Path, version: str = KAFKA_VERSION, flush_messages: int | None = None) -> None:
        self.base = base
        self.version = version
        self.lib = _lib("kafka", version)
        self.port = free_port()
        self.controller_port = free_port()
        self.flush_messages = flush_messages
        self.proc: ManagedProcess | None = None
        self._runs = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self, main: str, *args: str, log_name: str) -> list[str]:
        log4j = write_log4j2(self.base / f"log4j2-{log_name}.properties", self.base / f"{log_name}.log")
        return [
            java_executable(), *JAVA_BENCH_JVM, f"-Dlog4j2.configurationFile={log4j}", "-Dlog4j2.disable.jmx=true",
            "-cp", os.pathsep.join(sorted(str(p) for p in self.lib.glob("*.jar"))), main, *args,
        ]

    def start(self) -> "KafkaBroker":
        self.base.mkdir(parents=True, exist_ok=True)
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.base / "data"),
            "num.partitions": "2",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
        }
        if self.flush_messages is not None:
            props["log.flush.interval.messages"] = str(self.flush_messages)
        conf = self.base / "server.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        cluster_id = _cluster_id()
        fmt = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(conf), log_name="format"),
            capture_output=True, text=True, timeout=300,
        )
        if fmt.returncode != 0:
            raise BenchError(f"kafka-storage format failed:\n{fmt.stdout[-2000:]}\n{fmt.stderr[-2000:]}")
        self.proc = ManagedProcess(
            "kafka", self._java("kafka.Kafka", str(conf), log_name="broker"), cwd=self.base, log_dir=self.base
        ).start()
        self.proc.wait_for_port(self.port, timeout=180)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate(timeout=30)
            self.proc = None

    def __enter__(self) -> "KafkaBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def tool(self, main: str, *args: str, timeout: float = 1800.0) -> str:
        """Run one of Kafka's command-line tools (a class of the kafka-tools jar); its stdout."""
        self._runs += 1
        name = f"tool-{self._runs:02d}-{main.rsplit('.', 1)[-1]}"
        try:
            proc = subprocess.run(self._java(main, *args, log_name=name), capture_output=True, text=True,
                                  timeout=timeout, cwd=self.base)
        except subprocess.TimeoutExpired as exc:
            raise BenchError(f"{main} timed out after {timeout}s") from exc
        if proc.returncode != 0:
            raise BenchError(f"{main} {' '.join(args)}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        return proc.stdout

    def create_topic(self, topic: str, partitions: int) -> None:
        self.tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", self.bootstrap, "--create",
                  "--topic", topic, "--partitions", str(partitions), "--replication-factor", "1", timeout=300)

    def produce_perf(self, topic: str, records: int, size: int, **producer_props: Any) -> dict[str, float]:
        """kafka-producer-perf-test (ProducerPerformance): records/s and MB/s of ``records`` records of ``size`` B."""
        props = {"bootstrap.servers": self.bootstrap, "acks": "all", **producer_props}
        out = self.tool(
            "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
            "--record-size", str(size), "--throughput", "-1",
            "--producer-props", *(f"{k}={v}" for k, v in props.items()),
        )
        # "1000000 records sent, 250000.0 records/sec (23.84 MB/sec), 5.1 ms avg latency, ..."
        found = re.findall(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency", out)
        if not found:
            raise BenchError(f"ProducerPerformance printed no summary:\n{out[-2000:]}")
        sent, rate, mib, lat = found[-1]
        return {"records": int(sent), "records_per_sec": float(rate), "mib_per_sec": float(mib),
                "avg_latency_ms": float(lat)}

    def consume_perf(self, topic: str, records: int, group: str) -> dict[str, float]:
        """kafka-consumer-perf-test (ConsumerPerformance): reads ``records`` records from the start of ``topic``."""
        out = self.tool(
            "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", self.bootstrap, "--topic", topic,
            "--messages", str(records), "--group", group, "--timeout", "120000", "--hide-header",
        )
        # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
        # rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
        lines = [ln for ln in out.splitlines() if ln.count(",") >= 9]
        if not lines:
            raise BenchError(f"ConsumerPerformance printed no result:\n{out[-2000:]}")
        cells = [c.strip() for c in lines[-1].split(",")]
        return {
            "records": int(cells[4]),
            "records_per_sec": float(cells[5]),
            "rebalance_ms": float(cells[6]),
            "fetch_ms": float(cells[7]),
            "fetch_records_per_sec": float(cells[9]),
        }
