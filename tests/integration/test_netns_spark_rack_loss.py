"""A rack cut off while a Spark job writes with rack-aware placement and ``enforceMinNumRacksPerWriteQuorum``
(docs/reliability.md, "A rack lost during a Spark write"; the namespace test bed, tests/harness/netns.py).

Spark's driver, JVM and Python workers run on the client host (tests/harness/netns_spark_job.py). As soon as the
job's first ledger exists, the rack of one bookie of its ensemble is cut off (its hosts reach only each other).
The job either commits, every ledger's every write quorum still spanning two racks, or fails with an error that
says why; never is a write quorum placed in one rack. After the rack returns, the dataset holds every row of a
committed job exactly once (and none of a failed one).

Each case takes minutes (most of it Spark's start), more than `make test`'s budget allows: it runs with
``NETNS_SPARK_RACK_LOSS=1``, which `make fault` sets, and is skipped with that reason otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bkspark.errors import NoSuchLedgerMetadataError
from bkspark.protocol.ledger_metadata import LedgerState
from tests.campaign.spark_jobs import dataset_ledgers
from tests.harness.netns import unavailable_reason, wait_until
from tests.harness.netns_cluster import NetnsCluster
from tests.harness.python_bookie import REPO_ROOT

pytestmark = [
    pytest.mark.integration,
    pytest.mark.fault,
    pytest.mark.netns,
    pytest.mark.skipif(
        os.environ.get("NETNS_SPARK_RACK_LOSS", "") in ("", "0"),
        reason="minutes a case (Spark's start in a namespace): runs in `make fault` (NETNS_SPARK_RACK_LOSS=1)",
    ),
]

ROWS = 6000
DATASET = "rack-loss"
#: Spark's JVM starts on a loaded shared machine: minutes, not seconds.
SPARK_START_SECONDS = 600.0


def _events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith('{"event"')]


@pytest.fixture
def racks_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[NetnsCluster]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    racks, per_rack = request.param
    with NetnsCluster(tmp_path / "bed", racks=racks, bookies_per_rack=per_rack) as c:
        yield c


@pytest.mark.parametrize(
    "racks_cluster",
    # Four racks of one bookie: after the cut three racks remain, enough for E=3 with every pair of neighbours
    # in two racks. Three racks of two: two racks remain, and a ring of three positions cannot alternate between
    # two racks, so a ledger that lost a bookie cannot be given a valid ensemble: the job must fail, clearly.
    [(4, 1), (3, 2)],
    ids=["four-racks", "three-racks-of-two"],
    indirect=True,
)
def test_a_rack_cut_off_during_a_spark_write_never_leaves_a_write_quorum_in_one_rack(
    racks_cluster: NetnsCluster, tmp_path: Path
) -> None:
    cluster = racks_cluster
    conf = cluster.client_conf(
        minNumRacksPerWriteQuorum=2, enforceMinNumRacksPerWriteQuorum=True, addEntryTimeoutSec=2, readEntryTimeoutSec=2
    )
    options = {f"bookkeeper.{k}": str(v).lower() if isinstance(v, bool) else v for k, v in conf.items()}
    options |= {"ensembleSize": 3, "writeQuorumSize": 2, "ackQuorumSize": 2}
    with cluster.client() as bk:
        watermark = max(bk.list_ledgers(), default=-1)
    go_on = tmp_path / "healed"
    job = cluster.bed.process(
        "client",
        "spark-job",
        [sys.executable, "-m", "tests.harness.netns_spark_job", "--uri", cluster.metadata_service_uri,
         "--dataset", DATASET, "--rows", str(ROWS), "--row-ms", "5", "--options", json.dumps(options),
         "--go-on", str(go_on)],
        cwd=REPO_ROOT,
        log_dir=tmp_path / "spark",
    )
    job.start()
    seen: dict[int, set[tuple[str, ...]]] = {}  # every ensemble any of the job's ledgers ever had, as polled
    stop = threading.Event()
    try:
        with cluster.client() as bk:

            def poll_ensembles() -> None:
                while not stop.is_set():
                    for lid in dataset_ledgers(bk, DATASET, watermark):
                        try:
                            md = bk.get_ledger_metadata(lid)
                        except NoSuchLedgerMetadataError:
                            continue  # deleted by the job's abort
                        seen.setdefault(lid, set()).update(tuple(e) for e in md.ensembles.values())
                    stop.wait(0.2)

            poller = threading.Thread(target=poll_ensembles, name="ensemble-poller", daemon=True)
            poller.start()
            wait_until(lambda: bool(seen) or not job.is_alive, SPARK_START_SECONDS,
                       f"the Spark job's first ledger\n{job.log_tail()}")
            assert job.is_alive, job.log_tail()
            first = min(seen)
            md = bk.get_ledger_metadata(first)
            cut_rack = cluster.bed.hosts[cluster.host_of(md.last_ensemble[0])].rack
            cluster.bed.cut_rack(cut_rack)
            cut_at = time.monotonic()
            # The cut hit mid-write: the ledger still took entries, the job had not finished.
            assert md.state is LedgerState.OPEN and bk.get_ledger_metadata(first).state is LedgerState.OPEN
            assert not [e for e in _events(job.stdout_path) if e["event"] == "written"]
            wait_until(lambda: any(e["event"] == "written" for e in _events(job.stdout_path)) or not job.is_alive,
                       SPARK_START_SECONDS, "the Spark job to commit or fail")
            written = next(e for e in _events(job.stdout_path) if e["event"] == "written")
            outcome_seconds = time.monotonic() - cut_at
            stop.set()
            poller.join(60)
            for lid in dataset_ledgers(bk, DATASET, watermark):  # the final metadata of what the job kept
                seen.setdefault(lid, set()).update(tuple(e) for e in bk.get_ledger_metadata(lid).ensembles.values())
        # Never a write quorum in one rack: every ledger the job made, in every ensemble it was seen with.
        for lid, ensembles in seen.items():
            for ens in ensembles:
                assert all(len(racks) >= 2 for racks in cluster.racks_of_write_quorums(list(ens), 2)), (lid, ens)
        changes = sum(len(ensembles) - 1 for ensembles in seen.values())
        cluster.bed.heal()
        go_on.touch()
        wait_until(lambda: any(e["event"] == "read" for e in _events(job.stdout_path)) or not job.is_alive,
                   SPARK_START_SECONDS, "the Spark job to read the dataset back")
        read = next(e for e in _events(job.stdout_path) if e["event"] == "read")
    finally:
        stop.set()
        go_on.touch()
        job.kill()
    print(f"\nrack {cut_rack} cut: job {written['outcome']} {outcome_seconds:.1f} s after the cut, "
          f"{len(seen)} ledgers, {changes} ensemble changes seen; error: {written.get('error', '')[-300:]}")
    if written["outcome"] == "committed":
        assert sorted(read["rows"]) == sorted(f"row-{i}" for i in range(ROWS))  # every row, exactly once
    else:
        # A clear refusal: the placement's own words, not a timeout.
        assert "NotEnoughBookiesError" in written["error"] and "enough racks" in written["error"], written["error"]
        assert not read["rows"] and "BOOKKEEPER_DATASET_NOT_FOUND" in read["error"]
