"""Cluster and bookie formatting with Apache BookKeeper's semantics: ``initnewcluster``, ``metaformat``,
``nukeexistingcluster``, ``bookieformat`` (what ``bin/bookkeeper shell`` does, for Python-only users).

Each function works on a started kazoo client and a ledgers root (through
:class:`bkspark.metadata.znodes.Znodes`: this module imports no kazoo) and says
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

from typing import Any

from bkspark.metadata.znodes import Outcome, Znodes
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


def init_new_cluster(zk: Any, root: str, layout: bytes = HIERARCHICAL_LAYOUT) -> str:
    """Format a new cluster at ``root`` as ``BookKeeperAdmin.initNewCluster``; returns its instance id.

    The parent of ``root`` must exist, as in Java.  Refusals (an existing
    root, a missing parent) raise :class:`ShellError`, where Java returns false.
    """
    zk_paths.check_root(root)
    if not root:
        raise ShellError("the ledgers root must not be the ZooKeeper root itself")
    nodes = Znodes(zk)
    if nodes.stat(root) is not None:
        raise ShellError(
            f"ledgers root {root} already exists: it holds a cluster (nukeexistingcluster removes it, "
            "metaformat formats it in place)"
        )
    instance_id = str(uuid.uuid4())
    multi = nodes.multi().create(root).create(zk_paths.available_path(root)).create(zk_paths.readonly_path(root))
    outcomes = multi.create(zk_paths.instance_id_path(root), instance_id.encode("utf-8")).commit()
    if outcomes is None:
        raise ShellError(f"lost the connection to ZooKeeper while creating the cluster root {root}: it may or may "
                         "not exist now (metaformat completes a root that initnewcluster refuses)")
    failed = [(o, e) for o, e in zip(outcomes, multi.errors) if o is not Outcome.OK]
    if failed:
        cause, error = next(((o, e) for o, e in failed if o is not Outcome.ROLLED_BACK), failed[0])
        if cause is Outcome.NO_NODE:
            raise ShellError(f"the parent of ledgers root {root} does not exist in ZooKeeper")
        if cause is Outcome.NODE_EXISTS:
            raise ShellError(f"ledgers root {root} was created by someone else meanwhile")
        raise ShellError(f"cannot create the cluster root {root}: {type(error).__name__}")
    _create(nodes, zk_paths.layout_path(root), layout)
    return instance_id


def _create(nodes: Znodes, path: str, data: bytes) -> None:
    outcome = nodes.create(path, data)
    if outcome is not Outcome.OK:
        raise ShellError(f"cannot create {path}: {outcome.value}")


def prepare_format(zk: Any, root: str) -> bool:
    """``ZKRegistrationManager.prepareFormat``: create what is missing of root/available/readonly.

    Returns whether the root existed before (then the data in it is at stake).
    """
    nodes = Znodes(zk)
    existed = nodes.stat(root) is not None
    if not existed:
        nodes.ensure_path(root)
    for path in (zk_paths.available_path(root), zk_paths.readonly_path(root)):
        if nodes.stat(path) is None:
            nodes.create(path)  # NODE_EXISTS: created meanwhile, as wanted
    return existed


def _delete_ledgers(nodes: Znodes, root: str, scheme: str) -> None:
    """``AbstractZkLedgerManagerFactory.format``'s first half: ledger trees and id generators, plus ours."""
    for child in nodes.children(root):
        ledger_tree = not zk_paths.is_special_znode(child) and zk_paths.is_ledger_parent_node(child, scheme)
        if ledger_tree or zk_paths.is_ledger_id_generator_znode(child) or child in BKSPARK_ZNODES:
            nodes.delete(f"{root}/{child}", recursive=True)


def format_metadata(zk: Any, root: str, scheme: str = "hierarchical") -> str:
    """Format the metadata under ``root`` (after :func:`prepare_format`); returns the new instance id.

    Every ledger is gone afterwards and every bookie's cookie too, so bookies
    must be formatted (``bookieformat``) before they can join again.
    """
    nodes = Znodes(zk)
    _delete_ledgers(nodes, root, scheme)
    # Rewritten in place, never deleted: a crash must not leave a cluster whose next format guesses its scheme,
    # nor a window in which a starting Java client writes a default LAYOUT of its own.
    layout = LedgerLayout.for_scheme(scheme).serialize()
    if nodes.set(zk_paths.layout_path(root), layout) is None:  # absent (any version is taken)
        _create(nodes, zk_paths.layout_path(root), layout)
    underreplication = zk_paths.underreplication_path(root)
    for path in (f"{underreplication}/ledgers", f"{underreplication}/locks", zk_paths.cookies_path(root),
                 zk_paths.instance_id_path(root)):
        nodes.delete(path, recursive=True)
    instance_id = str(uuid.uuid4())
    _create(nodes, zk_paths.instance_id_path(root), instance_id.encode("utf-8"))
    return instance_id


def registered_bookies(zk: Any, root: str) -> tuple[list[str], list[str]]:
    """``(writable, read-only)`` BookieIds registered under ``root``."""
    nodes = Znodes(zk)
    writable = [c for c in nodes.children(zk_paths.available_path(root)) if c != zk_paths.READONLY]
    return sorted(writable), sorted(nodes.children(zk_paths.readonly_path(root)))


def read_instance_id(zk: Any, root: str) -> str | None:
    """The cluster's ``INSTANCEID``, or None when it has none."""
    found = Znodes(zk).get(zk_paths.instance_id_path(root))
    return None if found is None else found[0].decode("utf-8", "replace")


def nuke_existing_cluster(zk: Any, root: str, scheme: str = "hierarchical") -> bool:
    """Delete the cluster at ``root`` as ``nukeExistingCluster`` does; False when there was none.

    Raises :class:`ShellError` while bookies are registered or when ``root``
    holds a znode that belongs to neither BookKeeper nor bkspark (Java's
    "Found unexpected znode under ledgersRootPath").
    """
    nodes = Znodes(zk)
    if nodes.stat(root) is None:
        return False
    writable, readonly = registered_bookies(zk, root)
    if writable or readonly:
        raise ShellError(
            f"bookies are still up and registered in {root} ({', '.join(writable + readonly)}): "
            "stop all bookies before nuking the cluster"
        )
    for child in nodes.children(root):
        known = zk_paths.is_special_znode(child) or zk_paths.is_ledger_parent_node(child, scheme)
        if not known and child not in BKSPARK_ZNODES:
            raise ShellError(f"found unexpected znode {root}/{child} under the ledgers root; not nuking")
    _delete_ledgers(nodes, root, scheme)
    nodes.delete(root, recursive=True)
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
