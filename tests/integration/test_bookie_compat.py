"""Apache BookKeeper's own Java client and shell against Python bookies (and mixed with Java bookies)."""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.harness.java import JVM_OPTS, java_executable
from tests.harness.java_bookkeeper import DEFAULT_BK_VERSION, bookkeeper_classpath, write_log4j2
from tests.harness.python_bookie import PythonBookieCluster

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def test_java_shell_simpletest_on_three_python_bookies(zk_root, java_tools, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The key compatibility check: `bookkeeper shell simpletest -e 3 -w 2 -a 2 -n 10000`."""
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=3) as cluster:
        result = java_tools.shell(
            DEFAULT_BK_VERSION,
            zk_root.metadata_service_uri,
            "simpletest", "-e", "3", "-w", "2", "-a", "2", "-n", "10000",
            timeout=600,
        )
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-4000:] + "\n" + cluster.log_tail(0)
        assert "10000 entries written to ledger" in output
        assert "Last entry Id 9999" in output
        # Every Python bookie served adds (e=3 means all three are in the ensemble).
        for i in range(3):
            metrics = cluster.http_get(i, "/metrics")
            adds = re.search(r'bookkeeper_server_ADD_ENTRY_REQUEST_count\{success="true"\} (\S+)', metrics)
            assert adds is not None and float(adds.group(1)) > 1000


@pytest.mark.parametrize("version", ["4.16.6", "4.18.2"])
def test_java_shell_simpletest_other_versions(zk_root, java_tools, tmp_path: Path, version: str) -> None:  # type: ignore[no-untyped-def]
    """Older (protobuf-java, no batch reads) and newer (LightProto) Java clients use Python bookies too."""
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=3, journal_sync_data=False) as cluster:
        result = java_tools.shell(
            version, zk_root.metadata_service_uri, "simpletest", "-e", "3", "-w", "3", "-a", "2", "-n", "500",
            timeout=600,
        )
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-4000:] + "\n" + cluster.log_tail(0)
        assert "500 entries written to ledger" in output


def test_mixed_ensemble_java_and_python_bookies(zk_root, java_tools, java_cluster_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Ensemble of 4 over 2 Java + 2 Python bookies: every ledger uses both kinds."""
    java = java_cluster_factory(bookies=2, journal_sync_data=False)
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=2, journal_sync_data=False) as py:
        assert sorted(py.registered()) == sorted(java.bookie_ids + py.bookie_ids)
        result = java_tools.shell(
            DEFAULT_BK_VERSION,
            zk_root.metadata_service_uri,
            "simpletest", "-e", "4", "-w", "3", "-a", "2", "-n", "2000",
            timeout=600,
        )
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-4000:]
        assert "2000 entries written to ledger" in output
        for i in range(2):
            metrics = py.http_get(i, "/metrics")
            reads = re.search(r'bookkeeper_server_READ_ENTRY_REQUEST_count\{success="true"\} (\S+)', metrics)
            assert reads is not None and float(reads.group(1)) > 0


JAVA_PROGRAM = textwrap.dedent(
    """
    import java.nio.charset.StandardCharsets;
    import java.util.Iterator;
    import org.apache.bookkeeper.client.api.*;
    import org.apache.bookkeeper.conf.ClientConfiguration;

    public class BookieCompat {
        static byte[] payload(String tag, long i) {
            return (tag + "-" + i + "-" + "x".repeat((int) (i % 300))).getBytes(StandardCharsets.UTF_8);
        }
        static void check(boolean ok, String what) {
            if (!ok) { throw new IllegalStateException("CHECK FAILED: " + what); }
        }
        static void verify(LedgerEntries entries, long first, String tag) {
            long expect = first;
            for (LedgerEntry e : entries) {
                check(e.getEntryId() == expect, "entry id " + e.getEntryId() + " != " + expect);
                check(java.util.Arrays.equals(e.getEntryBytes(), payload(tag, expect)), "payload of " + expect);
                expect++;
            }
        }
        public static void main(String[] args) throws Exception {
            String uri = args[0];
            boolean v2 = args[1].equals("v2");
            int n = Integer.parseInt(args[2]);
            ClientConfiguration conf = new ClientConfiguration().setMetadataServiceUri(uri);
            conf.setUseV2WireProtocol(v2);
            conf.setProperty("batchReadEnabled", "true");
            byte[] pw = "pw".getBytes(StandardCharsets.UTF_8);
            try (BookKeeper bk = BookKeeper.newBuilder(conf).build()) {
                // write, close, re-open, read single entries and in batches
                long lid;
                try (WriteHandle wh = bk.newCreateLedgerOp().withEnsembleSize(3).withWriteQuorumSize(3)
                        .withAckQuorumSize(2).withDigestType(DigestType.CRC32C).withPassword(pw).execute().get()) {
                    lid = wh.getId();
                    for (long i = 0; i < n; i++) { wh.appendAsync(payload("a", i)); }
                    wh.append(payload("a", n));
                }
                try (ReadHandle rh = bk.newOpenLedgerOp().withLedgerId(lid).withPassword(pw)
                        .withRecovery(false).execute().get()) {
                    check(rh.isClosed(), "closed");
                    check(rh.getLastAddConfirmed() == n, "LAC after close " + rh.getLastAddConfirmed());
                    try (LedgerEntries es = rh.read(0, n)) { verify(es, 0, "a"); }
                    long next = 0;
                    int batches = 0;
                    // The 4.17 Java client batch-reads only over v2 (it refuses over v3).
                    while (v2 && next <= n) {
                        try (LedgerEntries es = rh.batchRead(next, 100, 1 << 20)) {
                            verify(es, next, "a");
                            Iterator<LedgerEntry> it = es.iterator();
                            int count = 0;
                            while (it.hasNext()) { it.next(); count++; }
                            check(count > 0, "empty batch at " + next);
                            next += count;
                            batches++;
                        }
                    }
                    System.out.println("BATCHES " + batches);
                }
                // recovery of a ledger whose writer never closed it
                WriteHandle open = bk.newCreateLedgerOp().withEnsembleSize(3).withWriteQuorumSize(2)
                        .withAckQuorumSize(2).withDigestType(DigestType.CRC32).withPassword(pw).execute().get();
                for (long i = 0; i < 50; i++) { open.append(payload("r", i)); }
                try (ReadHandle rh = bk.newOpenLedgerOp().withLedgerId(open.getId()).withPassword(pw)
                        .withRecovery(true).execute().get()) {
                    check(rh.isClosed(), "recovered ledger is closed");
                    check(rh.getLastAddConfirmed() == 49, "recovered LAC " + rh.getLastAddConfirmed());
                    try (LedgerEntries es = rh.read(0, 49)) { verify(es, 0, "r"); }
                }
                try {
                    open.append(payload("r", 50));
                    check(false, "append after recovery should fail");
                } catch (BKException e) {
                    System.out.println("FENCED " + e.getCode());
                }
                System.out.println("ALL OK " + lid);
            }
        }
    }
    """
)


@pytest.mark.parametrize(("version", "wire"), [(DEFAULT_BK_VERSION, "v2"), (DEFAULT_BK_VERSION, "v3"), ("4.18.2", "v2")])
def test_java_client_program_on_python_bookies(zk_root, tmp_path: Path, version: str, wire: str) -> None:  # type: ignore[no-untyped-def]
    """A Java program writes, closes, re-opens, reads (single and batched) and recovers ledgers."""
    source = tmp_path / "BookieCompat.java"
    source.write_text(JAVA_PROGRAM)
    log4j = write_log4j2(tmp_path / "log4j2.properties", tmp_path / "java.log")
    classpath = ":".join(bookkeeper_classpath(version, with_tools=False))
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path / "bookies", bookies=3) as cluster:
        argv = [
            java_executable(), *JVM_OPTS, f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath,
            str(source), zk_root.metadata_service_uri, wire, "400",
        ]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        output = result.stdout + result.stderr
        assert result.returncode == 0 and "ALL OK" in output, output[-5000:] + "\n" + cluster.log_tail(0)
        assert "FENCED -101" in output  # LedgerFencedException
        batch_requests = 0.0
        for i in range(3):
            found = re.search(
                r'bookkeeper_server_BATCH_READ_ENTRY_REQUEST_count\{success="true"\} (\S+)', cluster.http_get(i, "/metrics")
            )
            batch_requests += float(found.group(1)) if found else 0.0
        if wire == "v2":
            assert batch_requests > 0  # the Java client batch-reads over v2 (BP-62)
        else:
            assert batch_requests == 0  # ... and never over v3


@pytest.mark.parametrize("v2", ["true", "false"])
def test_java_client_reads_a_striped_ledger_from_cold_python_bookies(zk_root, java_tools, tmp_path: Path, v2: str) -> None:  # type: ignore[no-untyped-def]
    """A striped ledger (3/2/2) that bkspark wrote, its bookies restarted so every entry is on disk only: Apache
    BookKeeper's Java client reads it with single reads over v2 (the bookies answer its pipelined reads as runs whose
    cold reads are one job on a read thread: docs/bookie.md, "Runs of single reads") and over v3 (one read at a time,
    with the read-ahead), and gets every entry's bytes."""
    from bkspark.client import BookKeeper

    uri = zk_root.metadata_service_uri
    data = [(b"striped-%d " % i) * (1 + i % 9) for i in range(3000)]
    with PythonBookieCluster(uri, tmp_path / "bookies", bookies=3) as cluster:
        with BookKeeper(uri) as bk:
            lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=b"pw")
            lh.append_many(data).result(60)
            lh.close()
            lid = lh.ledger_id
        for i in range(3):
            cluster.stop(i)
        cluster.start_all()
        result = java_tools.run(
            DEFAULT_BK_VERSION, "bkspark.tools.JavaClient", "read", "--ledger", str(lid), "--digest", "CRC32C",
            "--password", "pw", "--v2", v2, metadata_service_uri=uri, timeout=300,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        got = {}
        for line in result.stdout.splitlines():
            if line.startswith('{"event":"entry"') or line.startswith('{"event": "entry"'):
                event = json.loads(line)
                got[event["entry_id"]] = bytes.fromhex(event["hex"])
        assert got == dict(enumerate(data))
        reads = 0.0
        for i in range(3):
            found = re.search(r'bookkeeper_server_READ_ENTRY_REQUEST_count\{success="true"\} (\S+)', cluster.http_get(i, "/metrics"))
            reads += float(found.group(1)) if found else 0.0
        assert reads >= len(data)  # single reads, each bookie serving its stripe
