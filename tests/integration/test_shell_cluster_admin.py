"""``bkspark shell initnewcluster|metaformat|nukeexistingcluster|bookieformat`` against a real ZooKeeper and a
real Python bookie: a Python-only user creates, formats and deletes a cluster as with ``bin/bookkeeper shell``."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from bkspark.client import BookKeeper
from bkspark.errors import NoSuchLedgerError, NoSuchLedgerMetadataError
from tests.harness.python_bookie import PythonBookie
from tests.harness.zookeeper import ZooKeeperServer
from tests.integration.test_shell_java import shell, shell_json  # `bkspark shell` in-process: (code, out, err)

pytestmark = pytest.mark.integration

_roots = itertools.count(1)


def tree(zk: Any, root: str) -> list[str]:
    found, todo = [], [root]
    while todo:
        node = todo.pop()
        found.append(node[len(root):] or "/")
        todo.extend(f"{node}/{child}" for child in zk.get_children(node))
    return sorted(found)


def test_init_format_and_nuke_a_cluster_and_format_its_bookie(
    zookeeper: ZooKeeperServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = f"/bk-shell-admin-{next(_roots)}"
    uri = f"zk+hierarchical://{zookeeper.connect_string}{root}"
    zk = zookeeper.client()
    bookie = PythonBookie("b0", tmp_path, uri, journal_sync_data=False)
    try:
        # A bookie on a ZooKeeper without the cluster: one line that names the command this user has.
        zk.ensure_path(root.rsplit("/", 1)[0] or "/")
        bookie.launch()
        assert bookie.process is not None and bookie.process.wait_exit(60) == 1
        last = bookie.process.last_words()
        assert last.startswith("bookie-server: error: cannot start:") and "bkspark shell" in last, last
        assert "initnewcluster" in last

        # initnewcluster: the nodes Java creates; a second time is refused (the root exists).
        created = shell_json(capsys, uri, "initnewcluster")
        assert tree(zk, root) == ["/", "/INSTANCEID", "/LAYOUT", "/available", "/available/readonly"]
        assert zk.get(f"{root}/INSTANCEID")[0].decode() == created["instanceId"]
        code, _, err = shell(capsys, uri, "initnewcluster")
        assert code == 1 and "already exists" in err and len(err.strip().splitlines()) == 1

        # A bookie joins; a scope 0 and a scoped ledger are written.
        bookie.launch()
        bookie.wait_ready(zk, root)
        bk = BookKeeper(uri)
        try:
            plain = bk.create_ledger(ensemble_size=1, write_quorum_size=1, ack_quorum_size=1)
            plain.append(b"x")
            plain.close()
            scoped = bk.create_ledger(ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, scope_id=-7)
            scoped.append(b"y")
            scoped.close()
        finally:
            bk.close()
        assert zk.exists(f"{root}/scopes") is not None

        # nukeexistingcluster: refused while a bookie runs, and without -i or -f.
        code, _, err = shell(capsys, uri, "nukeexistingcluster", "-p", root, "-f")
        assert code == 1 and "stop all bookies" in err
        code, _, err = shell(capsys, uri, "nukeexistingcluster", "-p", root)
        assert code == 2 and "-i/--instanceid" in err

        # metaformat: needs -f with -n, and a terminal to ask on without -n; then ledgers and cookies are gone.
        code, _, err = shell(capsys, uri, "metaformat", "-nonInteractive")
        assert code == 1 and "-f/--force" in err
        code, _, err = shell(capsys, uri, "metaformat")
        assert code == 2 and "not a terminal" in err
        assert zk.exists(f"{root}/cookies/{bookie.bookie_id}") is not None
        formatted = shell_json(capsys, uri, "metaformat", "-n", "-f")
        assert formatted["existed"] and formatted["instanceId"] != created["instanceId"]
        for gone in ("/cookies", "/scopes", "/00"):
            assert zk.exists(root + gone) is None, gone
        assert zk.exists(f"{root}/LAYOUT") is not None
        bk = BookKeeper(uri)
        try:
            with pytest.raises((NoSuchLedgerError, NoSuchLedgerMetadataError)):
                bk.open_ledger(plain.ledger_id, recovery=False)
        finally:
            bk.close()

        # The bookie's directories still carry the old cluster's cookie: bookieformat refuses while it runs,
        # asks before deleting data, and with -n -f -d makes it a new bookie of the formatted cluster.
        conf = str(bookie.conf_file)
        code, _, err = shell(capsys, uri, "bookieformat", "--bookie-conf", conf, "-n", "-f")
        assert code == 1 and "stop it first" in err
        bookie.process.terminate()  # type: ignore[union-attr]
        code, _, err = shell(capsys, uri, "bookieformat", "--bookie-conf", conf, "-n")
        assert code == 1 and "-f/--force" in err
        assert any((tmp_path / "b0" / "journal").iterdir())
        done = shell_json(capsys, uri, "bookieformat", "--bookie-conf", conf, "-n", "-f", "-d")
        assert done["bookieId"] == bookie.bookie_id
        assert not any((tmp_path / "b0" / "journal").iterdir()) and not any((tmp_path / "b0" / "ledgers").iterdir())
        bookie.launch()
        bookie.wait_ready(zk, root)
        bookie.process.terminate()  # type: ignore[union-attr]
        zk.sync(root)

        # nukeexistingcluster: the root must match and the instance id too; then nothing is left.
        code, _, err = shell(capsys, uri, "nukeexistingcluster", "-p", "/elsewhere", "-f")
        assert code == 1 and "does not match" in err
        code, _, err = shell(capsys, uri, "nukeexistingcluster", "-p", root, "-i", created["instanceId"])
        assert code == 1 and "does not match" in err
        nuked = shell_json(capsys, uri, "nukeexistingcluster", "-p", root, "-instanceid", formatted["instanceId"])
        assert nuked["nuked"] and zk.exists(root) is None
        assert shell_json(capsys, uri, "nukeexistingcluster", "-p", root, "-f")["nuked"] is False

        # A znode that is neither BookKeeper's nor bkspark's stops the nuke, as in Java.
        shell_json(capsys, uri, "initnewcluster")
        zk.create(f"{root}/someone-elses", b"")
        code, _, err = shell(capsys, uri, "nukeexistingcluster", "-p", root, "-f")
        assert code == 1 and "someone-elses" in err and zk.exists(root) is not None
        zk.delete(root, recursive=True)
    finally:
        if bookie.process is not None:
            bookie.process.terminate()
        zk.stop()
        zk.close()


def test_each_command_can_be_run_again_from_where_a_crash_left_it(
    zookeeper: ZooKeeperServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The commands do not retry; a crash between their steps leaves a state that the same (or the next)
    command completes."""
    root = f"/bk-shell-admin-{next(_roots)}"
    uri = f"zk+hierarchical://{zookeeper.connect_string}{root}"
    zk = zookeeper.client()
    try:
        # initnewcluster stopped after its multi, before LAYOUT: it refuses the root; metaformat completes it.
        for node in (root, f"{root}/available", f"{root}/available/readonly"):
            zk.create(node, b"")
        zk.create(f"{root}/INSTANCEID", b"old")
        code, _, err = shell(capsys, uri, "initnewcluster")
        assert code == 1 and "already exists" in err
        assert shell_json(capsys, uri, "metaformat", "-n", "-f")["existed"]
        assert tree(zk, root) == ["/", "/INSTANCEID", "/LAYOUT", "/available", "/available/readonly"]

        # metaformat stopped after deleting the ledgers and LAYOUT, before the cookies and INSTANCEID: run again.
        zk.create(f"{root}/cookies/127.0.0.1:3181", b"cookie", makepath=True)
        zk.create(f"{root}/00/0000/L0001", b"", makepath=True)
        zk.delete(f"{root}/00", recursive=True)
        zk.delete(f"{root}/LAYOUT")
        again = shell_json(capsys, uri, "metaformat", "-n", "-f")
        assert zk.get(f"{root}/INSTANCEID")[0].decode() == again["instanceId"]
        assert zk.exists(f"{root}/cookies") is None and zk.exists(f"{root}/LAYOUT") is not None

        # nukeexistingcluster stopped half-way (ledger trees and LAYOUT gone, the rest left): run again.
        zk.create(f"{root}/scopes/0000", b"", makepath=True)
        zk.delete(f"{root}/scopes", recursive=True)
        zk.delete(f"{root}/LAYOUT")
        assert shell_json(capsys, uri, "nukeexistingcluster", "-p", root, "-f")["nuked"]
        assert zk.exists(root) is None

        # bookieformat on directories that a crash left half-emptied, or never created.
        conf = tmp_path / "bookie.conf"
        journal, ledgers = tmp_path / "j", tmp_path / "l"
        conf.write_text(f"journalDirectories={journal}\nledgerDirectories={ledgers}\nbookiePort=3181\n")
        journal.mkdir()
        (journal / "current").mkdir()
        (journal / "current" / "left-over").write_bytes(b"x")
        done = shell_json(capsys, uri, "bookieformat", "--bookie-conf", str(conf), "-n", "-f")
        assert done["cookieDeleted"] is False
        assert journal.is_dir() and not any(journal.iterdir()) and ledgers.is_dir() and not any(ledgers.iterdir())
    finally:
        zk.stop()
        zk.close()


def test_initnewcluster_needs_the_roots_parent_and_creates_nothing_without_it(
    zookeeper: ZooKeeperServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/shell.md: initnewcluster creates the root of the metadataServiceUri, whose parent must exist (as Java's
    initNewCluster): a missing parent is exit 1 in one line, and nothing is created, the parent included."""
    parent = f"/bk-shell-admin-missing-{next(_roots)}"
    uri = f"zk+hierarchical://{zookeeper.connect_string}{parent}/ledgers"
    zk = zookeeper.client()
    try:
        code, out, err = shell(capsys, uri, "initnewcluster")
        assert code == 1 and out == "" and len(err.strip().splitlines()) == 1 and "parent" in err
        assert zk.exists(parent) is None
        zk.create(parent, b"")
        assert shell_json(capsys, uri, "initnewcluster")["ledgersRootPath"] == f"{parent}/ledgers"
        assert tree(zk, parent) == ["/", "/ledgers", "/ledgers/INSTANCEID", "/ledgers/LAYOUT", "/ledgers/available",
                                    "/ledgers/available/readonly"]
        zk.delete(parent, recursive=True)
    finally:
        zk.stop()
        zk.close()
