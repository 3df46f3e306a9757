"""Strict journal replay through real bookie starts (docs/bookie.md, "Journal replay").

Each test writes acknowledged entries to a real Python bookie with two journal directories, SIGKILLs it (so the
records are only in the journal), damages the journal the way the case says, and starts the bookie again.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bkspark.protocol import v2
from bkspark.protocol.digest import Digester, master_key
from bookie_server.journal import all_journal_files, encode_record, RecordType
from tests.harness.python_bookie import PythonBookieCluster, RawBookieConnection

pytestmark = [pytest.mark.integration]

KEY = master_key(b"replay")
DIGEST = Digester("CRC32C", b"replay")
# No checkpoint while the test writes: the entries must come back from the journal alone.
CONF = {"flushInterval": 600000}


def entry(ledger: int, eid: int) -> bytes:
    rng = random.Random(ledger * 7919 + eid)
    return DIGEST.package_entry(ledger, eid, eid - 1, 0, rng.randbytes(rng.randint(10, 500)))


def two_journal_cluster(zk_root, tmp_path: Path) -> PythonBookieCluster:  # type: ignore[no-untyped-def]
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, conf_overrides=CONF)
    bookie = cluster.bookies[0]
    bookie.values["journalDirectories"] = f"{bookie.dir / 'journal1'},{bookie.dir / 'journal2'}"
    bookie.write_conf()
    return cluster


def journal_dirs(cluster: PythonBookieCluster) -> list[Path]:
    return [cluster.bookies[0].dir / name / "current" for name in ("journal1", "journal2")]


def add_entries(port: int, ledger: int, count: int) -> dict[tuple[int, int], bytes]:
    acked = {}
    with RawBookieConnection(port) as c:
        for eid in range(count):
            data = entry(ledger, eid)
            assert c.call_v2(v2.encode_add_request(0, KEY, data)).rc == v2.EOK
            acked[(ledger, eid)] = data
    return acked


def assert_readable(port: int, acked: dict[tuple[int, int], bytes]) -> None:
    with RawBookieConnection(port) as c:
        for (ledger, eid), data in sorted(acked.items()):
            resp = c.call_v2(v2.encode_read_request(ledger, eid))
            assert resp.rc == v2.EOK and bytes(resp.entry) == data, (ledger, eid, resp.rc)


def failed_start(cluster: PythonBookieCluster, timeout: float = 60.0) -> str:
    """Start the bookie, expect it to exit with an error; its stderr."""
    bookie = cluster.bookies[0]
    bookie.launch()
    assert bookie.process is not None
    status = bookie.process.wait_exit(timeout)
    assert status != 0
    return Path(bookie.process.stderr_path).read_text(encoding="utf-8", errors="replace")


def newest_journal(cluster: PythonBookieCluster) -> Path:
    return all_journal_files(journal_dirs(cluster))[-1][1]


def write_then_crash(cluster: PythonBookieCluster, ledger: int, count: int) -> tuple[dict[tuple[int, int], bytes], Path]:
    """Acknowledged adds, then SIGKILL; the adds and the newest journal file (which holds them)."""
    acked = add_entries(cluster.bookies[0].port, ledger, count)
    cluster.crash(0)
    return acked, newest_journal(cluster)


def test_second_journal_directory_is_written_and_replayed(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with two_journal_cluster(zk_root, tmp_path) as cluster:
        port = cluster.bookies[0].port
        acked, first = write_then_crash(cluster, 1, 20)
        cluster.start(0)
        assert_readable(port, acked)
        more, second = write_then_crash(cluster, 2, 20)
        acked.update(more)
        assert {first.parent, second.parent} == set(journal_dirs(cluster))  # both directories hold records
        cluster.start(0)
        assert_readable(port, acked)


def test_torn_tail_is_truncated_and_bookie_starts(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with two_journal_cluster(zk_root, tmp_path) as cluster:
        port = cluster.bookies[0].port
        acked, path = write_then_crash(cluster, 1, 30)
        intact = path.stat().st_size
        with open(path, "ab") as fh:
            fh.write(encode_record(RecordType.FENCE, 0, 77)[:-4])
        cluster.start(0)
        assert_readable(port, acked)
        # (The file itself is gone: the start-up checkpoint covers it and trims it.)
        log = cluster.log_tail(0, 400)
        assert f"journal file {path}: record runs past the end of the file at offset {intact}" in log
        assert "torn tail" in log
        with RawBookieConnection(port) as c:  # the torn fence was never acknowledged and is not applied
            assert c.call_v2(v2.encode_read_request(77, 0)).rc == v2.ENOLEDGER


def test_bad_crc_in_the_middle_stops_the_bookie_until_the_operator_accepts_the_loss(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with two_journal_cluster(zk_root, tmp_path) as cluster:
        port = cluster.bookies[0].port
        _, path = write_then_crash(cluster, 1, 30)
        data = bytearray(path.read_bytes())
        middle = len(data) // 2
        data[middle] ^= 0xFF
        path.write_bytes(bytes(data))
        stderr = failed_start(cluster)
        assert str(path) in stderr and "skipReplayJournalInvalidRecord=true" in stderr
        assert "checksum mismatch at offset" in stderr or "bad record length" in stderr
        assert path.stat().st_size == len(data)  # nothing was cut behind the operator's back
        # The operator accepts the loss: the bookie starts with what precedes the damage.
        cluster.bookies[0].values["skipReplayJournalInvalidRecord"] = "true"
        cluster.bookies[0].write_conf()
        cluster.start(0)
        with RawBookieConnection(port) as c:
            assert c.call_v2(v2.encode_read_request(1, 0)).rc == v2.EOK
            assert c.call_v2(v2.encode_read_request(1, 29)).rc == v2.ENOENTRY


def test_bad_header_stops_the_bookie(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with two_journal_cluster(zk_root, tmp_path) as cluster:
        _, path = write_then_crash(cluster, 1, 5)
        data = bytearray(path.read_bytes())
        data[0:4] = b"JUNK"
        path.write_bytes(bytes(data))
        stderr = failed_start(cluster)
        assert f"journal file {path}: bad file header at offset 0" in stderr
        assert "skipReplayJournalInvalidRecord=true" in stderr
