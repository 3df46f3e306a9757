"""A real Apache Pulsar broker for the Pulsar tests (docs/pulsar.md): ``PulsarStandaloneStarter`` (one broker, one
bookie inside it) on a ZooKeeper the harness starts, so that a test sees Pulsar's metadata as Pulsar writes it.

The jars come from ``make pulsar-jars`` (``.cache/pulsar/<version>/lib``).  The broker writes its ledgers with
quorums 1/1/1, rolls them after ``max_entries_per_ledger`` entries at once (``managedLedgerMinLedgerRollover
TimeMinutes=0``), sends an explicit LAC every ``explicit_lac_ms`` (so the open ledger's LAC is current), and keeps
closed ledgers (a retention policy: without one, a ledger no cursor needs is deleted at each roll).  It starts in
10-20 s and takes about 460 MB: start one per test module.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any, Mapping

from bkspark.devcluster.java import java_executable
from tests.harness.java_bookkeeper import write_log4j2
from tests.harness.ports import free_port, port_is_open
from tests.harness.process import HarnessError, ManagedProcess
from tests.harness.zookeeper import ZooKeeperServer

__all__ = ["PULSAR_VERSION", "pulsar_lib", "PulsarStandalone", "BROKER_ENTRY_METADATA_INTERCEPTORS",
           "closed_ledger_entries"]

PULSAR_VERSION = os.environ.get("BKSPARK_PULSAR_VERSION", "4.0.7")

#: Both of Pulsar's broker entry metadata interceptors (a broker timestamp and an index before every entry).
BROKER_ENTRY_METADATA_INTERCEPTORS = (
    "org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,"
    "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"
)


def pulsar_lib(version: str = PULSAR_VERSION) -> Path:
    cache = Path(os.environ.get("BKSPARK_CACHE", Path(__file__).resolve().parents[2] / ".cache"))
    lib = cache / "pulsar" / version / "lib"
    if not (lib / ".ok").exists():
        raise HarnessError(f"Apache Pulsar {version}'s jars are not in {lib}: run `make pulsar-jars`")
    return lib


class PulsarStandalone:
    """ZooKeeper plus a Pulsar standalone broker and bookie; ``.service_url``, ``.web_url``, ``.zookeeper``,
    ``.metadata_service_uri`` (Pulsar's ledgers root as a bkspark URI)."""

    def __init__(self, base_dir: Path, *, max_entries_per_ledger: int = 50, explicit_lac_ms: int = 100,
                 conf: Mapping[str, Any] | None = None) -> None:
        self.base_dir = Path(base_dir)
        self.max_entries_per_ledger = max_entries_per_ledger
        self.explicit_lac_ms = explicit_lac_ms
        self.extra_conf = dict(conf or {})
        self.zookeeper = ZooKeeperServer(self.base_dir / "zookeeper")
        self.broker_port = free_port()
        self.web_port = free_port()
        self.bookie_port = free_port()
        self.process: ManagedProcess | None = None

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.broker_port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def metadata_service_uri(self) -> str:
        return f"zk+hierarchical://{self.zookeeper.connect_string}/ledgers"

    def _write_conf(self) -> Path:
        values: dict[str, Any] = {
            "clusterName": "standalone",
            "bindAddress": "127.0.0.1",
            "advertisedAddress": "127.0.0.1",
            "brokerServicePort": self.broker_port,
            "webServicePort": self.web_port,
            "bookiePort": self.bookie_port,
            "managedLedgerDefaultEnsembleSize": 1,
            "managedLedgerDefaultWriteQuorum": 1,
            "managedLedgerDefaultAckQuorum": 1,
            "managedLedgerMaxEntriesPerLedger": self.max_entries_per_ledger,
            "managedLedgerMinLedgerRolloverTimeMinutes": 0,
            "bookkeeperExplicitLacIntervalInMills": self.explicit_lac_ms,
            "defaultRetentionTimeInMinutes": -1,
            "defaultRetentionSizeInMB": -1,
            "brokerDeleteInactiveTopicsEnabled": "false",
            "functionsWorkerEnabled": "false",
            "webSocketServiceEnabled": "false",
            "systemTopicEnabled": "false",
            "topicLevelPoliciesEnabled": "false",
            "transactionCoordinatorEnabled": "false",
            "httpServerEnabled": "false",
            "enableStatistics": "false",
            "journalSyncData": "false",
            "dbStorage_writeCacheMaxSizeMb": 16,
            "dbStorage_readAheadCacheMaxSizeMb": 16,
            "dbStorage_rocksDB_blockCacheSize": 8 * 1024 * 1024,
            "loadBalancerEnabled": "false",
            "numIOThreads": 2,
            "numHttpServerThreads": 4,
            "managedLedgerCacheSizeMB": 16,
        }
        values.update(self.extra_conf)
        path = self.base_dir / "standalone.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        return path

    def start(self, timeout: float = 180.0) -> "PulsarStandalone":
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if not self.zookeeper.is_alive:
            self.zookeeper.start()
        conf = self._write_conf()
        log4j = write_log4j2(self.base_dir / "log4j2.properties", self.base_dir / "pulsar.log")
        argv = [
            java_executable(), "-Xms64m", "-Xmx384m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j.configurationFile={log4j}", f"-Dlog4j2.configurationFile={log4j}",
            "-Dpulsar.allocator.exit_on_oom=true", "-Dio.netty.leakDetection.level=disabled",
            "--add-opens=java.base/java.io=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
            "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
            "--add-opens=java.base/java.util.zip=ALL-UNNAMED", "--add-opens=java.management/sun.management=ALL-UNNAMED",
            "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
            "-cp", str(pulsar_lib() / "*"),
            "org.apache.pulsar.PulsarStandaloneStarter",
            "--config", str(conf),
            "--metadata-url", f"zk:{self.zookeeper.connect_string}",
            "--bookkeeper-dir", str(self.base_dir / "bookkeeper"),
            "--bookkeeper-port", str(self.bookie_port),
            "--num-bookies", "1",
            "--no-functions-worker",
            "--no-stream-storage",
        ]
        if self.process is None:
            self.process = ManagedProcess("pulsar", argv, cwd=self.base_dir, log_dir=self.base_dir,
                                          extra_logs=[self.base_dir / "pulsar.log"])
        else:
            self.process.argv = argv
        self.process.start()
        self.process.wait_until(self.is_ready, timeout=timeout, what="the Pulsar broker to serve public/default")
        return self

    def is_ready(self) -> bool:
        if not (port_is_open(self.broker_port) and port_is_open(self.web_port)):
            return False
        try:
            return "public/default" in self.admin("GET", "/admin/v2/namespaces/public")
        except OSError:
            return False

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        """One call to the broker's admin REST API; the decoded JSON answer (None when empty)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.web_url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate(timeout=30)
        self.zookeeper.stop()


def reader_messages(service_url: str, topic: str, timeout_ms: int = 10_000) -> list[dict[str, Any]]:
    """Every message of ``topic`` through the broker, as Pulsar's own Reader gives them (the tests' oracle): value
    (None for a null value), key (bytes, None without one), properties, publish and event time (ms; 0 without an
    event time), topic, ledger, entry, batch index, partition and the serialized message id."""
    import pulsar

    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=_quiet_logger())
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        try:
            while reader.has_message_available():
                msg = reader.read_next(timeout_ms)
                mid = msg.message_id()
                key = msg.partition_key()
                out.append({
                    "value": None if msg.has_null_value() else msg.data(),
                    "key": key.encode() if key else None,
                    "properties": dict(msg.properties()),
                    "publish_time": msg.publish_timestamp(),
                    "event_time": msg.event_timestamp(),
                    "topic": msg.topic_name(),
                    "ledger": mid.ledger_id(),
                    "entry": mid.entry_id(),
                    "batch_index": mid.batch_index(),
                    "partition": mid.partition(),
                    "message_id": mid.serialize(),
                })
        finally:
            reader.close()
        return out
    finally:
        client.close()


def _quiet_logger() -> Any:
    import logging

    logger = logging.getLogger("pulsar-client")
    logger.setLevel(logging.WARNING)
    return logger


def raw_ledger_entries(metadata_service_uri: str, topic: str) -> list[dict[str, Any]]:
    """The raw entries of a topic's ledgers read from the bookies with a read-only bkspark client (no recovery):
    ``{"ledger", "entry", "data"}`` in order, and the managed-ledger znode's bytes as the first item's
    ``managed_ledger`` (for golden vectors)."""
    from bkspark.client import BookKeeper
    from bkspark.pulsar.topics import TopicResolver, managed_ledger_path, parse_topic_name, pulsar_root_of

    bk = BookKeeper(metadata_service_uri=metadata_service_uri, conf={"metadataReadOnly": True})
    try:
        root = pulsar_root_of(bk.store.root)
        resolver = TopicResolver(bk.store.zk, root)
        name = parse_topic_name(topic)
        out: list[dict[str, Any]] = []
        for part in resolver.partitions(name):
            ml_bytes, _ = bk.store.zk.get(managed_ledger_path(root, part.topic))
            for ledger in resolver.ledgers(part) or []:
                handle = bk.open_ledger(ledger.ledger_id, recovery=False, digest_type="CRC32C")
                try:
                    last = handle.last_add_confirmed if handle.is_closed else handle.read_last_add_confirmed()
                    entries = handle.read(0, last) if last >= 0 else []
                finally:
                    handle.close()
                for e in entries:
                    out.append({"topic": str(part.topic), "ledger": ledger.ledger_id, "entry": e.entry_id,
                                "data": bytes(e.payload), "managed_ledger": ml_bytes})
        return out
    finally:
        bk.close()


def wait_until_readable_from_bookies(metadata_service_uri: str, messages: list[dict[str, Any]],
                                     timeout: float = 60.0) -> None:
    """Wait for the event a scan of the bookies needs (docs/pulsar.md, "The newest messages and the LAC"): every ledger the oracle's
    messages came from has a last add confirmed (the broker's explicit LAC, or the entry's own close) at or past
    their last entry. Read-only: a non-recovery open, nothing written to Pulsar's ZooKeeper."""
    import time

    from bkspark.client import BookKeeper

    need: dict[int, int] = {}
    for message in messages:
        need[message["ledger"]] = max(need.get(message["ledger"], -1), message["entry"])
    if not need:
        return
    bk = BookKeeper(metadata_service_uri=metadata_service_uri, conf={"metadataReadOnly": True})
    try:
        deadline = time.monotonic() + timeout
        seen: dict[int, int] = {}
        while True:
            for ledger_id, last in need.items():
                if seen.get(ledger_id, -1) >= last:
                    continue
                handle = bk.open_ledger(ledger_id, recovery=False, digest_type="CRC32C")
                try:
                    seen[ledger_id] = handle.last_add_confirmed if handle.is_closed else handle.read_last_add_confirmed()
                finally:
                    handle.close()
            if all(seen.get(lid, -1) >= last for lid, last in need.items()):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the bookies' LAC never reached the last messages: need {need}, saw {seen}")
            time.sleep(0.2)
    finally:
        bk.close()


def closed_ledger_entries(broker: PulsarStandalone, topic: str) -> list[int]:
    """The entries of every closed ledger of a (non-partitioned) topic, from its managed-ledger znode: a ledger a
    reader fenced would be closed early, so with one-at-a-time sends each holds ``max_entries_per_ledger``."""
    from bkspark.pulsar.topics import TopicResolver, parse_topic_name, pulsar_root_of

    zk = broker.zookeeper.client()
    try:
        resolver = TopicResolver(zk, pulsar_root_of("/ledgers"))
        ledgers = resolver.ledgers(resolver.partitions(parse_topic_name(topic))[0]) or []
    finally:
        zk.stop()
        zk.close()
    return [ledger.entries for ledger in ledgers if ledger.entries is not None]
