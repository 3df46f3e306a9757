"""A write routed by a ``dataset`` column (docs/connector.md, "Routing rows by a dataset column") against real
ZooKeeper and Python bookies: one job, several datasets, one commit point.

The driver's side is driven in this process as Spark drives it (test_connector_commit.py's helpers), so that a
fault can be placed after every step: after each, every dataset of the job reads its old rows or every one its
new rows (never a mixture across datasets), no committed ledger is gone, the orphan audit reports what is left
in each dataset, and ``bkspark shell recoverjobs`` removes it.  test_connector_kafka_options.py runs routed
jobs through real Spark.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bkspark.client import BookKeeper
from bkspark.datasource.datasets import DatasetRegistry, JobState
from bkspark.datasource.faults import ENV_FAULTS, injected
from bkspark.datasource.source import BookKeeperDataSource
from bkspark.datasource.writer import TAG_DATASETS, BookKeeperWriter, RoutedCommitMessage
from bkspark.errors import InvalidOptionError, InvalidRowError
from bkspark.shell.datasets import show_dataset
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import ZooKeeperServer
from tests.integration.test_connector_commit import (  # noqa: F401 - uri, bk, registry: fixtures on this module's cluster
    COMMIT_FAULTS,
    KILLED_DRIVER,
    REPO,
    assert_clean,
    audit,
    bk,
    commit_at_once,
    ledgers_of,
    leftovers_of,
    new_writer,
    parents_of,
    read_rows,
    recoverjobs,
    registry,
    rows,
    run_job,
    spark_commit,
    spark_commit_abort,
    two_bookies,
    uri,
)

pytestmark = [pytest.mark.integration]

ROOT = "/bk-connector-routing"


@pytest.fixture(scope="module")
def py_cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonBookieCluster]:
    yield from two_bookies(zookeeper, tmp_path_factory, ROOT)


# -- a routed job, driven as Spark drives it -------------------------------------------------------------------------


def routed_writer(uri: str, overwrite: bool, **options: str) -> BookKeeperWriter:
    """``df.write...save()`` of a DataFrame (payload binary, dataset string) without the ``dataset`` option."""
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    source = BookKeeperDataSource({
        "metadataserviceuri": uri, "ensemblesize": "2", "writequorumsize": "2", "ackquorumsize": "2",
        **{k.lower(): v for k, v in options.items()},
    })
    schema = StructType([StructField("payload", BinaryType()), StructField("dataset", StringType())])
    writer = source.writer(schema, overwrite)
    assert isinstance(writer, BookKeeperWriter)
    return pickle.loads(pickle.dumps(writer))


def routed_task(writer: BookKeeperWriter, routed: list[tuple[str | None, bytes]], batches: int = 1) -> Any:
    """One task's ``write()`` of ``(dataset, payload)`` rows, in ``batches`` Arrow batches."""
    step = max(1, -(-len(routed) // batches))
    arrow = [
        pa.RecordBatch.from_arrays(
            [pa.array([p for _, p in part], pa.binary()), pa.array([d for d, _ in part], pa.string())],
            names=["payload", "dataset"],
        )
        for part in (routed[i : i + step] for i in range(0, len(routed), step))
    ]
    return writer.write(iter(arrow))


def spread(datasets: list[str], prefix: str, n: int) -> list[tuple[str | None, bytes]]:
    """``n`` rows per dataset, interleaved (every batch holds rows of every dataset)."""
    return [(name, f"{prefix}-{name}-{i}".encode()) for i in range(n) for name in datasets]


def expected(datasets: list[str], prefix: str, n: int) -> dict[str, list[bytes]]:
    return {name: sorted(f"{prefix}-{name}-{i}".encode() for i in range(n)) for name in datasets}


def seed_each(uri: str, datasets: list[str]) -> dict[str, list[bytes]]:
    """One committed single-dataset append per dataset: its old rows."""
    old = {}
    for name in datasets:
        writer = new_writer(uri, name, overwrite=False)
        assert spark_commit(writer, run_job(writer, [rows(f"old-{name}", 2)])) == "committed"
        old[name] = sorted(rows(f"old-{name}", 2))
    return old


def routed_jobs(registry: DatasetRegistry) -> list[str]:
    return [job for job in registry.jobs() if (r := registry.job(job)) is not None and r.routed]


# -- what a routed job does --------------------------------------------------------------------------------------------


def test_rows_go_to_the_datasets_they_name_in_one_job_and_one_parent(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """One task's rows spread over three datasets, one of them new: each dataset reads exactly its rows, one
    ledger per dataset per task, every ledger a child of the job's one parent, which lists the datasets."""
    old = seed_each(uri, ["route-a", "route-b"])
    names = ["route-a", "route-b", "route-new"]
    writer = routed_writer(uri, overwrite=False)
    messages = [routed_task(writer, spread(names, "p0", 3), batches=2), routed_task(writer, spread(names[:2], "p1", 2))]
    assert all(isinstance(m, RoutedCommitMessage) for m in messages)
    assert sorted(name for name, _ in messages[0].ledgers) == names
    assert spark_commit(writer, messages) == "committed"
    got0, got1 = expected(names, "p0", 3), expected(names[:2], "p1", 2)
    for name in names:
        want = sorted(old.get(name, []) + got0[name] + got1.get(name, []))
        assert read_rows(uri, name) == want
        assert_clean(bk, registry, name)
    (parent,) = parents_of(bk, registry.manifest("route-new").ledgers)  # type: ignore[union-attr]
    assert parent in parents_of(bk, registry.manifest("route-a").ledgers)  # type: ignore[union-attr]
    assert bk.get_ledger_metadata(parent).custom_metadata[TAG_DATASETS] == b",".join(n.encode() for n in names)
    assert routed_jobs(registry) == []
    assert audit(uri, bk) == {}


def test_overwrite_replaces_each_named_dataset_and_leaves_the_others(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """Mode overwrite replaces every dataset the rows name (each as a single-dataset overwrite would); a dataset
    no row names keeps its rows."""
    old = seed_each(uri, ["over-a", "over-b", "over-untouched"])
    writer = routed_writer(uri, overwrite=True)
    assert spark_commit(writer, [routed_task(writer, spread(["over-a", "over-b"], "new", 2))]) == "committed"
    new = expected(["over-a", "over-b"], "new", 2)
    assert read_rows(uri, "over-a") == new["over-a"] and read_rows(uri, "over-b") == new["over-b"]
    assert read_rows(uri, "over-untouched") == old["over-untouched"]
    for name in ("over-a", "over-b", "over-untouched"):
        assert_clean(bk, registry, name)
    assert audit(uri, bk) == {}


def test_a_shared_parent_stays_until_no_dataset_names_it(uri: str, bk: BookKeeper, registry: DatasetRegistry) -> None:
    """The job's parent is the parent of its ledgers in every dataset: an overwrite of one dataset deletes that
    dataset's ledgers but keeps the parent while another dataset still names it (its ledgers are committed and
    must not name a missing parent); the overwrite of the last one deletes it."""
    writer = routed_writer(uri, overwrite=False)
    assert spark_commit(writer, [routed_task(writer, spread(["share-a", "share-b"], "r", 2))]) == "committed"
    (parent,) = parents_of(bk, registry.manifest("share-a").ledgers)  # type: ignore[union-attr]
    for name, remaining in (("share-a", True), ("share-b", False)):
        over = new_writer(uri, name, overwrite=True)
        assert spark_commit(over, run_job(over, [rows(f"after-{name}", 1)])) == "committed"
        assert (parent in ledgers_of(bk)) is remaining
        assert audit(uri, bk) == {}, name
    assert read_rows(uri, "share-a") == rows("after-share-a", 1)


def test_routed_jobs_and_single_appends_committing_at_once_all_publish_once(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """Two routed jobs over overlapping datasets and a single-dataset append, committed at once: a lost
    compare-and-set on any one root re-plans the whole multi, so every job publishes all its rows exactly once."""
    names = ["race-a", "race-b", "race-c"]
    jobs = []
    for i, routed_to in enumerate((names[:2], names[1:])):
        writer = routed_writer(uri, overwrite=False)
        jobs.append((writer, [routed_task(writer, spread(routed_to, f"job{i}", 2))]))
    single = new_writer(uri, "race-b", overwrite=False)
    jobs.append((single, run_job(single, [rows("single", 2)])))
    assert commit_at_once(jobs) == ["committed"] * 3
    job0, job1 = expected(names[:2], "job0", 2), expected(names[1:], "job1", 2)
    assert read_rows(uri, "race-a") == job0["race-a"]
    assert read_rows(uri, "race-b") == sorted(job0["race-b"] + job1["race-b"] + rows("single", 2))
    assert read_rows(uri, "race-c") == job1["race-c"]
    for name in names:
        assert_clean(bk, registry, name)


def test_a_job_with_no_rows_publishes_nothing_and_leaves_nothing(uri: str, registry: DatasetRegistry) -> None:
    writer = routed_writer(uri, overwrite=True)
    assert spark_commit(writer, [routed_task(writer, []), routed_task(writer, [])]) == "committed"
    assert registry.job(writer.job_id) is None


def test_the_dataset_option_wins_over_the_column_as_kafkas_topic_option_does(uri: str) -> None:
    """With both, every row goes to the option's dataset and the column is not stored (Kafka's ``topic`` option
    overrides its ``topic`` column)."""
    writer = routed_writer(uri, overwrite=False, dataset="option-wins")
    assert not writer.routed
    message = routed_task(writer, [("elsewhere", b"x"), ("other", b"y")])
    assert not isinstance(message, RoutedCommitMessage)
    assert spark_commit(writer, [message]) == "committed"
    assert read_rows(uri, "option-wins") == [b"x", b"y"]


# -- bad input ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,message",
    [
        (None, r"\[BOOKKEEPER_INVALID_DATASET\] column 'dataset' is null in row 1"),
        ("", r"\[BOOKKEEPER_INVALID_DATASET\] column 'dataset' names the dataset '' in row 1"),
        ("a/b", r"\[BOOKKEEPER_INVALID_DATASET\] column 'dataset' names the dataset 'a/b' in row 1"),
        ("x\n", r"\[BOOKKEEPER_INVALID_DATASET\] column 'dataset' names the dataset 'x\\n' in row 1"),
    ],
    ids=["null", "empty", "slash", "newline"],
)
def test_a_row_naming_no_valid_dataset_fails_its_task_naming_column_row_and_value(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, value: str | None, message: str
) -> None:
    """The task fails before it creates any ledger for the bad batch; the job's abort leaves nothing."""
    writer = routed_writer(uri, overwrite=False)
    before = ledgers_of(bk)
    with pytest.raises(InvalidRowError, match=message):
        routed_task(writer, [("bad-input-ok", b"fine"), (value, b"bad")])
    assert spark_commit_abort(writer) == "aborted"
    assert ledgers_of(bk) == before and registry.job(writer.job_id) is None
    assert registry.root("bad-input-ok") is None


def test_a_dataset_column_of_another_type_fails_save_naming_it(uri: str, registry: DatasetRegistry) -> None:
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    source = BookKeeperDataSource({"metadataserviceuri": uri})
    jobs = set(registry.jobs())
    schema = StructType([StructField("payload", BinaryType()), StructField("dataset", IntegerType())])
    with pytest.raises(InvalidOptionError, match=r"\[BOOKKEEPER_COLUMN_TYPE\] column 'dataset' must be a string.*not int"):
        source.writer(schema, False)
    assert set(registry.jobs()) == jobs  # failed before the job began


def stream_sink(uri: str, checkpoint: Path, complete: bool = False) -> Any:
    """``df.writeStream`` of a DataFrame (payload binary, dataset string) without the ``dataset`` option."""
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    source = BookKeeperDataSource({
        "metadataserviceuri": uri, "checkpointlocation": str(checkpoint), "ensemblesize": "2",
        "writequorumsize": "2", "ackquorumsize": "2",
    })
    schema = StructType([StructField("payload", BinaryType()), StructField("dataset", StringType())])
    return pickle.loads(pickle.dumps(source.streamWriter(schema, complete)))


def stream_task(sink: Any, batch_id: int, run: str, routed: list[tuple[str | None, bytes]]) -> Any:
    """One Spark task of micro-batch ``batch_id`` of run ``run`` (its ids given, not read from local properties)."""
    batch = pa.RecordBatch.from_arrays(
        [pa.array([p for _, p in routed], pa.binary()), pa.array([d for d, _ in routed], pa.string())],
        names=["payload", "dataset"],
    )
    return sink._tasks.write_batch(iter([batch] if routed else []), batch_id, run)


def test_the_stream_sink_routes_each_micro_batch_exactly_once(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``writeStream`` routes as a batch write does: each micro-batch publishes every dataset its rows name in
    one multi with the query's key (batch id) in every root; a replayed batch (a restarted query) publishes
    nothing and its duplicate ledgers go; an aborted batch leaves nothing in any dataset."""
    names = ["sroute-a", "sroute-b", "sroute-c"]
    sink = stream_sink(uri, tmp_path / "cp")
    first = stream_task(sink, 0, "runA", spread(names[:2], "b0", 2))
    sink.commit([first], 0)
    replay = stream_task(sink, 0, "runB", spread(names[:2], "b0", 2))
    sink.commit([replay], 0)
    assert not {lid for _, part in replay.ledgers for lid in [part.ledger_id]} & ledgers_of(bk)
    failed = stream_task(sink, 1, "runB", spread(names, "lost", 1))
    sink.abort([failed], 1)
    assert not {part.ledger_id for _, part in failed.ledgers} & ledgers_of(bk)
    second = stream_task(sink, 1, "runC", spread(names[1:], "b1", 1))
    sink.commit([second, stream_task(sink, 1, "runC", [])], 1)
    b0, b1 = expected(names[:2], "b0", 2), expected(names[1:], "b1", 1)
    assert read_rows(uri, "sroute-a") == b0["sroute-a"]
    assert read_rows(uri, "sroute-b") == sorted(b0["sroute-b"] + b1["sroute-b"])
    assert read_rows(uri, "sroute-c") == b1["sroute-c"]
    for name in names:
        assert registry.root(name).token(sink.writer) == (0 if name == "sroute-a" else 1)  # type: ignore[union-attr]
        assert_clean(bk, registry, name)
    assert audit(uri, bk) == {}


def test_a_routed_complete_mode_batch_replaces_the_datasets_it_names_and_an_empty_one_none(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, tmp_path: Path
) -> None:
    names = ["scomp-a", "scomp-b"]
    sink = stream_sink(uri, tmp_path / "cp", complete=True)
    sink.commit([stream_task(sink, 0, "run", spread(names, "b0", 2))], 0)
    sink.commit([stream_task(sink, 1, "run", spread(names[:1], "b1", 1))], 1)
    sink.commit([stream_task(sink, 2, "run", [])], 2)
    assert read_rows(uri, "scomp-a") == expected(names[:1], "b1", 1)["scomp-a"]
    assert read_rows(uri, "scomp-b") == expected(names, "b0", 2)["scomp-b"]
    for name in names:
        assert_clean(bk, registry, name)
    assert audit(uri, bk) == {}


def test_a_routed_stream_batch_killed_after_its_commit_point_is_not_published_again(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The driver dies right after a routed micro-batch's multi: both datasets hold the batch; the restarted
    query's commit of the replayed batch publishes nothing, and its clean-up removes what the dead run left."""
    names = ["skill-a", "skill-b"]
    sink = stream_sink(uri, tmp_path / "cp")
    messages = [stream_task(sink, 0, "runA", spread(names, "b0", 2))]
    state = tmp_path / "driver.pickle"
    state.write_bytes(pickle.dumps((sink, messages)))
    script = tmp_path / "driver.py"
    script.write_text(STREAM_DRIVER)
    env = dict(os.environ, **{ENV_FAULTS: "commit.published=kill"})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, str(script), str(state)], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120, start_new_session=True)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    b0 = expected(names, "b0", 2)
    assert {name: read_rows(uri, name) for name in names} == b0
    replay = stream_task(sink, 0, "runB", spread(names, "b0", 2))
    sink.commit([replay], 0)
    assert {name: read_rows(uri, name) for name in names} == b0
    for name in names:
        assert_clean(bk, registry, name)
    assert audit(uri, bk) == {}


STREAM_DRIVER = """
import pickle, sys
sink, messages = pickle.load(open(sys.argv[1], "rb"))
try:
    sink.commit(messages, 0)
except Exception:
    sink.abort(messages, 0)
print("survived", flush=True)
"""


# -- crash safety across the datasets of one job -------------------------------------------------------------------


def test_a_ledger_of_one_dataset_gone_before_the_commit_publishes_no_dataset(
    uri: str, bk: BookKeeper, registry: DatasetRegistry
) -> None:
    """All or nothing across datasets: one ledger of dataset b deleted before the commit fails the commit
    (``BOOKKEEPER_DATA_LOSS`` naming it) and dataset a is not published either; the abort removes the rest."""
    names = ["gone-a", "gone-b"]
    old = seed_each(uri, names)
    writer = routed_writer(uri, overwrite=False)
    message = routed_task(writer, spread(names, "new", 2))
    (victim,) = [part.ledger_id for name, part in message.ledgers if name == "gone-b"]
    bk.delete_ledger(victim)
    with pytest.raises(Exception, match=rf"BOOKKEEPER_DATA_LOSS.*{victim}"):
        writer.commit([message])
    writer.abort([message])
    assert {name: read_rows(uri, name) for name in names} == old
    assert registry.job(writer.job_id) is None
    for name in names:
        assert_clean(bk, registry, name)




@pytest.mark.parametrize("point,error,committed", COMMIT_FAULTS, ids=[p for p, _, _ in COMMIT_FAULTS])
def test_an_error_after_each_step_leaves_every_dataset_old_or_every_one_new(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, capsys: pytest.CaptureFixture[str],
    point: str, error: str, committed: bool,
) -> None:
    """An overwrite routed to two datasets (and a failed attempt's ledgers in both): after an error at each step
    both datasets read their old rows or both their new ones; what is left is reported by the audit for each
    dataset and removed by ``recoverjobs``."""
    names = [f"rf-{point}-{n}".replace(".", "-") for n in ("a", "b")]
    old = seed_each(uri, names)
    writer = routed_writer(uri, overwrite=True)
    with injected(f"{point}={error}"):
        try:
            routed_task(writer, spread(names, "lost", 1))  # an attempt whose message never reaches the driver
            messages = [routed_task(writer, spread(names, "new", 2))]
        except Exception:  # noqa: BLE001 - the task failed: Spark aborts with no messages
            messages = None
        outcome = spark_commit(writer, messages) if messages is not None else spark_commit_abort(writer)
    new = expected(names, "new", 2)
    got = {name: read_rows(uri, name) for name in names}
    if committed:
        assert outcome == "committed" and got == new
    else:
        assert outcome in ("aborted", "abort-failed") and got == old
    for name in names:
        assert {lid for _, lid in registry.manifest(name).ledgers} <= ledgers_of(bk)  # type: ignore[union-attr]
    leftovers = leftovers_of(bk, registry, names[0]) | leftovers_of(bk, registry, names[1])
    assert leftovers <= set(audit(uri, bk)), leftovers
    recoverjobs(uri, capsys)
    for name in names:
        assert_clean(bk, registry, name)
        assert read_rows(uri, name) == got[name]
    assert audit(uri, bk) == {}


@pytest.mark.parametrize("point", ["commit.shards-written", "commit.published", "abort.fenced"])
def test_the_driver_killed_before_or_after_the_commit_point_and_the_rerun_publishes_once(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    point: str,
) -> None:
    """SIGKILL of the process running commit (or abort) of a job routed to two datasets: before the commit point
    neither dataset changed, after it both did; the commit run again (a restarted driver) publishes nothing more;
    the audit reports the leftovers of both datasets and ``recoverjobs`` removes them."""
    names = [f"rk-{point}-{n}".replace(".", "-") for n in ("a", "b")]
    old = seed_each(uri, names)
    writer = routed_writer(uri, overwrite=False)
    routed_task(writer, spread(names, "lost", 1))
    messages = [routed_task(writer, spread(names, "new", 2))]
    state = tmp_path / "driver.pickle"
    state.write_bytes(pickle.dumps((writer, messages)))
    script = tmp_path / "driver.py"
    script.write_text(KILLED_DRIVER)
    plan = f"{point}=kill" if not point.startswith("abort.") else f"commit.shards-written=connection-loss,{point}=kill"
    env = dict(os.environ, **{ENV_FAULTS: plan})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, str(script), str(state)], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120, start_new_session=True)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    committed = point == "commit.published"
    new = expected(names, "new", 2)
    want = {name: sorted(old[name] + new[name]) if committed else old[name] for name in names}
    assert {name: read_rows(uri, name) for name in names} == want
    record = registry.job(writer.job_id)
    assert record is not None
    assert record.state is (JobState.COMMITTED if committed else JobState.WRITING if point != "abort.fenced" else JobState.ABORTING)
    if committed:
        assert record.datasets == tuple(names)
    leftovers = leftovers_of(bk, registry, names[0]) | leftovers_of(bk, registry, names[1])
    assert leftovers and leftovers <= set(audit(uri, bk))
    if point != "abort.fenced":
        # The restarted driver commits again: a job killed before its multi publishes now; after it, nothing more.
        assert spark_commit(writer, messages) == "committed"
        want = {name: sorted(old[name] + new[name]) for name in names}
    recoverjobs(uri, capsys)
    for name in names:
        assert read_rows(uri, name) == want[name]
        assert_clean(bk, registry, name)
    assert audit(uri, bk) == {}


def test_a_routed_job_still_writing_is_found_by_recoverjobs_with_either_dataset(
    uri: str, bk: BookKeeper, registry: DatasetRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """A routed job's record names no dataset until it commits: its registrations do, so ``showdataset`` lists
    it under each, ``recoverjobs --dataset`` with any of its datasets aborts it once stale, and the audit
    reports its ledgers meanwhile."""
    names = ["rw-a", "rw-b"]
    writer = routed_writer(uri, overwrite=False)
    routed_task(writer, spread(names, "w", 1))
    assert registry.job_datasets(writer.job_id, registry.job(writer.job_id)) == tuple(names)
    for name in names:  # `bkspark shell showdataset` lists the job under each of its datasets
        summary = show_dataset(uri, name)
        assert summary is not None and [j.job for j in summary.jobs] == [writer.job_id]
    mine = ledgers_of(bk, "rw-a") | ledgers_of(bk, "rw-b")
    assert mine and mine <= set(audit(uri, bk))
    out = recoverjobs(uri, capsys, ("--dataset", "rw-b", "--stale-after", "0"))
    assert f"{writer.job_id} stale writing job aborted" in out
    assert not mine & ledgers_of(bk) and registry.job(writer.job_id) is None
    assert audit(uri, bk) == {}
