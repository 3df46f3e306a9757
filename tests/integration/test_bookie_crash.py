"""kill -9 of a Python bookie under write load: nothing acknowledged is lost, fences survive."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest

from bkspark.protocol import v2
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
