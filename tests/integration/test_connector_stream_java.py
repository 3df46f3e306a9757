"""``spark.readStream.format("bookkeeper")`` on Apache BookKeeper 4.17 and 4.18 bookies, following a ledger that
Apache BookKeeper's own Java client keeps appending to while the query runs.

The writer is tools/java JavaClient ``write-forever`` (an entry every few milliseconds, each printed once
acknowledged).  The query starts while the ledger is open and young; entries keep arriving; the writer is then
SIGKILLed (the ledger stays open) and the Java client's recovery closes it.  The stream must deliver every entry
of the closed ledger exactly once and in entry order, including those written after the query started, and see
the close.  The long-poll LAC reads themselves against these versions are in test_client_tail.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness.java import java_executable
from tests.harness.java_bookkeeper import bookkeeper_classpath
from tests.harness.process import kill_group
from tests.integration.test_connector_spark import spark  # noqa: F401 - the Spark fixture
from tests.integration.test_connector_streaming import Collector, stream, wait_until
from tests.integration.test_java_client_program import MAIN, java_payload, one, run_client

pytestmark = [pytest.mark.integration, pytest.mark.compat]

#: Bytes of each entry JavaClient writes.
ENTRY_SIZE = 40


class JavaWriter:
    """JavaClient write-forever in its own session; ``acked`` holds the entry ids it printed as acknowledged."""

    def __init__(self, version: str, uri: str, workdir: Path) -> None:
        self.ledger_file = workdir / "ledger-id"
        argv = [
            java_executable(), "-Xmx128m", "-cp", os.pathsep.join(bookkeeper_classpath(version)),
            f"-Dbkspark.metadataServiceUri={uri}", MAIN, "write-forever", "--ledger-file", str(self.ledger_file),
            "--ensemble", "3", "--write", "2", "--ack", "2", "--digest", "CRC32C", "--password", "",
            "--size", str(ENTRY_SIZE), "--interval-ms", "20",
        ]
        self._stderr = (workdir / "writer.stderr").open("w")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True, start_new_session=True)
        self.acked: list[int] = []
        self._reader = threading.Thread(target=self._read_events, daemon=True)
        self._reader.start()

    def _read_events(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith('{"event":"added"'):
                self.acked.append(json.loads(line)["entry_id"])

    def ledger_id(self) -> int:
        wait_until(self.ledger_file.exists, 120, "the Java writer's ledger")
        return int(self.ledger_file.read_text())

    def kill(self) -> None:
        kill_group(self.proc)
        self._reader.join(10)
        self._stderr.close()


@pytest.mark.parametrize("version", ["4.17.3", "4.18.2"])
def test_stream_follows_a_java_clients_open_ledger_on_java_bookies(
    version: str, java_cluster_factory: Any, java_tools: Any, spark: Any, tmp_path: Path  # noqa: F811
) -> None:
    uri = java_cluster_factory(version, bookies=3).metadata_service_uri
    writer = JavaWriter(version, uri, tmp_path)
    query = None
    try:
        ledger_id = writer.ledger_id()
        wait_until(lambda: len(writer.acked) >= 5, 120, "the Java writer's first entries")
        collector = Collector()
        query = (
            stream(spark, uri, ledgers=str(ledger_id), longPollTimeoutMs="1000")
            .writeStream.foreachBatch(collector).option("checkpointLocation", str(tmp_path / "cp")).start()
        )
        acked_at_start = len(writer.acked)
        # Entries written after the query started reach it while the ledger is still open.
        wait_until(lambda: any(e >= acked_at_start + 20 for _, e, _ in collector.rows()), 240,
                   "entries written after the query started", query=query)
        assert writer.proc.poll() is None  # still writing: the ledger is open
    finally:
        writer.kill()
    try:
        acked = list(writer.acked)
        recovered = one(run_client(java_tools, version, uri, "recover", "--ledger", str(ledger_id), "--digest", "CRC32C",
                                   "--password", ""), "recovered")
        last = recovered["last_entry_id"]
        assert recovered["closed"] and last >= acked[-1]  # recovery keeps every acknowledged entry
        # The stream sees the close (by its metadata) and reads to the recovered last entry.
        wait_until(lambda: len(collector.rows()) >= last + 1, 120, "the closed ledger's last entries", query=query)
        time.sleep(1.5)  # one more long-poll period: nothing beyond the last entry, nothing twice
    finally:
        assert query is not None
        query.stop()
    rows = collector.rows()
    assert [(lid, e) for lid, e, _ in rows] == [(ledger_id, e) for e in range(last + 1)]
    assert all(payload == java_payload(e, ENTRY_SIZE) for _, e, payload in rows)
    assert len(collector.sizes()) >= 2  # several micro-batches: it followed the ledger, not one read at the end
