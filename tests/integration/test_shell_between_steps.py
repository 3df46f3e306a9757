"""Shell commands that create and delete ledgers, failing between their steps, against real ZooKeeper and bookies.

A bookie killed with SIGKILL stays registered until its ZooKeeper session expires (``zkTimeout``): a client
still places ledgers on it, and its first write to it fails. That makes "created, then failed" certain.
"""

from __future__ import annotations

import base64
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bkspark import cli
from bkspark.client import BookKeeper
from bkspark.context import LedgerCreateContext, create_ledger_with_context, read_context
from bkspark.errors import BKError
from bkspark.metadata.store import ZkMetadataStore
from bkspark.shell.common import ENV_URI
from bkspark.protocol.layout import LedgerLayout
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from tests.harness.python_bookie import PythonBookieCluster

pytestmark = pytest.mark.integration

#: The dead bookie's registration outlives the test's steps by far.
BOOKIE_SESSION_MS = 60_000
#: A create context as an application writes one (owner and data set).
CREATE = LedgerCreateContext.builder().created_by("E", "S", "svc", "i").part_of_data_set("events").build()


def test_simpletest_that_fails_after_creating_its_ledger_deletes_it(
    zk_root: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``simpletest`` creates a ledger, writes, reads and deletes it; a write that fails must not leave the ledger
    behind (nothing names it, and no context says when it may go: the audit could never report it)."""
    uri = zk_root.metadata_service_uri
    with PythonBookieCluster(uri, tmp_path, bookies=1, conf_overrides={"zkTimeout": BOOKIE_SESSION_MS}) as cluster:
        cluster.start_all()
        cluster.kill(0)
        assert cluster.registered() == cluster.bookie_ids
        capsys.readouterr()
        code = cli.main(["shell", "--metadata-service-uri", uri, "simpletest", "-e", "1", "-w", "1", "-a", "1", "-n", "10"])
        out, err = capsys.readouterr()
        assert cluster.registered() == cluster.bookie_ids, "the bookie's registration expired meanwhile"
        assert code == 1 and out.startswith("Ledger ID: "), (out, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        with ZkMetadataStore(uri) as store:
            assert list(store.list_ledgers(0)) == []


def test_metaformat_never_leaves_the_cluster_without_its_layout(
    zk_root: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Between deleting and re-creating ``LAYOUT`` a crash would leave a cluster whose next ``metaformat`` (with
    a URI that names no scheme) writes the default layout, and a Java client starting meanwhile would write its
    own: the layout is rewritten in place, never absent, and keeps the cluster's scheme."""
    from kazoo.protocol.states import EventType

    zk = zk_root.zk_client
    layout_path = f"{zk_root.path}/LAYOUT"
    flat = LedgerLayout.for_scheme("flat").serialize()
    zk.set(layout_path, flat)
    zk.create(f"{zk_root.path}/L0000000001", b"", makepath=True)
    events: list[str] = []
    zk.DataWatch(layout_path, lambda data, stat, event=None: events.append(event.type) if event else None)

    uri = f"zk://{zk_root.connect_string}{zk_root.path}"
    capsys.readouterr()
    assert cli.main(["shell", "--metadata-service-uri", uri, "metaformat", "-n", "-f"]) == 0, capsys.readouterr()

    assert zk.get(layout_path)[0] == flat and zk.exists(f"{zk_root.path}/L0000000001") is None
    deadline = time.monotonic() + 10
    while not events and time.monotonic() < deadline:  # the watch's events arrive on kazoo's thread
        time.sleep(0.05)
    assert events and EventType.DELETED not in events, events


def test_readledger_force_recovery_under_a_live_writer_keeps_acknowledged_entries_and_the_context(
    zk_root: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``readledger -r`` fences and closes a ledger whose writer still runs (the concurrent writer of the
    recovery): every acknowledged entry stays readable, the writer's next append fails instead of being lost
    silently, the BP-44 create context survives the close, and a second ``-r`` changes nothing."""
    uri = zk_root.metadata_service_uri
    with PythonBookieCluster(uri, tmp_path, bookies=1) as cluster, BookKeeper(uri) as bk:
        cluster.start_all()
        writer = create_ledger_with_context(bk, CREATE, ensemble_size=1, write_quorum_size=1, ack_quorum_size=1)
        acknowledged = [f"entry-{i}".encode() for i in range(5)]
        for payload in acknowledged:
            writer.append(payload)
        for _ in range(2):
            capsys.readouterr()
            code = cli.main(["shell", "--metadata-service-uri", uri, "--json", "readledger", str(writer.ledger_id), "-r", "-m"])
            out, err = capsys.readouterr()
            assert code == 0, err
            doc = json.loads(out)
            assert [base64.b64decode(e["payload"]) for e in doc["entries"]] == acknowledged
            assert doc["lastAddConfirmed"] == len(acknowledged) - 1
        with pytest.raises(BKError):
            writer.append(b"after the fence")
        with ZkMetadataStore(uri) as store:
            md = store.read_ledger_metadata(writer.ledger_id).metadata
        assert md.is_closed and md.last_entry_id == len(acknowledged) - 1
        assert read_context(md).create == CREATE


def test_bookieformat_delete_cookie_with_the_cluster_from_the_environment_formats_and_deletes_or_nothing(
    zk_root: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bookieformat -d`` has two steps, the directories then the cookie. Given the cluster by
    ``$BKSPARK_METADATA_SERVICE_URI`` (its running-bookie check used it) and not by the bookie's configuration,
    it must do both steps, not empty the directories and then refuse the cookie. Given no cluster at all, it
    refuses before the first step."""
    monkeypatch.delenv(ENV_URI, raising=False)
    journal, ledgers = tmp_path / "journal", tmp_path / "ledgers"
    for directory in (journal, ledgers):
        (directory / "current").mkdir(parents=True)
        (directory / "current" / "data").write_bytes(b"x")
    conf = tmp_path / "bookie.conf"
    conf.write_text(f"journalDirectories={journal}\nledgerDirectories={ledgers}\nbookieId=bookie-1\n")
    cookie = f"{zk_root.path}/cookies/bookie-1"
    zk_root.zk_client.create(cookie, b"cookie", makepath=True)

    argv = ["shell", "--json", "bookieformat", "--bookie-conf", str(conf), "-n", "-f", "-d"]
    capsys.readouterr()
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and "cluster" in err and len(err.strip().splitlines()) == 1, err
    assert all(any(directory.iterdir()) for directory in (journal, ledgers)) and zk_root.zk_client.exists(cookie)

    monkeypatch.setenv(ENV_URI, zk_root.metadata_service_uri)
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["cookieDeleted"] is True and zk_root.zk_client.exists(cookie) is None
    assert not any(journal.iterdir()) and not any(ledgers.iterdir())


def test_metaformat_refused_changes_nothing(zk_root: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """``metaformat -n`` without ``-f`` on an existing cluster is refused, and the refusal leaves the cluster as it
    was (before, the missing registration nodes were created first, then the format refused)."""
    zk = zk_root.zk_client
    zk.delete(f"{zk_root.path}/available", recursive=True)
    before = sorted(zk.get_children(zk_root.path))
    capsys.readouterr()
    code = cli.main(["shell", "--metadata-service-uri", zk_root.metadata_service_uri, "metaformat", "-n"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "") and "-f/--force" in err and len(err.strip().splitlines()) == 1
    assert sorted(zk.get_children(zk_root.path)) == before


class Terminal(io.StringIO):
    """Typed answers on stdin that claim to come from a terminal (what ``metaformat`` asks on)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("typed", ["N\n", "no\n", ""], ids=["N", "no", "end-of-input"])
def test_metaformat_answered_no_on_a_terminal_changes_nothing(
    zk_root: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, typed: str
) -> None:
    """Without ``-n``, ``metaformat`` asks Java's question on a terminal; "N" (or no answer at all: Ctrl-D) leaves
    the cluster as it was, missing registration nodes included, and is no traceback."""
    zk = zk_root.zk_client
    zk.delete(f"{zk_root.path}/available", recursive=True)
    before = {child: zk.get(f"{zk_root.path}/{child}")[0] for child in zk.get_children(zk_root.path)}
    monkeypatch.setattr(sys, "stdin", Terminal(typed))
    capsys.readouterr()
    code = cli.main(["shell", "--metadata-service-uri", zk_root.metadata_service_uri, "metaformat"])
    out, err = capsys.readouterr()
    assert out.startswith(
        "Ledger root already exists. Are you sure to format bookkeeper metadata? This may cause data loss. (Y or N)"
    )
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) <= 1
    assert {child: zk.get(f"{zk_root.path}/{child}")[0] for child in zk.get_children(zk_root.path)} == before


def test_metaformat_deletes_what_the_doc_lists_and_keeps_the_layouts_scheme(
    zk_root: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/shell.md, metaformat: every ledger (scope 0 trees and BP-35 scopes), the id generators, bkspark's
    state, underreplication/ledgers and /locks, every cookie and INSTANCEID go; LAYOUT (the cluster's scheme) and a
    new INSTANCEID are written; the registration nodes stay."""
    zk, root, uri = zk_root.zk_client, zk_root.path, zk_root.metadata_service_uri
    md = LedgerMetadata(
        ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, state=LedgerState.CLOSED, last_entry_id=-1, length=0,
        ensembles={0: ("127.0.0.1:3181",)},
    )
    with ZkMetadataStore(uri) as store:
        scope0 = store.generate_ledger_id()  # creates an id generator
        store.create_ledger_metadata(scope0, md)
        store.create_ledger_metadata(5, md, scope_id=-7)
    layout = zk.get(f"{root}/LAYOUT")[0]
    old_instance = zk.get(f"{root}/INSTANCEID")[0] if zk.exists(f"{root}/INSTANCEID") else None
    for node in ("bkspark/audit/config", "bkspark/datasets/sales", "underreplication/ledgers/0000/L0001",
                 "underreplication/locks/L0001", "cookies/127.0.0.1:3181"):
        zk.create(f"{root}/{node}", b"x", makepath=True)
    idgens = [c for c in zk.get_children(root) if c in ("idgen", "idgen-long") or c.startswith("ID-")]
    assert idgens and zk.exists(f"{root}/scopes") is not None

    capsys.readouterr()
    code = cli.main(["shell", "--metadata-service-uri", uri, "--json", "metaformat", "-n", "-f"])
    out, err = capsys.readouterr()
    assert code == 0 and err == "", err
    for gone in ("scopes", "bkspark", "underreplication/ledgers", "underreplication/locks", "cookies", *idgens):
        assert zk.exists(f"{root}/{gone}") is None, gone
    assert [c for c in zk.get_children(root) if c.isdigit() and len(c) in (2, 3)] == []  # no scope 0 ledger tree
    assert zk.get(f"{root}/LAYOUT")[0] == layout
    instance = zk.get(f"{root}/INSTANCEID")[0].decode()
    assert instance == json.loads(out)["instanceId"] and instance.encode() != old_instance
    assert zk.exists(f"{root}/available/readonly") is not None
