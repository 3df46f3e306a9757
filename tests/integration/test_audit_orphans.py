"""The orphan audit against a real ZooKeeper: both orphan kinds, live config, leader election with kill -9.

Ledger metadata is written straight into ZooKeeper here (the audit reads metadata only, never bookies), so
these tests need no bookie; tests/integration/test_context_java.py covers ledgers written through bookies.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from bkspark import cli
from bkspark.audit import (
    Auditor,
    AuditConfig,
    LeadershipLostError,
    OrphanReason,
    list_orphans,
    read_status,
    write_config,
)
from bkspark.audit.records import CONFIG_KEYS, election_path, orphans_path, put_znode
from bkspark.context import CLOSE_KEY, CREATE_KEY, LedgerCloseContext, LedgerCreateContext
from bkspark.metadata.store import ZkMetadataStore
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bkspark.protocol.ledger_name import qualified_name
from tests.harness.process import kill_group
from tests.harness.zookeeper import expire_session

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def ledger(custom: dict[str, bytes], closed: bool = True) -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=1, write_quorum_size=1, ack_quorum_size=1,
        state=LedgerState.CLOSED if closed else LedgerState.OPEN,
        last_entry_id=3 if closed else -1, length=40 if closed else 0,
        ensembles={0: ("127.0.0.1:3181",)}, custom_metadata=custom,
    )


def close_ctx(delete_after: datetime) -> dict[str, bytes]:
    return {CLOSE_KEY: LedgerCloseContext.builder().because_no_more_data().expect_delete_after(delete_after).build().to_bytes()}


def child_ctx(parent: int, scope: int = 0) -> dict[str, bytes]:
    return LedgerCreateContext.builder().created_by("E", "S", "svc", "i").child_of_ledger(parent, scope).build().to_custom_metadata()


@pytest.fixture
def store(zk_root):  # type: ignore[no-untyped-def]
    with ZkMetadataStore(zk_root.metadata_service_uri) as s:
        yield s


def new_ledger(store: ZkMetadataStore, md: LedgerMetadata, scope_id: int = 0, ledger_id: int | None = None) -> int:
    lid = store.generate_ledger_id() if ledger_id is None else ledger_id
    store.create_ledger_metadata(lid, md, scope_id)
    return lid


def shell(capsys: pytest.CaptureFixture[str], uri: str, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["shell", "--metadata-service-uri", uri, *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_both_orphan_kinds_are_listed_with_their_reason(zk_root, store, capsys) -> None:
    uri = zk_root.metadata_service_uri
    past = datetime.now(timezone.utc) - timedelta(hours=2)
    future = datetime.now(timezone.utc) + timedelta(hours=2)
    parent = new_ledger(store, ledger({}))
    overdue = new_ledger(store, ledger(close_ctx(past)))
    not_yet = new_ledger(store, ledger(close_ctx(future)))
    in_grace = new_ledger(store, ledger(close_ctx(datetime.now(timezone.utc) - timedelta(minutes=5))))
    good_child = new_ledger(store, ledger(child_ctx(parent), closed=False))
    broken_child = new_ledger(store, ledger(child_ctx(999_999), closed=False))
    scoped_orphan = new_ledger(store, ledger(child_ctx(parent, scope=77)), scope_id=-5, ledger_id=12)
    plain = new_ledger(store, ledger({"app": b"x"}))

    auditor = Auditor(uri, grace_period=3600, audit_period=3600)
    try:
        result = auditor.audit_once()
    finally:
        auditor.stop()
    assert result.scanned == 8 and result.unreadable == []

    found = {(r.ledger_id, r.scope_id): (r.reason, r.detail) for r in list_orphans(store.zk, store.root)}
    assert found == {
        (overdue, 0): (OrphanReason.DELETE_OVERDUE, int(past.timestamp())),
        (broken_child, 0): (OrphanReason.BROKEN_PARENT_REF, 999_999),
        (12, -5): (OrphanReason.BROKEN_PARENT_REF, parent),
    }
    assert {not_yet, in_grace, good_child, plain}.isdisjoint({lid for lid, _ in found})

    code, out, err = shell(capsys, uri, "listorphaned", "--printorphanreason")
    assert code == 0 and err == ""
    assert out.splitlines() == [
        f"{overdue} DELETE_OVERDUE {int(past.timestamp())}",
        f"{broken_child} BROKEN_PARENT_REF 999999",
        f"{qualified_name(-5, 12)} BROKEN_PARENT_REF {qualified_name(77, parent)}",
    ]
    code, out, _ = shell(capsys, uri, "listorphaned")
    assert out.splitlines() == [str(overdue), str(broken_child), qualified_name(-5, 12)]
    code, out, _ = shell(capsys, uri, "listorphaned", "--ledger-scope-id", "-5", "--json")
    import json

    assert [(r["ledgerId"], r["reason"]) for r in json.loads(out)] == [(12, "BROKEN_PARENT_REF")]

    first_seen = {r.ledger_id: r.first_seen_ms for r in list_orphans(store.zk, store.root)}
    assert first_seen[broken_child] > 0

    # The owner deletes the overdue ledger; the parent's loss orphans its child: the next pass says so.
    time.sleep(0.01)
    store.delete_ledger_metadata(overdue)
    store.delete_ledger_metadata(parent)
    auditor = Auditor(uri, grace_period=3600)
    try:
        auditor.audit_once()
    finally:
        auditor.stop()
    found = {(r.ledger_id, r.reason) for r in list_orphans(store.zk, store.root)}
    assert found == {
        (broken_child, OrphanReason.BROKEN_PARENT_REF),
        (good_child, OrphanReason.BROKEN_PARENT_REF),
        (12, OrphanReason.BROKEN_PARENT_REF),
    }
    after = {r.ledger_id: r.first_seen_ms for r in list_orphans(store.zk, store.root)}
    assert after[broken_child] == first_seen[broken_child]  # unchanged finding: record left alone
    assert after[good_child] > first_seen[broken_child]  # new finding


def test_malformed_context_is_skipped_and_reported_not_fatal(zk_root, store, capsys) -> None:
    uri = zk_root.metadata_service_uri
    bad = new_ledger(store, ledger({**child_ctx(5), CLOSE_KEY: b"{not json"}))
    bad_create = new_ledger(store, ledger({CREATE_KEY: b'{"v": 1, "dataSet": 42}'}))
    overdue = new_ledger(store, ledger(close_ctx(datetime(2001, 1, 1, tzinfo=timezone.utc))))
    with Auditor(uri, grace_period=0) as auditor:
        result = auditor.audit_once()
    assert [label for label, _ in result.unreadable] == [str(bad), str(bad_create)]
    assert [r.ledger_id for r in list_orphans(store.zk, store.root)] == [overdue]
    status = read_status(store.zk, store.root)
    assert status is not None and status.unreadable == 2 and status.orphans == 1

    for command, lid in (("predictlifespan", bad), ("showowner", bad_create), ("predictlifespan", bad_create)):
        code, out, err = shell(capsys, uri, command, str(lid))
        assert code == 1 and out == "" and len(err.strip().splitlines()) == 1
        assert f"ledger {lid} carries a malformed context" in err and "Traceback" not in err
    # showowner needs only the create context, which is fine on `bad`.
    code, out, err = shell(capsys, uri, "showowner", str(bad))
    assert code == 0 and '"enterprise" : "E"' in out
    # ledgermetadata still shows the ledger, with the context problem spelled out.
    code, out, err = shell(capsys, uri, "ledgermetadata", "-l", str(bad), "--json")
    assert code == 0 and '"contextError"' in out


def test_malformed_orphan_record_is_one_line(zk_root, store, capsys) -> None:
    store.zk.ensure_path(orphans_path(store.root))
    store.zk.create(orphans_path(store.root) + "/" + qualified_name(0, 5), b"garbage")
    code, out, err = shell(capsys, zk_root.metadata_service_uri, "listorphaned")
    assert code == 1 and "malformed orphan record" in err and len(err.strip().splitlines()) == 1


def wait_for(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_config_changes_apply_while_the_auditor_runs(zk_root, store, capsys) -> None:
    uri = zk_root.metadata_service_uri
    ten_min_ago = datetime.now(timezone.utc) - timedelta(minutes=10)
    lid = new_ledger(store, ledger(close_ctx(ten_min_ago)))
    with Auditor(uri, audit_period=0.3, grace_period=3600, identifier="only") as auditor:
        wait_for(lambda: auditor.passes >= 2, 20, "two passes")
        assert list_orphans(store.zk, store.root) == []
        code, out, err = shell(capsys, uri, "auditconfig", "--grace-period", "60")
        assert code == 0 and "gracePeriodSeconds: 60" in out
        wait_for(lambda: auditor.config.grace_period == 60, 10, "the config watch")
        records = wait_for(lambda: list_orphans(store.zk, store.root), 20, "the overdue ledger")
        assert [(r.ledger_id, r.reason) for r in records] == [(lid, OrphanReason.DELETE_OVERDUE)]
        # A long period applies at once too: no pass runs for an hour after the change.
        write_config(store.zk, store.root, AuditConfig(audit_period=3600, grace_period=60))
        wait_for(lambda: auditor.config.audit_period == 3600, 10, "the period change")
        passes = auditor.passes
        time.sleep(1.5)
        assert auditor.passes == passes
        # Someone stores a malformed config: the auditor keeps what it has.
        store.zk.set(f"{store.root}/bkspark/audit/config", b"{oops")
        time.sleep(0.5)
        assert auditor.config == AuditConfig(audit_period=3600, grace_period=60)
    code, out, _ = shell(capsys, uri, "auditstatus", "--json")
    assert code == 0 and '"auditor":"only"' in out.replace(" ", "")


def start_auditor(uri: str, name: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "bkspark.cli", "auditor", "--metadata-service-uri", uri, "--id", name,
         "--audit-period", "0.5", "--grace-period", "0", "--zk-timeout", "4"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=log.open("wb"), start_new_session=True,
    )


def test_two_auditors_one_leads_the_other_takes_over_after_kill_9(zk_root, store, tmp_path, capsys) -> None:
    uri = zk_root.metadata_service_uri
    new_ledger(store, ledger(close_ctx(datetime(2020, 1, 1, tzinfo=timezone.utc))))
    procs = {
        "auditor-a": start_auditor(uri, "auditor-a", tmp_path / "a.log"),
    }
    try:
        wait_for(lambda: (s := read_status(store.zk, store.root)) and s.auditor == "auditor-a", 30, "a to audit")
        procs["auditor-b"] = start_auditor(uri, "auditor-b", tmp_path / "b.log")
        wait_for(lambda: len(Auditor_contenders(store)) == 2, 30, "b to join the election")
        code, out, _ = shell(capsys, uri, "auditstatus")
        assert out.splitlines()[:2] == ["leader: auditor-a", "standby: auditor-b"]
        # Only the leader audits: b has written no status while a lives.
        time.sleep(1.5)
        status = read_status(store.zk, store.root)
        assert status is not None and status.auditor == "auditor-a"

        procs["auditor-a"].send_signal(signal.SIGKILL)
        procs["auditor-a"].wait(10)
        status = wait_for(
            lambda: (s := read_status(store.zk, store.root)) and s.auditor == "auditor-b" and s, 40, "b to take over"
        )
        assert status.orphans == 1
        assert [r.reason for r in list_orphans(store.zk, store.root)] == [OrphanReason.DELETE_OVERDUE]
        assert Auditor_contenders(store) == ["auditor-b"]

        # SIGTERM: a clean exit that leaves the election at once.
        procs["auditor-b"].send_signal(signal.SIGTERM)
        assert procs["auditor-b"].wait(20) == 0
        assert Auditor_contenders(store) == []
        assert "Traceback" not in (tmp_path / "b.log").read_text()
    finally:
        for proc in procs.values():
            kill_group(proc)


def test_sigint_makes_the_auditor_leave_the_election_and_exit_0(zk_root, store, tmp_path) -> None:
    """docs/shell.md, bkspark auditor: SIGINT (Ctrl-C), like SIGTERM, leaves the election and exits 0."""
    proc = start_auditor(zk_root.metadata_service_uri, "auditor-c", tmp_path / "c.log")
    try:
        wait_for(lambda: Auditor_contenders(store) == ["auditor-c"], 30, "c to join the election")
        wait_for(lambda: (s := read_status(store.zk, store.root)) and s.auditor == "auditor-c", 30, "c to audit")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
        assert Auditor_contenders(store) == []
        assert "Traceback" not in (tmp_path / "c.log").read_text()
    finally:
        kill_group(proc)


def Auditor_contenders(store: ZkMetadataStore) -> list[str]:  # noqa: N802 - reads like the recipe it wraps
    from kazoo.recipe.election import Election

    return list(Election(store.zk, f"{store.root}/bkspark/audit/election").contenders())


def orphan_versions(store: ZkMetadataStore) -> dict[str, int]:
    """Each orphan record's name and the zxid of its last write."""
    base = orphans_path(store.root)
    return {name: store.zk.exists(f"{base}/{name}").mzxid for name in store.zk.get_children(base)}


def test_a_leader_that_loses_its_session_mid_pass_writes_nothing_over_the_new_leader(zk_root, store) -> None:
    """The leader's pass has listed the ledgers and is held in its progress callback when its ZooKeeper session
    expires: the standby leads and records what it finds, an orphan created after the old pass listed the ledgers
    included, and the old leader joins the election again in a new session, behind it. The old pass then goes on
    to record what it found: its first write (the delete of that orphan's record, which it never saw) is refused
    with LeadershipLostError, and no orphan record nor the status changes."""
    uri = zk_root.metadata_service_uri
    seen = new_ledger(store, ledger(child_ctx(515151)))
    old = Auditor(uri, audit_period=3600, identifier="old-leader").start()
    new = Auditor(uri, audit_period=3600, identifier="new-leader")
    listed, resume = threading.Event(), threading.Event()
    refused: list[BaseException] = []

    def held_at_start(done: int, total: int) -> None:
        if done == 0:
            listed.set()
            assert resume.wait(60)

    def old_pass() -> None:
        try:
            old.audit_once(progress=held_at_start)
        except LeadershipLostError as exc:
            refused.append(exc)

    try:
        wait_for(lambda: old.is_leader and old.passes == 1, 20, "the first leader's first pass")
        assert [r.ledger_id for r in list_orphans(store.zk, store.root)] == [seen]
        new.start()
        wait_for(lambda: Auditor_contenders(store) == ["old-leader", "new-leader"], 20, "the standby")
        passing = threading.Thread(target=old_pass, daemon=True)
        passing.start()
        assert listed.wait(20)
        unseen = new_ledger(store, ledger(child_ctx(626262)))
        expire_session(zk_root.connect_string, old.zk.client_id)
        status = wait_for(
            lambda: (s := read_status(store.zk, store.root)) and s.auditor == "new-leader" and s, 30, "the new leader"
        )
        assert sorted(r.ledger_id for r in list_orphans(store.zk, store.root)) == sorted([seen, unseen])
        # In a new session, the old leader stands by with a new election znode; its pass holds the old one's path.
        wait_for(lambda: Auditor_contenders(store) == ["new-leader", "old-leader"], 20, "the old leader to stand by")
        assert new.is_leader and not old.is_leader
        recorded = orphan_versions(store)
        resume.set()
        passing.join(30)
        assert not passing.is_alive() and len(refused) == 1
        assert orphan_versions(store) == recorded and read_status(store.zk, store.root) == status
    finally:
        resume.set()
        old.stop()
        new.stop()


def test_a_leader_whose_election_znode_is_deleted_stops_leading_and_stands_by(zk_root, store) -> None:
    """The leader's election znode is deleted while its session lives (an operator, a bug): the standby leads, and
    the old leader's next write is refused instead of going on over the new leader's results every period; it
    stops leading and joins the election again, behind the new leader, which alone writes the status from then on."""
    uri = zk_root.metadata_service_uri
    new_ledger(store, ledger(child_ctx(737373)))
    first = Auditor(uri, audit_period=0.5, identifier="first").start()
    second = Auditor(uri, audit_period=0.5, identifier="second")
    try:
        wait_for(lambda: first.is_leader and first.passes >= 1, 20, "the first leader's first pass")
        second.start()
        wait_for(lambda: Auditor_contenders(store) == ["first", "second"], 20, "the standby")
        election = election_path(store.root)
        [node] = [n for n in store.zk.get_children(election) if store.zk.get(f"{election}/{n}")[0] == b"first"]
        store.zk.delete(f"{election}/{node}")
        wait_for(lambda: Auditor_contenders(store) == ["second", "first"], 20, "the first leader to stand by")
        assert second.is_leader and not first.is_leader
        status = read_status(store.zk, store.root)
        time.sleep(1.5)  # three periods
        after = read_status(store.zk, store.root)
        assert status is not None and after is not None
        assert (status.auditor, after.auditor) == ("second", "second") and after.passes > status.passes
    finally:
        first.stop()
        second.stop()


class RivalBeforeSecondWrite:
    """A kazoo client whose second write (a set, create or delete, or a multi's commit) lets a rival act first:
    another writer's create or delete landing between put_znode's two tries."""

    def __init__(self, zk: Any, rival: Callable[[], object]) -> None:
        self._zk, self._rival, self.writes = zk, rival, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._zk, name)

    def _count(self) -> None:
        self.writes += 1
        if self.writes == 2:
            self._rival()

    def set(self, *args: Any, **kwargs: Any) -> Any:
        self._count()
        return self._zk.set(*args, **kwargs)

    def create(self, *args: Any, **kwargs: Any) -> Any:
        self._count()
        return self._zk.create(*args, **kwargs)

    def transaction(self) -> Any:
        tx = self._zk.transaction()
        commit = tx.commit

        def racing_commit() -> Any:
            self._count()
            return commit()

        tx.commit = racing_commit
        return tx


@pytest.mark.parametrize("fenced", [False, True], ids=["unfenced", "fenced"])
@pytest.mark.parametrize("exists", [True, False], ids=["set-first", "create-first"])
def test_a_status_or_record_write_outlasts_a_rival_create_or_delete_between_its_tries(store, exists, fenced) -> None:
    """A pass's set-or-create raced another writer (CI: a test's own pass beside its auditor's leader): set found
    no node, the rival created it, and create then failed NodeExists, failing the pass.  Now each NoNode or
    NodeExists turns to the other op, and the write lands."""
    path = f"{store.root}/race/znode"
    fence = store.zk.create(f"{store.root}/race-fence", ephemeral=True, makepath=True) if fenced else None
    if exists:  # set first: the znode is missing, and the rival creates it before our create
        rival = lambda: store.zk.create(path, b"rival", makepath=True)  # noqa: E731
    else:  # create first: the znode is there, and the rival deletes it before our set
        store.zk.create(path, b"old", makepath=True)
        rival = lambda: store.zk.delete(path)  # noqa: E731
    racing = RivalBeforeSecondWrite(store.zk, rival)
    put_znode(racing, path, b"ours", exists=exists, fence=fence)  # type: ignore[arg-type]
    assert racing.writes == 3 and store.zk.get(path)[0] == b"ours"


def test_a_pass_cut_off_between_two_writes_is_completed_by_the_next_leaders_first_pass(
    zk_root, store, monkeypatch
) -> None:
    """Between two writes of a pass the leader's election znode goes: the records it wrote stay (each write is
    whole), the rest of the pass is refused (no more records, no deletion of a stale one, no status), and the
    next leader's first pass, here the same auditor back in the election, makes the records exactly what it
    finds and writes the status."""
    audit_scan = sys.modules["bkspark.audit.scan"]  # the package's `scan` is the module's function
    uri = zk_root.metadata_service_uri
    stale = new_ledger(store, ledger(child_ctx(414141)))
    tool = Auditor(uri, identifier="tool")
    try:
        tool.audit_once()  # a tool's pass records it
    finally:
        tool.stop()
    store.delete_ledger_metadata(stale)  # no longer an orphan: the next complete pass removes its record
    orphans = sorted(new_ledger(store, ledger(child_ctx(424242 + i))) for i in range(3))
    real_put = audit_scan.put_znode
    at_cut: list[list[int]] = []

    refused: list[tuple[list[int], Any]] = []

    def put_then_lose_leadership(zk: Any, path: str, data: bytes, **kwargs: Any) -> None:
        if at_cut:  # every later write: as it is; the cut pass's next one is refused, and changes nothing
            try:
                real_put(zk, path, data, **kwargs)
            except LeadershipLostError:
                recorded = sorted(r.ledger_id for r in list_orphans(store.zk, store.root))
                refused.append((recorded, read_status(store.zk, store.root)))
                raise
            return
        real_put(zk, path, data, **kwargs)  # the first write lands; then the election znode goes
        at_cut.append(sorted(r.ledger_id for r in list_orphans(store.zk, store.root)))
        store.zk.delete(kwargs["fence"])

    monkeypatch.setattr(audit_scan, "put_znode", put_then_lose_leadership)
    auditor = Auditor(uri, audit_period=3600, identifier="cut").start()
    try:
        status = wait_for(
            lambda: (s := read_status(store.zk, store.root)) and s.auditor == "cut" and s, 30, "a complete pass"
        )
        assert len(at_cut) == 1 and at_cut[0] == sorted([stale, orphans[0]])  # one record written, then the cut
        assert len(refused) == 1 and refused[0][0] == at_cut[0] and refused[0][1].auditor == "tool"
        assert status.auditor == "cut" and status.passes == 1 and status.orphans == 3
        assert sorted(r.ledger_id for r in list_orphans(store.zk, store.root)) == orphans  # stale one removed
    finally:
        auditor.stop()


def test_embedded_auditor_on_a_shared_session_leaves_it_running(zk_root, store) -> None:
    """How a bookie hosts the auditor: its own kazoo session, start() and stop()."""
    zk = zk_root.zk_client
    lid = new_ledger(store, ledger(child_ctx(424242)))
    auditor = Auditor(zk_root.metadata_service_uri, zk=zk, audit_period=60, identifier="in-bookie").start()
    try:
        wait_for(lambda: auditor.is_leader and auditor.passes == 1, 20, "the embedded auditor's first pass")
        assert auditor.contenders() == ["in-bookie"]
        assert [(r.ledger_id, r.detail) for r in list_orphans(zk, store.root)] == [(lid, 424242)]
    finally:
        auditor.stop()
    assert not auditor.is_leader and Auditor_contenders(store) == []
    assert zk.connected  # the bookie's session is still its own


@pytest.mark.fault
def test_the_orphan_list_is_read_again_after_a_lost_connection(zk_root, store) -> None:  # type: ignore[no-untyped-def]
    # The list is read through a proxy that swallows ZooKeeper's answers until it resets the connection: the
    # getChildren and the multi reads are sent again once kazoo has reconnected, and every orphan is listed.
    import threading

    from kazoo.client import KazooClient

    from tests.harness.proxy import Direction, FaultProxy

    past = datetime.now(timezone.utc) - timedelta(hours=2)
    overdue = sorted(new_ledger(store, ledger(close_ctx(past))) for _ in range(40))
    auditor = Auditor(zk_root.metadata_service_uri, grace_period=3600, audit_period=3600)
    try:
        auditor.audit_once()
    finally:
        auditor.stop()
    expected = list_orphans(store.zk, store.root)
    assert [r.ledger_id for r in expected] == overdue
    host, port = zk_root.connect_string.split(",")[0].rsplit(":", 1)
    with FaultProxy((host, int(port)), name="zk") as proxy:
        client = KazooClient(hosts=f"127.0.0.1:{proxy.port}", timeout=10.0)
        client.start(15)
        try:
            accepted = proxy.connections_accepted
            proxy.blackhole(Direction.DOWN)
            cut = threading.Timer(0.5, lambda: (proxy.reset(), proxy.restore()))
            cut.start()
            assert list_orphans(client, store.root) == expected
            cut.join()
            assert proxy.connections_accepted > accepted  # the answers did cross a lost connection
        finally:
            client.stop()
            client.close()


def test_parent_grace_judges_a_child_by_its_ctime_else_its_znodes_creation_time(zk_root, store) -> None:
    """With parentGracePeriodSeconds > 0 a child's age is its metadata ctime, or, when none was stored (Java's
    default), its znode's creation time: a child created just now without ctime is spared, an old one is not."""
    uri = zk_root.metadata_service_uri
    two_hours_ago = int(time.time() * 1000) - 2 * 3600 * 1000
    old = new_ledger(store, LedgerMetadata(
        ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, state=LedgerState.OPEN, last_entry_id=-1, length=0,
        ensembles={0: ("127.0.0.1:3181",)}, custom_metadata=child_ctx(999_991), ctime=two_hours_ago, store_ctime=True,
    ))
    young = new_ledger(store, ledger(child_ctx(999_992), closed=False))  # no ctime in the blob
    assert store.read_ledger_metadata(young).metadata.ctime > two_hours_ago  # the znode's stat.ctime

    for parent_grace, expected in ((3600, {old}), (0, {old, young})):
        auditor = Auditor(uri, grace_period=3600, parent_grace_period=parent_grace, audit_period=3600)
        try:
            auditor.audit_once()
        finally:
            auditor.stop()
        found = {r.ledger_id for r in list_orphans(store.zk, store.root) if r.reason is OrphanReason.BROKEN_PARENT_REF}
        assert found == expected, parent_grace


def test_auditconfig_sets_only_the_given_values_and_leaves_the_rest_to_each_auditor(zk_root, store, capsys) -> None:
    """`auditconfig --grace-period S` stores that key only: a period stored before stays, a key never stored
    stays unset, and an auditor uses its own flag for it."""
    uri = zk_root.metadata_service_uri
    code, out, _ = shell(capsys, uri, "auditconfig", "--json")
    assert code == 0 and json.loads(out) == dict.fromkeys(CONFIG_KEYS)
    assert shell(capsys, uri, "auditconfig", "--audit-period", "120")[0] == 0
    code, out, _ = shell(capsys, uri, "auditconfig", "--grace-period", "60")
    assert code == 0 and out.splitlines() == [
        "auditPeriodSeconds: 120", "gracePeriodSeconds: 60",
        "parentGracePeriodSeconds: unset (each auditor uses its own flag)",
    ]
    assert json.loads(store.zk.get(f"{store.root}/bkspark/audit/config")[0]) == {
        "v": 1, "auditPeriodSeconds": 120.0, "gracePeriodSeconds": 60.0,
    }
    with Auditor(uri, audit_period=3600, grace_period=3600, parent_grace_period=42, identifier="own-flags") as auditor:
        wait_for(lambda: auditor.config.grace_period == 60, 10, "the stored config")
        assert auditor.config == AuditConfig(audit_period=120, grace_period=60, parent_grace_period=42)


def test_each_pass_makes_the_records_what_it_found_and_leaves_unchanged_ones_alone(zk_root, store) -> None:
    """docs/context-and-audit.md, ZooKeeper layout: each pass creates new orphans, rewrites changed ones, removes
    cleared ones (a deleted ledger, a parent back) and leaves unchanged ones alone (firstSeenMs and the znode
    untouched)."""
    uri = zk_root.metadata_service_uri
    past = datetime.now(timezone.utc) - timedelta(days=2)
    parent_id = store.generate_ledger_id()
    child = new_ledger(store, ledger(child_ctx(parent_id), closed=False))
    overdue = new_ledger(store, ledger(close_ctx(past)))
    unchanged = new_ledger(store, ledger(close_ctx(past)))
    deleted = new_ledger(store, ledger(close_ctx(past)))

    def audit_pass() -> dict[int, Any]:
        auditor = Auditor(uri, grace_period=0, audit_period=3600)
        try:
            auditor.audit_once()
        finally:
            auditor.stop()
        return {r.ledger_id: r for r in list_orphans(store.zk, store.root)}

    before = audit_pass()
    assert set(before) == {child, overdue, unchanged, deleted}
    versions = orphan_versions(store)

    time.sleep(0.01)
    store.create_ledger_metadata(parent_id, ledger({}))  # the parent is back
    store.delete_ledger_metadata(deleted)
    later = past + timedelta(hours=1)
    current = store.read_ledger_metadata(overdue)
    custom = dict(current.metadata.custom_metadata, **close_ctx(later))
    store.write_ledger_metadata(overdue, current.metadata.with_custom_metadata(custom), current.version)
    new = new_ledger(store, ledger(close_ctx(past)))

    after = audit_pass()
    assert set(after) == {overdue, unchanged, new}
    assert after[overdue].detail == int(later.timestamp()) != before[overdue].detail  # rewritten
    assert after[unchanged] == before[unchanged]
    now_versions = orphan_versions(store)
    name = qualified_name(0, unchanged)
    assert now_versions[name] == versions[name]  # not written again
    assert now_versions[qualified_name(0, overdue)] != versions[qualified_name(0, overdue)]
    assert after[new].first_seen_ms > before[unchanged].first_seen_ms
    # The status znode: the documented keys of the last pass.
    status = json.loads(store.zk.get(f"{store.root}/bkspark/audit/status")[0])
    assert set(status) == {"auditor", "passStartedMs", "passFinishedMs", "ledgersScanned", "orphans", "unreadable",
                           "passes"}
    assert (status["ledgersScanned"], status["orphans"], status["unreadable"]) == (5, 3, 0)
    assert status["passStartedMs"] <= status["passFinishedMs"]
