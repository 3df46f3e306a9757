"""kill -9 of a Python bookie under write load: nothing acknowledged is lost, fences survive."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest

from bkspark.protocol import v2, v3
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
from bkspark.protocol.digest import Digester, master_key
from tests.harness.python_bookie import PythonBookieCluster, RawBookieConnection

pytestmark = [pytest.mark.integration, pytest.mark.fault]

KEY = master_key(b"crash")
DIGEST = Digester("CRC32C", b"crash")


def entry(ledger: int, eid: int) -> bytes:
    rng = random.Random(ledger * 1_000_003 + eid)
    payload = rng.randbytes(rng.randint(1, 3000))
    return DIGEST.package_entry(ledger, eid, eid - 1, 0, payload)


def test_kill9_mid_write_then_restart_keeps_acknowledged_entries(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides={"flushInterval": 700})
    with cluster:
        port = cluster.bookies[0].port
        # A fenced ledger, fenced (durably) before the crash.
        with RawBookieConnection(port) as c:
            for i in range(3):
                assert c.call_v2(v2.encode_add_request(0, KEY, entry(900, i))).rc == v2.EOK
            assert c.call_v2(v2.encode_read_request(900, -1, v2.FLAG_DO_FENCING, KEY)).rc == v2.EOK

        acked: dict[tuple[int, int], bytes] = {}
        stop = threading.Event()
        errors: list[BaseException] = []

        def writer(ledger: int) -> None:
            conn = RawBookieConnection(port)
            sent: dict[tuple[int, int], bytes] = {}
            try:
                eid = 0
                while not stop.is_set():
                    batch = []
                    for _ in range(50):  # pipelined: 50 adds in flight
                        data = entry(ledger, eid)
                        sent[(ledger, eid)] = data
                        batch.append(v2.encode_add_request(0, KEY, data))
                        eid += 1
                    conn.send(b"".join(batch))
                    for _ in batch:
                        resp = v2.decode_response(conn.recv())
                        if resp.rc == v2.EOK:
                            acked[(resp.ledger_id, resp.entry_id)] = sent[(resp.ledger_id, resp.entry_id)]
            except (ConnectionError, OSError):
                pass  # the bookie died under us: expected
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                conn.close()

        threads = [threading.Thread(target=writer, args=(lg,), daemon=True) for lg in (1, 2, 3)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while len(acked) < 3000 and time.monotonic() < deadline and not errors:
            time.sleep(0.05)
        time.sleep(random.uniform(0.0, 0.3))
        cluster.kill(0)  # SIGKILL, mid-write
        stop.set()
        for t in threads:
            t.join(30)
        assert not errors, errors
        assert len(acked) >= 3000
        snapshot = dict(acked)

        cluster.start(0, timeout=90)
        with RawBookieConnection(port) as c:
            for (ledger, eid), data in sorted(snapshot.items()):
                resp = c.call_v2(v2.encode_read_request(ledger, eid))
                assert resp.rc == v2.EOK, (ledger, eid, resp.rc)
                assert bytes(resp.entry) == data, (ledger, eid)
            # The fence survived the crash: normal adds are refused, recovery adds are not.
            assert c.call_v2(v2.encode_add_request(0, KEY, entry(900, 3))).rc == v2.EFENCED
            recovery = v2.FLAG_RECOVERY_ADD | v2.FLAG_HIGH_PRIORITY
            assert c.call_v2(v2.encode_add_request(recovery, KEY, entry(900, 3))).rc == v2.EOK
            # The master key survived too.
            assert c.call_v2(v2.encode_add_request(0, master_key(b"other"), entry(1, 10**6))).rc == v2.EUA

        # A clean stop after that, then a restart: the checkpointed state is complete on its own.
        assert cluster.stop(0) == 0
        journal_files = os.listdir(cluster.bookies[0].dir / "journal" / "current")
        assert len([f for f in journal_files if f.endswith(".txn")]) == 1
        cluster.start(0)
        with RawBookieConnection(port) as c:
            sample = random.Random(7).sample(sorted(snapshot), 200)
            for ledger, eid in sample:
                assert bytes(c.call_v2(v2.encode_read_request(ledger, eid)).entry) == snapshot[(ledger, eid)]
            assert c.call_v2(v2.encode_add_request(0, KEY, entry(900, 4))).rc == v2.EFENCED


def test_an_acknowledged_explicit_lac_survives_kill9_and_a_checkpoint(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """WRITE_LAC is answered once its record is synced: after a SIGKILL (journal only) and after a clean stop (the
    ledger's state in the index, the journal trimmed) READ_LAC returns the last acknowledged blob."""
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides={"flushInterval": 600000})
    with cluster:
        port = cluster.bookies[0].port
        # A connection speaks v2 or v3, as its first frame says.
        with RawBookieConnection(port) as v2_conn, RawBookieConnection(port) as v3_conn:
            adds = [v2_conn.call_v2(v2.encode_add_request(0, KEY, entry(7, eid))).rc for eid in range(10)]
            assert adds == [v2.EOK] * 10
            for txn_id, lac in enumerate((5, 8)):
                request = v3.write_lac_request(txn_id, 7, lac, KEY, DIGEST.package_lac(7, lac))
                assert v3.response_status(v3_conn.call_v3(request)) == pb.EOK
        expected = (DIGEST.package_lac(7, 8), entry(7, 9))
        cluster.crash(0)
        cluster.start(0, timeout=90)
        for restart in ("after kill -9", "after a clean stop"):
            with RawBookieConnection(port) as c:
                answer = c.call_v3(v3.read_lac_request(10, 7)).readLacResponse
                assert (answer.status, answer.lacBody, answer.lastEntryBody) == (pb.EOK, *expected), restart
            if restart == "after kill -9":
                assert cluster.stop(0) == 0
                cluster.start(0)
