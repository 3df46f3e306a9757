"""Cluster and bookie formatting with Apache BookKeeper's semantics: ``initnewcluster``, ``metaformat``,
``nukeexistingcluster``, ``bookieformat`` (what ``bin/bookkeeper shell`` does, for Python-only users).

Each function works on a started kazoo client and a ledgers root and says
what it did; the shell commands (bkspark/shell/commands.py) add prompts,
flags and output.  Java's steps, mirrored here (docs/shell.md has the user's
view):

* ``initnewcluster`` (``ZKRegistrationManager.initNewCluster``): refuses an
  existing root; else one multi creates ``<root>``, ``available``,
  ``available/readonly`` and ``INSTANCEID`` (a random UUID), then ``LAYOUT``.
* ``metaformat`` (``BookKeeperAdmin.format``): creates what is missing of
  root/available/readonly; then deletes every ledger znode tree and id
  generator, rewrites ``LAYOUT`` (in place, where Java deletes and
  re-creates it), deletes ``underreplication/ledgers``,
  ``underreplication/locks``, ``cookies`` and ``INSTANCEID``, and writes a
  new ``INSTANCEID``.
* ``nukeexistingcluster`` (``BookKeeperAdmin.nukeExistingCluster``): no root
  is success; refuses while any bookie is registered or when the root holds
  a znode that is neither BookKeeper's nor a ledger tree; then deletes it all.
* ``bookieformat`` (``BookieImpl.format``): empties the journal and ledger
  directories; ``-deleteCookie`` also deletes ``<root>/cookies/<bookieId>``.

bkspark's own znodes under the root are ledger state too and go with the
ledgers: ``scopes`` (BP-35 ledgers, docs/scoped-ledger-paths.md) and
``bkspark`` (data sets, jobs, the orphan audit).
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NodeExistsError

from bkspark.protocol import zk_paths
from bkspark.protocol.layout import LedgerLayout
from bkspark.shell.common import ShellError

__all__ = [
    "BKSPARK_ZNODES",
    "HIERARCHICAL_LAYOUT",
    "BookieDirs",
    "read_instance_id",
    "init_new_cluster",
    "prepare_format",
    "format_metadata",
    "nuke_existing_cluster",
    "registered_bookies",
    "bookie_dirs_with_data",
    "format_bookie_dirs",
]

#: Root children that hold bkspark's ledger state (BP-35 scoped ledgers; data sets, jobs and the audit).
BKSPARK_ZNODES = (zk_paths.SCOPES, "bkspark")
#: What Java's ``initnewcluster`` writes to ``LAYOUT`` with the default ledger manager.
HIERARCHICAL_LAYOUT = LedgerLayout.for_scheme("hierarchical").serialize()


def init_new_cluster(zk: KazooClient, root: str, layout: bytes = HIERARCHICAL_LAYOUT) -> str:
    """Format a new cluster at ``root`` as ``BookKeeperAdmin.initNewCluster``; returns its instance id.

    The parent of ``root`` must exist, as in Java.  Refusals (an existing
    root, a missing parent) raise :class:`ShellError`, where Java returns false.
    """
    zk_paths.check_root(root)
    if not root:
        raise ShellError("the ledgers root must not be the ZooKeeper root itself")
    if zk.exists(root) is not None:
        raise ShellError(
            f"ledgers root {root} already exists: it holds a cluster (nukeexistingcluster removes it, "
            "metaformat formats it in place)"
        )
    instance_id = str(uuid.uuid4())
    txn = zk.transaction()
    txn.create(root, b"")
    txn.create(zk_paths.available_path(root), b"")
    txn.create(zk_paths.readonly_path(root), b"")
    txn.create(zk_paths.instance_id_path(root), instance_id.encode("utf-8"))
    failures = [r for r in txn.commit() if isinstance(r, Exception)]
    if failures:
        cause = next((f for f in failures if not type(f).__name__.startswith("Rolled")), failures[0])
        if isinstance(cause, NoNodeError):
            raise ShellError(f"the parent of ledgers root {root} does not exist in ZooKeeper")
        if isinstance(cause, NodeExistsError):
            raise ShellError(f"ledgers root {root} was created by someone else meanwhile")
        raise ShellError(f"cannot create the cluster root {root}: {type(cause).__name__}")
    zk.create(zk_paths.layout_path(root), layout)
    return instance_id


def prepare_format(zk: KazooClient, root: str) -> bool:
    """``ZKRegistrationManager.prepareFormat``: create what is missing of root/available/readonly.

    Returns whether the root existed before (then the data in it is at stake).
    """
    existed = zk.exists(root) is not None
    if not existed:
        zk.ensure_path(root)
    for path in (zk_paths.available_path(root), zk_paths.readonly_path(root)):
        if zk.exists(path) is None:
            try:
                zk.create(path, b"")
            except NodeExistsError:
                pass
    return existed


def _delete_tree(zk: KazooClient, path: str) -> None:
    try:
        zk.delete(path, recursive=True)
    except NoNodeError:
        pass


def _delete_ledgers(zk: KazooClient, root: str, scheme: str) -> None:
    """``AbstractZkLedgerManagerFactory.format``'s first half: ledger trees and id generators, plus ours."""
    for child in zk.get_children(root):
        ledger_tree = not zk_paths.is_special_znode(child) and zk_paths.is_ledger_parent_node(child, scheme)
        if ledger_tree or zk_paths.is_ledger_id_generator_znode(child) or child in BKSPARK_ZNODES:
            _delete_tree(zk, f"{root}/{child}")


def format_metadata(zk: KazooClient, root: str, scheme: str = "hierarchical") -> str:
    """Format the metadata under ``root`` (after :func:`prepare_format`); returns the new instance id.

    Every ledger is gone afterwards and every bookie's cookie too, so bookies
    must be formatted (``bookieformat``) before they can join again.
    """
    _delete_ledgers(zk, root, scheme)
    # Rewritten in place, never deleted: a crash must not leave a cluster whose next format guesses its scheme,
    # nor a window in which a starting Java client writes a default LAYOUT of its own.
    layout = LedgerLayout.for_scheme(scheme).serialize()
    try:
        zk.set(zk_paths.layout_path(root), layout)
    except NoNodeError:
        zk.create(zk_paths.layout_path(root), layout)
    underreplication = zk_paths.underreplication_path(root)
    _delete_tree(zk, f"{underreplication}/ledgers")
    _delete_tree(zk, f"{underreplication}/locks")
    _delete_tree(zk, zk_paths.cookies_path(root))
    _delete_tree(zk, zk_paths.instance_id_path(root))
    instance_id = str(uuid.uuid4())
    zk.create(zk_paths.instance_id_path(root), instance_id.encode("utf-8"))
    return instance_id


def registered_bookies(zk: KazooClient, root: str) -> tuple[list[str], list[str]]:
    """``(writable, read-only)`` BookieIds registered under ``root``."""
    writable: list[str] = []
    readonly: list[str] = []
    try:
        writable = [c for c in zk.get_children(zk_paths.available_path(root)) if c != zk_paths.READONLY]
        readonly = list(zk.get_children(zk_paths.readonly_path(root)))
    except NoNodeError:
        pass
    return sorted(writable), sorted(readonly)


def read_instance_id(zk: KazooClient, root: str) -> str | None:
    """The cluster's ``INSTANCEID``, or None when it has none."""
    try:
        data, _ = zk.get(zk_paths.instance_id_path(root))
    except NoNodeError:
        return None
    return data.decode("utf-8", "replace")


def nuke_existing_cluster(zk: KazooClient, root: str, scheme: str = "hierarchical") -> bool:
    """Delete the cluster at ``root`` as ``nukeExistingCluster`` does; False when there was none.

    Raises :class:`ShellError` while bookies are registered or when ``root``
    holds a znode that belongs to neither BookKeeper nor bkspark (Java's
    "Found unexpected znode under ledgersRootPath").
    """
    if zk.exists(root) is None:
        return False
    writable, readonly = registered_bookies(zk, root)
    if writable or readonly:
        raise ShellError(
            f"bookies are still up and registered in {root} ({', '.join(writable + readonly)}): "
            "stop all bookies before nuking the cluster"
        )
    for child in zk.get_children(root):
        known = zk_paths.is_special_znode(child) or zk_paths.is_ledger_parent_node(child, scheme)
        if not known and child not in BKSPARK_ZNODES:
            raise ShellError(f"found unexpected znode {root}/{child} under the ledgers root; not nuking")
    _delete_ledgers(zk, root, scheme)
    zk.delete(root, recursive=True)
    return True


@dataclass(frozen=True)
class BookieDirs:
    """The directories a bookie keeps its data in (journal first)."""

    journal: list[Path]
    ledgers: list[Path]

    @property
    def all(self) -> list[Path]:
        return [*self.journal, *self.ledgers]


def bookie_dirs_with_data(dirs: BookieDirs) -> list[Path]:
    """The journal directories that hold anything (Java asks for confirmation only about those)."""
    return [d for d in dirs.journal if d.is_dir() and any(d.iterdir())]


def format_bookie_dirs(dirs: BookieDirs) -> None:
    """``BookieImpl.format``'s ``cleanDir`` for every directory: delete what is inside, create what is missing."""
    for directory in dirs.all:
        if directory.is_dir():
            for child in directory.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        else:
            directory.mkdir(parents=True)
