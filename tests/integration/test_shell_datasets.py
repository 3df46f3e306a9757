"""Dataset discovery (docs/shell.md, "Datasets"): ``bkspark shell listdatasets`` / ``showdataset`` and
:mod:`bkspark.shell.datasets`, against real ZooKeeper and Python bookies, with datasets written by the connector's
writer (driven as Spark drives it: tests/integration/test_connector_commit.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from bkspark import cli
from bkspark.client import BookKeeper
from bkspark.datasource.datasets import DatasetRegistry
from bkspark.errors import InvalidOptionError
from bkspark.datasource.clients import client_conf, evict_client
from bkspark.shell.datasets import list_datasets, show_dataset
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import ZooKeeperServer
from tests.integration.test_connector_commit import new_writer, run_job, spark_commit, task, two_bookies

pytestmark = [pytest.mark.integration]

ROOT = "/bk-shell-datasets"


@pytest.fixture(scope="module")
def uri(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    for cluster in two_bookies(zookeeper, tmp_path_factory, ROOT):
        assert isinstance(cluster, PythonBookieCluster)
        yield cluster.metadata_service_uri
        evict_client(cluster.metadata_service_uri, client_conf(()))


def shell(capsys: pytest.CaptureFixture[str], uri: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["shell", "--metadata-service-uri", uri, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_an_empty_cluster_lists_no_dataset(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert list_datasets(uri) == []
    code, out, _ = shell(capsys, uri, "listdatasets")
    assert code == 0 and out.splitlines() == ["dataset\tledgers\trows\tbytes\tjobs\tlast commit"]
    code, out, err = shell(capsys, uri, "showdataset", "nothing")
    assert code == 1 and "no dataset named 'nothing'" in err


def test_a_committed_dataset_shows_its_ledgers_rows_bytes_and_last_commit(
    uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before_ms = int(time.time() * 1000) - 5_000  # ZooKeeper's clock is this machine's; a margin for rounding
    partitions = [[b"a" * 10, b"b" * 20, b"c" * 30], [b"d" * 40, b"e" * 50]]
    writer = new_writer(uri, "events", overwrite=False)
    assert spark_commit(writer, run_job(writer, partitions)) == "committed"

    summary = show_dataset(uri, "events")
    assert summary is not None and summary.committed
    assert (summary.ledgers, summary.entries, summary.rows, summary.bytes) == (2, 5, 5, 150)
    assert summary.packed_ledgers == 0 and summary.missing_ledgers == [] and summary.unclosed_ledgers == []
    assert summary.generation == 1 and summary.last_commit_ms is not None and summary.last_commit_ms >= before_ms
    assert summary.jobs == []  # a committed job's record is removed by its clean-up
    assert [s.name for s in list_datasets(uri)] == ["events"]

    code, out, _ = shell(capsys, uri, "showdataset", "events")
    assert code == 0
    lines = out.splitlines()
    for expected in ("dataset: events", "committed: yes", "ledgers: 2", "entries: 5", "rows: 5", "bytes: 150",
                     "commits: 1", "jobs: 0"):
        assert expected in lines, (expected, out)
    code, out, _ = shell(capsys, uri, "--json", "showdataset", "events")
    assert code == 0
    body = json.loads(out)
    assert (body["name"], body["ledgers"], body["rows"], body["bytes"]) == ("events", 2, 5, 150)

    # A second job appends: one more commit, its ledger counted.
    writer = new_writer(uri, "events", overwrite=False)
    assert spark_commit(writer, run_job(writer, [[b"f" * 60]])) == "committed"
    summary = show_dataset(uri, "events")
    assert summary is not None and (summary.ledgers, summary.rows, summary.bytes, summary.generation) == (3, 6, 210, 2)


def test_packed_rows_give_a_lower_bound_and_a_job_still_writing_is_listed(
    uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    writer = new_writer(uri, "packed", overwrite=False, rowsPerEntry="100")
    assert spark_commit(writer, run_job(writer, [[b"row-%d" % i for i in range(50)]])) == "committed"
    packed = show_dataset(uri, "packed")
    assert packed is not None and packed.packed_ledgers == 1 and packed.rows is None
    assert packed.entries == 1 and packed.rows_at_least == 1
    code, out, _ = shell(capsys, uri, "showdataset", "packed")
    assert code == 0 and "rows: at least 1 (1 ledger(s) pack several rows per entry" in out

    # A job that began and wrote but never committed (its driver is still running, or crashed).
    pending = new_writer(uri, "pending", overwrite=False)
    task(pending, [b"x"])
    summary = show_dataset(uri, "pending")
    assert summary is not None and not summary.committed and summary.ledgers == 0 and summary.last_commit_ms is None
    assert [(j.job, j.state) for j in summary.jobs] == [(pending.job_id, "writing")]

    code, out, _ = shell(capsys, uri, "listdatasets")
    assert code == 0
    table = {line.split("\t")[0]: line.split("\t") for line in out.splitlines()[1:]}
    assert sorted(table) == ["events", "packed", "pending"]
    assert table["packed"][2] == ">=1" and table["pending"][4] == "1" and table["pending"][5] == "-"
    code, out, _ = shell(capsys, uri, "--json", "listdatasets")
    assert [d["name"] for d in json.loads(out)] == ["events", "packed", "pending"]
    pending.abort([])  # Spark's abort: the job's record goes, the dataset with it
    assert show_dataset(uri, "pending") is None


def test_a_ledger_whose_metadata_is_gone_is_reported_not_fatal(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    writer = new_writer(uri, "broken", overwrite=False)
    assert spark_commit(writer, run_job(writer, [[b"one"], [b"two"]])) == "committed"
    summary = show_dataset(uri, "broken")
    assert summary is not None and summary.ledgers == 2 and summary.missing_ledgers == []
    with BookKeeper(uri) as bk:  # the ledger removed behind the manifest's back (a crash, a manual delete)
        manifest = DatasetRegistry(bk.store.zk, bk.store.root).manifest("broken")
        assert manifest is not None
        scope, victim = manifest.ledgers[0]
        bk.store.zk.delete(bk.store.ledger_path(victim, scope))
    summary = show_dataset(uri, "broken")
    assert summary is not None and summary.missing_ledgers == [(scope, victim)]
    assert (summary.ledgers, summary.rows, summary.bytes) == (2, 1, 3)
    code, out, _ = shell(capsys, uri, "showdataset", "broken")
    assert code == 0 and f"missing ledgers (metadata gone; reads fail): {victim}" in out


def test_a_bad_name_is_a_usage_error(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = shell(capsys, uri, "showdataset", "no/slash")
    assert code == 2 and "NAME" in err
    with pytest.raises(InvalidOptionError):
        show_dataset(uri, "no/slash")
