"""Rack-aware placement end to end: six Python bookies in three racks, then the loss of a whole rack.

The racks come from a real topology script in a temp dir (BookKeeper's ``networkTopologyScriptFileName``
contract), keyed by whole BookieIds (``networkTopologyResolveByBookieId=true``: all bookies share 127.0.0.1).
Ledgers are written through the bkspark client (``ensemblePlacementPolicy`` = Java's rack-aware class name,
enforced) and through the Spark writer (``bookkeeper.*`` options, lower-cased by Spark on the way, best effort),
as E=3/Qw=2/Qa=2 and E=4/Qw=3/Qa=2. Every write quorum of every ensemble of every ledger must span at least two
racks of the script's mapping. Then both bookies of one rack are SIGKILLed, and every acknowledged entry must
still read back byte for byte through the client: closed ledgers at once (the dead bookies are still registered),
ledgers left open after the dead bookies' registrations expire (recovered by another client where BookKeeper's
coverage rule lets recovery fence them; where a write quorum lost Qa bookies recovery must refuse, and the live
writer's close ends the ledger).
"""

from __future__ import annotations

import os
import random
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bkspark.client import BookKeeper, LedgerHandle
from bkspark.datasource.clients import client_root, client_zk
from bkspark.datasource.datasets import DatasetRegistry
from bkspark.errors import BKError
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import ZkRoot

pytestmark = [pytest.mark.integration, pytest.mark.fault]

#: Bookie i of the cluster sits in RACK_OF_INDEX[i].
RACK_OF_INDEX = ("/rack-1", "/rack-1", "/rack-2", "/rack-2", "/rack-3", "/rack-3")
#: (ensemble, write quorum, ack quorum)
SHAPES = ((3, 2, 2), (4, 3, 2))
MIN_RACKS = 2
CLOSED_PER_SHAPE = 4
ENTRIES = 60


@dataclass
class RackedCluster:
    """The bookies, the topology script and the mapping the script itself reports."""

    cluster: PythonBookieCluster
    script: Path
    rack_of: dict[str, str]

    def placement_conf(self, policy: str) -> dict[str, str]:
        return {
            "ensemblePlacementPolicy": policy,
            "networkTopologyScriptFileName": str(self.script),
            "networkTopologyResolveByBookieId": "true",
            "minNumRacksPerWriteQuorum": str(MIN_RACKS),
        }

    def script_calls(self) -> list[tuple[int, list[str]]]:
        """``(parent pid, names)`` of every run of the script so far."""
        log = Path(f"{self.script}.calls")
        calls = []
        for line in log.read_text(encoding="utf-8").splitlines() if log.exists() else []:
            ppid, *names = line.split()
            calls.append((int(ppid), names))
        return calls


@dataclass
class WrittenLedger:
    """A ledger and the payloads of its acknowledged entries, in entry order."""

    ledger_id: int
    shape: tuple[int, int, int]
    payloads: list[bytes]
    closed: bool
    origin: str
    metadata: LedgerMetadata | None = field(default=None, repr=False)
    handle: LedgerHandle | None = field(default=None, repr=False)


def write_topology_script(path: Path, table: dict[str, str], default: str) -> Path:
    """An executable script printing one location per argument; it logs ``$PPID`` and its arguments per run."""
    cases = "".join(f"    '{name}') echo '{loc}' ;;\n" for name, loc in table.items())
    path.write_text(
        "#!/bin/sh\n"
        f'echo "$PPID $*" >> "{path}.calls"\n'
        'for name in "$@"; do\n'
        '  case "$name" in\n'
        f"{cases}"
        f"    *) echo '{default}' ;;\n"
        "  esac\n"
        "done\n",
        encoding="utf-8",
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def write_quorums(ensemble_size: int, write_quorum_size: int) -> list[list[int]]:
    """BookKeeper's RoundRobinDistributionSchedule: entry i goes to positions i, i+1, ... i+Qw-1 (mod E)."""
    return [[(i + k) % ensemble_size for k in range(write_quorum_size)] for i in range(ensemble_size)]


def placement_problems(md: LedgerMetadata, rack_of: dict[str, str]) -> list[str]:
    """Every way the ledger's ensembles break the rule: E distinct known bookies, each write quorum on 2+ racks."""
    problems = []
    for first, ensemble in sorted(md.ensembles.items()):
        if len(ensemble) != md.ensemble_size or len(set(ensemble)) != len(ensemble):
            problems.append(f"segment {first}: ensemble {list(ensemble)} is not {md.ensemble_size} distinct bookies")
        unknown = [b for b in ensemble if b not in rack_of]
        if unknown:
            problems.append(f"segment {first}: bookies {unknown} are not in the topology")
            continue
        for quorum in write_quorums(len(ensemble), md.write_quorum_size):
            racks = {rack_of[ensemble[i]] for i in quorum}
            if len(racks) < min(MIN_RACKS, md.write_quorum_size):
                placed = [f"{ensemble[i]}@{rack_of[ensemble[i]]}" for i in quorum]
                problems.append(f"segment {first}: write quorum {quorum} = {placed} spans {len(racks)} rack(s)")
    return problems


def payloads_for(tag: str, count: int, seed: int) -> list[bytes]:
    """Distinct payloads of varied sizes (one empty), so a misplaced or corrupted entry cannot pass."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        size = 0 if i == 7 else rng.choice((1, 17, 300, 4096, 20000))
        out.append(f"{tag}/{i}/".encode() + rng.randbytes(size))
    return out


def read_all(rh, last: int) -> list[bytes]:  # type: ignore[no-untyped-def]
    """Entries 0..last through ``read``, in chunks, as bytes."""
    out: list[bytes] = []
    while len(out) <= last:
        chunk = rh.read(len(out), min(last, len(out) + 24))
        assert [e.entry_id for e in chunk] == list(range(len(out), len(out) + len(chunk))), "entries out of order"
        out.extend(bytes(e.payload) for e in chunk)
    return out


# -- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def racked(module_zk_root: ZkRoot, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RackedCluster]:
    base = tmp_path_factory.mktemp("placement-e2e")
    with PythonBookieCluster(module_zk_root.metadata_service_uri, base / "bookies", bookies=6) as cluster:
        intended = dict(zip(cluster.bookie_ids, RACK_OF_INDEX))
        script = write_topology_script(base / "topology.sh", intended, "/default-rack")
        # The mapping the checks use is what the script answers, asked the way the policy asks it.
        answer = subprocess.run(
            [str(script), *cluster.bookie_ids], capture_output=True, text=True, check=True, timeout=60
        ).stdout.split()
        rack_of = dict(zip(cluster.bookie_ids, answer))
        assert rack_of == intended
        yield RackedCluster(cluster, script, rack_of)


@pytest.fixture(scope="module")
def client_ledgers(racked: RackedCluster) -> Iterator[list[WrittenLedger]]:
    """Per shape, CLOSED_PER_SHAPE closed ledgers and one left open, written through the bkspark client.

    The writing client stays alive (its open ledgers keep their writer) until the module ends.
    """
    conf = racked.placement_conf("org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy")
    conf["enforceMinNumRacksPerWriteQuorum"] = "true"
    written: list[WrittenLedger] = []
    with BookKeeper(racked.cluster.metadata_service_uri, conf) as bk:
        for shape in SHAPES:
            e, w, a = shape
            for n in range(CLOSED_PER_SHAPE + 1):
                closed = n < CLOSED_PER_SHAPE
                lh = bk.create_ledger(ensemble_size=e, write_quorum_size=w, ack_quorum_size=a, password=b"racks")
                payloads = payloads_for(f"client-{e}{w}{a}-{n}", ENTRIES, seed=lh.ledger_id)
                ids = [f.result(timeout=120) for f in [lh.append_async(p) for p in payloads]]
                assert ids == list(range(ENTRIES))
                if closed:
                    lh.close()
                written.append(
                    WrittenLedger(lh.ledger_id, shape, payloads, closed, "client", lh.metadata, None if closed else lh)
                )
        yield written


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    """A local[2] SparkSession whose Python workers run this venv's interpreter."""
    from pyspark.sql import SparkSession

    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("bkspark-placement-e2e")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def spark_ledgers(racked: RackedCluster, spark) -> list[WrittenLedger]:  # type: ignore[no-untyped-def]
    """Per shape, one dataset written by the Spark writer in 4 tasks (4 ledgers), rack-aware via ``bookkeeper.*``."""
    from pyspark.sql import functions as F

    uri = racked.cluster.metadata_service_uri
    calls_before = len(racked.script_calls())
    written: list[WrittenLedger] = []
    with BookKeeper(uri) as bk:
        registry = DatasetRegistry(client_zk(bk), client_root(bk))
        for e, w, a in SHAPES:
            dataset = f"placement-e{e}w{w}a{a}"
            rows = 120
            df = spark.range(0, rows, 1, 4).select(  # type: ignore[attr-defined]
                F.concat(F.lit(f"{dataset}/"), F.col("id").cast("string"), F.lit("/"), F.repeat(F.lit("r"), F.col("id") * 37))
                .cast("binary")
                .alias("payload")
            )
            writer = (
                df.write.format("bookkeeper")
                .option("metadataServiceUri", uri)
                .option("dataset", dataset)
                .option("ensembleSize", str(e))
                .option("writeQuorumSize", str(w))
                .option("ackQuorumSize", str(a))
            )
            for key, value in racked.placement_conf("rackaware").items():
                writer = writer.option(f"bookkeeper.{key}", value)
            writer.mode("append").save()

            manifest = registry.manifest(dataset)
            assert manifest is not None, f"the Spark job did not commit dataset {dataset}"
            assert len(manifest.ledgers) == 4, manifest
            expected_rows = sorted(f"{dataset}/{i}/{'r' * (i * 37)}".encode() for i in range(rows))
            got_rows: list[bytes] = []
            for scope_id, ledger_id in manifest.ledgers:
                assert scope_id == 0
                md = bk.get_ledger_metadata(ledger_id)
                assert md.state == LedgerState.CLOSED
                rh = bk.open_ledger(ledger_id, recovery=False)
                try:
                    payloads = read_all(rh, md.last_entry_id)
                finally:
                    rh.close()
                got_rows.extend(payloads)
                written.append(WrittenLedger(ledger_id, (e, w, a), payloads, True, f"spark:{dataset}", md))
            assert sorted(got_rows) == expected_rows, f"dataset {dataset} does not hold exactly the rows written"
    # The options reached a client the Spark job created (a Python worker, not this process), which ran the script
    # on the bookies: the policy really was configured through `bookkeeper.*`.
    spark_runs = [
        ppid for ppid, names in racked.script_calls()[calls_before:]
        if set(racked.cluster.bookie_ids) <= set(names) and ppid != os.getpid()
    ]
    assert spark_runs, "no Spark-side client ran the topology script: bookkeeper.* options did not reach the policy"
    return written


# -- tests ---------------------------------------------------------------------------------------------------------


def test_client_ledgers_have_every_write_quorum_on_two_racks(
    racked: RackedCluster, client_ledgers: list[WrittenLedger]
) -> None:
    assert len(client_ledgers) == len(SHAPES) * (CLOSED_PER_SHAPE + 1)
    with BookKeeper(racked.cluster.metadata_service_uri) as bk:
        for ledger in client_ledgers:
            md = bk.get_ledger_metadata(ledger.ledger_id)
            e, w, a = ledger.shape
            assert (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size) == (e, w, a)
            assert md.state == (LedgerState.CLOSED if ledger.closed else LedgerState.OPEN)
            assert placement_problems(md, racked.rack_of) == [], f"client ledger {ledger.ledger_id} {ledger.shape}"
    # Every rack was used: the policy spread ledgers over the whole cluster, not a fixed pair of racks.
    used = {racked.rack_of[b] for ledger in client_ledgers for ens in ledger.metadata.ensembles.values() for b in ens}
    assert used == set(RACK_OF_INDEX)


def test_spark_writer_ledgers_have_every_write_quorum_on_two_racks(
    racked: RackedCluster, spark_ledgers: list[WrittenLedger]
) -> None:
    assert sorted({ledger.shape for ledger in spark_ledgers}) == sorted(SHAPES)
    for ledger in spark_ledgers:
        md = ledger.metadata
        assert md is not None
        assert (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size) == ledger.shape
        assert placement_problems(md, racked.rack_of) == [], f"{ledger.origin} ledger {ledger.ledger_id}"


def test_losing_a_whole_rack_keeps_every_acknowledged_entry(
    racked: RackedCluster, client_ledgers: list[WrittenLedger], spark_ledgers: list[WrittenLedger]
) -> None:
    cluster = racked.cluster
    ledgers = client_ledgers + spark_ledgers
    # Kill the hardest rack for these ledgers: one that holds Qa bookies of a write quorum of a ledger left open
    # (so that recovery cannot fence it), else the one holding the most ensemble positions.
    positions = {rack: 0 for rack in set(RACK_OF_INDEX)}
    blocks_recovery = {rack: 0 for rack in set(RACK_OF_INDEX)}
    for ledger in ledgers:
        assert ledger.metadata is not None
        e, w, a = ledger.shape
        for ensemble in ledger.metadata.ensembles.values():
            for bookie in ensemble:
                positions[racked.rack_of[bookie]] += 1
            if not ledger.closed:
                for quorum in write_quorums(e, w):
                    for rack in set(RACK_OF_INDEX):
                        if sum(racked.rack_of[ensemble[i]] == rack for i in quorum) >= a:
                            blocks_recovery[rack] += 1
    dead_rack = max(sorted(positions), key=lambda rack: (blocks_recovery[rack], positions[rack]))
    dead = [i for i, rack in enumerate(RACK_OF_INDEX) if rack == dead_rack]
    dead_ids = {cluster.bookie_ids[i] for i in dead}
    assert any(dead_ids & set(ens) for ledger in ledgers for ens in ledger.metadata.ensembles.values())
    for i in dead:
        cluster.kill(i)

    closed = [ledger for ledger in ledgers if ledger.closed]
    still_open = [ledger for ledger in ledgers if not ledger.closed]
    assert closed and still_open

    # Closed ledgers, at once: the dead bookies are most likely still registered (their ZooKeeper sessions last
    # 6 s), so reads meet refused connections and must move on to the other replica.
    with BookKeeper(cluster.metadata_service_uri) as bk:
        for ledger in closed:
            rh = bk.open_ledger(ledger.ledger_id, recovery=False, password=b"racks" if ledger.origin == "client" else b"")
            try:
                assert rh.last_add_confirmed == len(ledger.payloads) - 1
                got = read_all(rh, rh.last_add_confirmed)
                assert got == ledger.payloads, f"{ledger.origin} ledger {ledger.ledger_id} reads back different bytes"
                batched = [bytes(e.payload) for e in rh.read_batched(0, rh.last_add_confirmed, batch_size=16)]
                assert batched == ledger.payloads, f"batch reads of {ledger.origin} ledger {ledger.ledger_id} differ"
            finally:
                rh.close()

    for i in dead:
        cluster.wait_unregistered(i, timeout=90)
    assert not dead_ids & set(cluster.registered())

    # Open ledgers (their writer still runs, idle). Recovery can fence a ledger only while every write quorum keeps
    # Qw - Qa + 1 live bookies (BookKeeper's coverage rule); two racks per quorum of 2 guarantee that, Qw=3/Qa=2 may
    # not. Where it cannot, recovery must refuse rather than close the ledger short, and the writer's own close
    # (metadata only) ends it; either way every acknowledged entry then reads back exactly.
    with BookKeeper(cluster.metadata_service_uri, racked.placement_conf("rackaware")) as bk:
        assert not dead_ids & bk.writable_bookies()
        for ledger in still_open:
            e, w, a = ledger.shape
            md = ledger.metadata
            assert md is not None and len(md.ensembles) == 1 and ledger.handle is not None
            ensemble = next(iter(md.ensembles.values()))
            dead_per_quorum = [sum(ensemble[i] in dead_ids for i in q) for q in write_quorums(e, w)]
            coverable = max(dead_per_quorum) < a
            if (e, w, a) == (3, 2, 2):
                assert coverable, "two racks per write quorum of 2 leave one live bookie in each"
            last = len(ledger.payloads) - 1
            try:
                rh = bk.open_ledger(ledger.ledger_id, recovery=True, password=b"racks")
            except BKError as exc:
                assert not coverable, f"recovery of ledger {ledger.ledger_id} failed though it can fence: {exc!r}"
                md_now = bk.get_ledger_metadata(ledger.ledger_id)
                assert md_now.state != LedgerState.CLOSED, f"a failed recovery closed ledger {ledger.ledger_id}"
                ledger.handle.close()
                rh = bk.open_ledger(ledger.ledger_id, recovery=False, password=b"racks")
            try:
                assert rh.is_closed and rh.last_add_confirmed == last, (
                    f"ledger {ledger.ledger_id} closed at {rh.last_add_confirmed}, {last} acknowledged"
                )
                assert read_all(rh, last) == ledger.payloads, f"ledger {ledger.ledger_id} reads back different bytes"
            finally:
                rh.close()
            md_after = bk.get_ledger_metadata(ledger.ledger_id)
            assert md_after.state == LedgerState.CLOSED and md_after.last_entry_id == last

        # And the closed ledgers once more, now that the cluster knows the rack is gone.
        for ledger in closed:
            rh = bk.open_ledger(ledger.ledger_id, recovery=False, password=b"racks" if ledger.origin == "client" else b"")
            try:
                assert read_all(rh, len(ledger.payloads) - 1) == ledger.payloads
            finally:
                rh.close()
    # Nothing was read from a revived bookie: the rack stayed dead throughout.
    assert all(not cluster.bookies[i].is_alive for i in dead)
