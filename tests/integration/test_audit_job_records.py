"""The orphan audit, ``bkspark shell recoverjobs`` and ``deleteledger`` over the Spark writer's job records and
manifests, against a real ZooKeeper: records or manifests that cannot be parsed, jobs committing while the audit
reads or while ``recoverjobs`` fences them, ``recoverjobs`` killed or failing after each of its steps, two of them
at once, bad input, and deleting a ledger that a dataset or a running job holds.

The audit reads job records and dataset manifests to find what a write job left after its commit point
(``DATASET_LEFTOVER``). These tests write those znodes straight into ZooKeeper with :class:`DatasetRegistry`
(the audit and ``recoverjobs`` touch ledger metadata only, never bookies, so no bookie runs here).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from bkspark import cli
from bkspark.audit import Auditor, OrphanReason, list_orphans
from bkspark.datasource.datasets import CommitKey, DatasetRegistry, JobRecord, JobState
from bkspark.datasource.faults import ENV_FAULTS, injected
from bkspark.metadata.store import ZkMetadataStore
from tests.integration.test_audit_orphans import (  # noqa: F401 - store: a fixture
    child_ctx,
    close_ctx,
    ledger,
    new_ledger,
    store,
)

pytestmark = pytest.mark.integration


def committed_job_with_a_leftover(store: ZkMetadataStore, registry: DatasetRegistry, job_id: str, dataset: str) -> int:
    """A job whose record says ``committed`` and whose one registered ledger no manifest names (its clean-up
    did not finish): the ledger's id."""
    leftover = new_ledger(store, ledger({}))
    registry.begin_job(job_id, JobRecord(JobState.WRITING, dataset))
    registry.register(job_id, 0, leftover)
    record = registry.job(job_id)
    assert record is not None
    store.zk.set(registry.job_path(job_id), JobRecord(JobState.COMMITTED, dataset).to_bytes(), version=record.version)
    return leftover


def audit(uri: str) -> tuple[dict[int, set[OrphanReason]], list[tuple[str, str]]]:
    """One recorded audit pass: ledger id -> its reasons as ``listorphaned`` reads them, and what it skipped."""
    auditor = Auditor(uri, grace_period=0, audit_period=3600)
    try:
        result = auditor.audit_once()
        found: dict[int, set[OrphanReason]] = {}
        for record in list_orphans(auditor.zk, auditor.root):
            found.setdefault(record.ledger_id, set()).add(record.reason)
    finally:
        auditor.stop()
    return found, result.unreadable


def shell(capsys: pytest.CaptureFixture[str], uri: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["shell", "--metadata-service-uri", uri, *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("broken", ["job record", "dataset manifest"])
def test_one_malformed_job_record_or_manifest_neither_silences_the_audit_nor_lets_recoverjobs_half_run(
    zk_root: Any, store: ZkMetadataStore, capsys: pytest.CaptureFixture[str], broken: str
) -> None:
    """A record this version cannot parse (garbage, or a newer writer's) is skipped by the audit and reported as
    unreadable; every other finding is still recorded. ``recoverjobs`` refuses with one line naming the znode
    before it changes anything, so the operator can look at it first."""
    uri = zk_root.metadata_service_uri
    registry = DatasetRegistry(store.zk, store.root)
    overdue = new_ledger(store, ledger(close_ctx(datetime.now(timezone.utc) - timedelta(days=1))))
    leftover = committed_job_with_a_leftover(store, registry, "job-a", "sales")
    if broken == "job record":
        bad_path = registry.job_path("job-b")
    else:
        bad_path = registry.dataset_path("sales")
    store.zk.create(bad_path, b"{not json", makepath=True)

    found, unreadable = audit(uri)

    assert found.get(overdue) == {OrphanReason.DELETE_OVERDUE}
    if broken == "job record":
        assert found.get(leftover) == {OrphanReason.DATASET_LEFTOVER}
        assert [label for label, _ in unreadable] == ["job job-b"]
    else:  # which of the job's ledgers are committed is unknown: none of them is reported
        assert leftover not in found
        assert [label for label, _ in unreadable] == ["dataset sales"]

    code, out, err = shell(capsys, uri, "recoverjobs", "--stale-after", "0")
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and bad_path in err and "Traceback" not in err
    # Nothing changed: the committed job's record and its leftover ledger are both still there.
    record = registry.job("job-a")
    assert record is not None and record.state is JobState.COMMITTED
    assert store.ledger_exists(leftover)


def publish(registry: DatasetRegistry, dataset: str, job_id: str, ledgers: list[tuple[int, int]]) -> None:
    """Publish ``ledgers`` as job ``job_id`` does at its commit point (record and manifest in one ``multi``)."""
    result = registry.publish(dataset, ledgers, replace_all=False, job_id=job_id, key=CommitKey(job_id, 0))
    assert not result.already


class CommitLandsBefore(DatasetRegistry):
    """A registry on which a job's commit point lands right before the first ``step`` on ``job_id`` (``"job"``:
    reading its record; ``"fence_job"``: fencing it): an interleaving a concurrent writer can produce, made
    certain."""

    def __init__(self, zk: Any, root: str, step: str, job_id: str, commit: Callable[[], None]) -> None:
        super().__init__(zk, root)
        self._at = (step, job_id)
        self._commit: Callable[[], None] | None = commit

    def _before(self, step: str, job_id: str) -> None:
        if (step, job_id) == self._at and self._commit is not None:
            commit, self._commit = self._commit, None
            commit()

    def job(self, job_id: str) -> JobRecord | None:
        self._before("job", job_id)
        return super().job(job_id)

    def fence_job(self, job_id: str) -> JobRecord | None:
        self._before("fence_job", job_id)
        return super().fence_job(job_id)


def test_a_job_that_commits_while_the_audit_reads_the_records_is_not_reported_as_leftover(
    zk_root: Any, store: ZkMetadataStore
) -> None:
    """Job ``a`` committed and left a ledger of a failed attempt; job ``b`` of the same dataset commits while the
    audit reads the job records. ``b``'s ledger is committed data: only ``a``'s failed attempt is a leftover."""
    registry = DatasetRegistry(store.zk, store.root)
    a_committed, a_attempt, b_committed = (new_ledger(store, ledger({})) for _ in range(3))
    for job_id, ledgers in (("a", (a_committed, a_attempt)), ("b", (b_committed,))):
        registry.begin_job(job_id, JobRecord(JobState.WRITING, "sales"))
        for ledger_id in ledgers:
            registry.register(job_id, 0, ledger_id)
    publish(registry, "sales", "a", [(0, a_committed)])

    racing = CommitLandsBefore(store.zk, store.root, "job", "b", lambda: publish(registry, "sales", "b", [(0, b_committed)]))
    leftovers = racing.leftover_ledgers()

    assert registry.job("b").state is JobState.COMMITTED  # type: ignore[union-attr]
    assert set(registry.manifest("sales").ledgers) == {(0, a_committed), (0, b_committed)}  # type: ignore[union-attr]
    assert set(leftovers) == {(0, a_attempt)}


def test_recoverjobs_that_cannot_finish_a_clean_up_says_so_and_its_rerun_finishes_it(
    zk_root: Any, store: ZkMetadataStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refused ledger delete (every retry) after a job's commit point: the committed data stays, the job's
    record stays ``committed`` for the next run, the audit still reports the leftover, and the command says the
    clean-up is unfinished and exits 1 instead of reporting success. The next run finishes it."""
    uri = zk_root.metadata_service_uri
    registry = DatasetRegistry(store.zk, store.root)
    leftover = committed_job_with_a_leftover(store, registry, "job-a", "sales")
    committed = new_ledger(store, ledger({}))
    registry.register("job-a", 0, committed)
    record = registry.job("job-a")
    assert record is not None
    store.zk.set(registry.job_path("job-a"), JobRecord(JobState.WRITING, "sales").to_bytes(), version=record.version)
    publish(registry, "sales", "job-a", [(0, committed)])

    with injected("ledger.delete=delete-refused"):
        code, out, err = shell(capsys, uri, "--json", "recoverjobs")
    assert code == 1, (out, err)
    assert json.loads(out) == {"jobs": [{"job": "job-a", "done": "committed: clean-up unfinished"}]}
    assert "job-a" in err and len(err.strip().splitlines()) == 1
    assert registry.job("job-a").state is JobState.COMMITTED  # type: ignore[union-attr]
    assert store.ledger_exists(leftover) and store.ledger_exists(committed)
    assert audit(uri)[0] == {leftover: {OrphanReason.DATASET_LEFTOVER}}

    code, out, err = shell(capsys, uri, "--json", "recoverjobs")
    assert code == 0 and err == ""
    assert json.loads(out) == {"jobs": [{"job": "job-a", "done": "committed: clean-up finished"}]}
    assert registry.job("job-a") is None and registry.jobs() == []
    assert not store.ledger_exists(leftover) and store.ledger_exists(committed)
    assert registry.manifest("sales").ledgers == ((0, committed),)  # type: ignore[union-attr]
    assert audit(uri)[0] == {}


@pytest.mark.parametrize(
    "argv,code,message",
    [
        (["--dataset", ""], 2, "option '--dataset'"),
        (["--dataset", "a/b"], 2, "option '--dataset'"),
        (["--dataset", "no-such-dataset"], 1, "no dataset or write job named 'no-such-dataset'"),
        (["--stale-after", "-1"], 2, "--stale-after"),
        (["--stale-after", "nan"], 2, "--stale-after"),
    ],
    ids=["empty-dataset", "path-dataset", "unknown-dataset", "negative-stale-after", "nan-stale-after"],
)
def test_recoverjobs_given_bad_input_fails_in_one_line_and_changes_nothing(
    zk_root: Any, store: ZkMetadataStore, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    """A mistyped dataset must not read as "nothing to recover", nor a bad age abort the jobs still writing."""
    uri = zk_root.metadata_service_uri
    registry = DatasetRegistry(store.zk, store.root)
    leftover = committed_job_with_a_leftover(store, registry, "job-a", "sales")
    registry.begin_job("job-w", JobRecord(JobState.WRITING, "sales"))

    got, out, err = shell(capsys, uri, "recoverjobs", *argv)

    assert (got, out) == (code, "")
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err
    assert [(job, registry.job(job).state) for job in registry.jobs()] == [  # type: ignore[union-attr]
        ("job-a", JobState.COMMITTED), ("job-w", JobState.WRITING)
    ]
    assert store.ledger_exists(leftover)


def test_recoverjobs_says_committed_when_a_stale_job_commits_before_its_fence(
    zk_root: Any, store: ZkMetadataStore
) -> None:
    """The abort of a stale ``writing`` job loses to the job's own commit: its committed ledger stays, the other
    attempt's goes, and the operator is told the job committed, not that it was aborted."""
    from bkspark.client import BookKeeper
    from bkspark.datasource.cleanup import recover_jobs

    registry = DatasetRegistry(store.zk, store.root)
    committed, attempt = (new_ledger(store, ledger({})) for _ in range(2))
    registry.begin_job("job-w", JobRecord(JobState.WRITING, "sales"))
    for ledger_id in (committed, attempt):
        registry.register("job-w", 0, ledger_id)
    racing = CommitLandsBefore(
        store.zk, store.root, "fence_job", "job-w", lambda: publish(registry, "sales", "job-w", [(0, committed)])
    )

    with BookKeeper(zk_root.metadata_service_uri) as bk:
        done = recover_jobs(bk, racing, stale_after=0)

    assert done == [("job-w", "committed: clean-up finished")]
    assert registry.manifest("sales").ledgers == ((0, committed),)  # type: ignore[union-attr]
    assert store.ledger_exists(committed) and not store.ledger_exists(attempt)
    assert registry.jobs() == []


def test_deleteledger_refuses_a_ledger_a_dataset_or_a_running_job_holds(
    zk_root: Any, store: ZkMetadataStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """The audit lists a running job's ledgers as BROKEN_PARENT_REF until the job commits (parent grace period 0):
    deleting one from that list must not lose rows the job is about to commit, nor rows already committed, nor
    the parent that keeps committed ledgers from being reported. A leftover of a committed job may go."""
    uri = zk_root.metadata_service_uri
    registry = DatasetRegistry(store.zk, store.root)
    committed, parent, leftover, running = (new_ledger(store, ledger({})) for _ in range(4))
    registry.begin_job("job-a", JobRecord(JobState.WRITING, "sales", parent=(0, parent)))
    for ledger_id in (committed, leftover):
        registry.register("job-a", 0, ledger_id)
    result = registry.publish(
        "sales", [(0, committed)], replace_all=False, job_id="job-a", key=CommitKey("job-a", 0), parents=[(0, parent)]
    )
    assert not result.already
    registry.begin_job("job-w", JobRecord(JobState.WRITING, "sales"))
    registry.register("job-w", 0, running)

    for ledger_id, holder in ((committed, "dataset 'sales'"), (parent, "dataset 'sales'"), (running, "job-w")):
        code, out, err = shell(capsys, uri, "deleteledger", "-f", str(ledger_id))
        assert (code, out) == (1, ""), err
        assert len(err.strip().splitlines()) == 1 and holder in err and "--even-if-held" in err
        assert store.ledger_exists(ledger_id)
    code, out, err = shell(capsys, uri, "deleteledger", "-f", str(leftover))
    assert code == 0 and not store.ledger_exists(leftover), err
    code, out, err = shell(capsys, uri, "deleteledger", "-f", "--even-if-held", str(running))
    assert code == 0 and not store.ledger_exists(running), err


REPO = Path(__file__).resolve().parents[2]

#: The fault points ``recoverjobs`` passes, in order, for one committed job (an overwrite with a failed attempt)
#: and then one aborting job.
RECOVERY_FAULT_POINTS = (
    "commit.published", "ledger.delete", "commit.attempts-deleted", "commit.retired-deleted", "abort.fenced",
    "abort.ledgers-deleted",
)


def work_for_recoverjobs(store: ZkMetadataStore, registry: DatasetRegistry) -> tuple[int, set[int]]:
    """Dataset ``sales`` overwritten by ``job-c`` (committed; its failed attempt and the ledger it replaced still
    there) and ``job-x`` aborting (its ledger still there): the committed ledger, and what must go."""
    replaced, committed, attempt = (new_ledger(store, ledger({})) for _ in range(3))
    registry.begin_job("job-0", JobRecord(JobState.WRITING, "sales"))
    registry.register("job-0", 0, replaced)
    publish(registry, "sales", "job-0", [(0, replaced)])
    registry.forget_job("job-0")
    registry.begin_job("job-c", JobRecord(JobState.WRITING, "sales", overwrite=True))
    for ledger_id in (committed, attempt):
        registry.register("job-c", 0, ledger_id)
    registry.publish("sales", [(0, committed)], replace_all=True, job_id="job-c", key=CommitKey("job-c", 0))
    aborted = new_ledger(store, ledger(child_ctx(10**9)))  # its job's parent was never created
    registry.begin_job("job-x", JobRecord(JobState.ABORTING, "sales"))
    registry.register("job-x", 0, aborted)
    return committed, {replaced, attempt, aborted}


def assert_recovered(store: ZkMetadataStore, registry: DatasetRegistry, committed: int, garbage: set[int]) -> None:
    """Every job finished: the committed ledger is the dataset, and nothing else is left."""
    assert registry.jobs() == [] and registry.root("sales").retired == ()  # type: ignore[union-attr]
    assert registry.manifest("sales").ledgers == ((0, committed),)  # type: ignore[union-attr]
    assert store.ledger_exists(committed) and not any(store.ledger_exists(ledger_id) for ledger_id in garbage)
    shards = store.zk.get_children(registry.shards_path("sales"))
    assert sorted(shards) == sorted(r.shard_id for r in registry.root("sales").shards)  # type: ignore[union-attr]


@pytest.mark.parametrize("action", ["kill", "connection-loss"])
@pytest.mark.parametrize("point", RECOVERY_FAULT_POINTS)
def test_recoverjobs_killed_or_failing_after_each_step_leaves_what_the_audit_reports_and_its_rerun_finishes(
    zk_root: Any, store: ZkMetadataStore, capsys: pytest.CaptureFixture[str], point: str, action: str
) -> None:
    """``recoverjobs`` itself SIGKILLed, or losing its ZooKeeper connection, between its steps: the committed rows
    stay, a failure exits 1, every ledger it had yet to delete is reported by the audit, and running it again
    finishes the work."""
    uri = zk_root.metadata_service_uri
    registry = DatasetRegistry(store.zk, store.root)
    committed, garbage = work_for_recoverjobs(store, registry)

    env = dict(os.environ, **{ENV_FAULTS: f"{point}={action}"})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    first = subprocess.run(
        [sys.executable, "-m", "bkspark.cli", "shell", "--metadata-service-uri", uri, "recoverjobs"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120, start_new_session=True,
    )
    expected = -signal.SIGKILL if action == "kill" else 1
    assert first.returncode == expected, (first.returncode, first.stdout, first.stderr[-3000:])
    if action != "kill":
        assert len(first.stderr.strip().splitlines()) == 1 and "Traceback" not in first.stderr, first.stderr

    assert registry.manifest("sales").ledgers == ((0, committed),)  # type: ignore[union-attr]
    assert store.ledger_exists(committed)
    assert registry.jobs() != [], "the kill came after the last step"
    left = {ledger_id for ledger_id in garbage if store.ledger_exists(ledger_id)}
    found, unreadable = audit(uri)
    assert left <= set(found) and committed not in found and unreadable == []

    code, out, err = shell(capsys, uri, "recoverjobs")
    assert code == 0 and err == "", (out, err)
    assert_recovered(store, registry, committed, garbage)
    assert audit(uri)[0] == {}


def test_two_recoverjobs_at_once_both_succeed_and_finish_the_work_once(zk_root: Any, store: ZkMetadataStore) -> None:
    """Two operators (or an operator and a cron job) run ``recoverjobs`` at the same moment: each step is
    idempotent, so both succeed, the committed ledger stays, and everything else goes."""
    from bkspark.client import BookKeeper
    from bkspark.datasource.cleanup import recover_jobs

    uri = zk_root.metadata_service_uri
    registry = DatasetRegistry(store.zk, store.root)
    for _round in range(3):
        committed, garbage = work_for_recoverjobs(store, registry)
        start = threading.Barrier(2)

        def recover() -> list[tuple[str, str]]:
            with BookKeeper(uri) as bk:
                start.wait()
                return recover_jobs(bk, DatasetRegistry(bk.store.zk, bk.store.root))

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            runs = [pool.submit(recover) for _ in range(2)]
            for run in runs:
                run.result(timeout=120)  # either one's error fails the test
        assert_recovered(store, registry, committed, garbage)
        store.zk.delete(registry.dataset_path("sales"), recursive=True)


def test_a_dataset_leftovers_detail_is_its_jobs_parent_when_known_else_0(
    zk_root: Any, store: ZkMetadataStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/context-and-audit.md, DATASET_LEFTOVER: "the detail is the job's parent ledger id when known, else 0";
    docs/shell.md, listorphaned: a parent in another scope is printed by its qualified name."""
    uri = zk_root.metadata_service_uri
    registry = DatasetRegistry(store.zk, store.root)
    without_parent = committed_job_with_a_leftover(store, registry, "job-a", "sales")
    with_parent = new_ledger(store, ledger({}))
    scoped_parent = new_ledger(store, ledger({}))
    for job_id, lid, parent in (("job-b", with_parent, (0, 4242)), ("job-c", scoped_parent, (7, 99))):
        registry.begin_job(job_id, JobRecord(JobState.WRITING, "sales", parent=parent))
        registry.register(job_id, 0, lid)
        record = registry.job(job_id)
        assert record is not None
        store.zk.set(
            registry.job_path(job_id), JobRecord(JobState.COMMITTED, "sales", parent=parent).to_bytes(),
            version=record.version,
        )

    found, unreadable = audit(uri)
    assert unreadable == [] and {lid: found.get(lid) for lid in (without_parent, with_parent, scoped_parent)} == {
        lid: {OrphanReason.DATASET_LEFTOVER} for lid in (without_parent, with_parent, scoped_parent)
    }
    code, out, err = shell(capsys, uri, "listorphaned", "--printorphanreason")
    assert code == 0 and err == ""
    assert sorted(out.splitlines()) == sorted([
        f"{without_parent} DATASET_LEFTOVER 0",
        f"{with_parent} DATASET_LEFTOVER 4242",
        f"{scoped_parent} DATASET_LEFTOVER 00000000000000070000000000000063",
    ])


def test_recoverjobs_stale_after_inf_never_aborts_a_writing_job(
    zk_root: Any, store: ZkMetadataStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/shell.md, recoverjobs: `--stale-after inf` never aborts a job still writing, however old; a finite age
    (0 here) aborts it and says so in one line."""
    uri = zk_root.metadata_service_uri
    registry = DatasetRegistry(store.zk, store.root)
    registry.begin_job("job-w", JobRecord(JobState.WRITING, "sales"))
    code, out, err = shell(capsys, uri, "recoverjobs", "--stale-after", "inf")
    assert (code, out, err) == (0, "", "")
    record = registry.job("job-w")
    assert record is not None and record.state is JobState.WRITING
    code, out, err = shell(capsys, uri, "recoverjobs", "--stale-after", "0")
    assert code == 0 and out.splitlines() == ["job-w stale writing job aborted"] and err == ""
    assert registry.job("job-w") is None
