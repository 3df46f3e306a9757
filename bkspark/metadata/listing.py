"""Listing the ledgers of a metadata store: the tree walks of each layout, whole or under an id range (one room of
:class:`bkspark.metadata.store.ZkMetadataStore`, which inherits it; ZooKeeper through its ``retry``)."""

from __future__ import annotations

import logging
import re
from typing import Iterator

from kazoo.exceptions import NoNodeError

from bkspark.errors import BadMetadataError, InvalidOptionError
from bkspark.protocol import zk_paths

__all__ = ["LedgerListing"]

log = logging.getLogger("bkspark.metadata.store")

_DIGITS = re.compile(r"^\d+$")


class LedgerListing:
    """``list_ledgers`` / ``list_ledgers_between`` of :class:`~bkspark.metadata.store.ZkMetadataStore`."""

    # -- listing ---------------------------------------------------------------------

    def list_ledgers(self, scope_id: int = 0) -> Iterator[int]:
        """Every ledger id of a scope, in ascending order, walking the tree as Java does."""
        if scope_id == 0:
            yield from self._walk_scope0()
        else:
            base = zk_paths.scope_path(self.root, scope_id)
            yield from sorted(self._walk(base, scope_id))

    def _walk_scope0(self) -> Iterator[int]:
        try:
            children = self.retry(self.zk.get_children, self.root)
        except NoNodeError:
            return
        ids: list[int] = []
        for child in children:
            if zk_paths.is_special_znode(child):
                continue
            if not zk_paths.is_ledger_parent_node(child, self.scheme):
                continue
            if self.scheme == "flat":
                ids.extend(self._leaf(f"{self.root}/{child}", 0))
            else:
                ids.extend(self._walk(f"{self.root}/{child}", 0))
        yield from sorted(ids)

    def list_ledgers_between(self, first: int, last: int, scope_id: int = 0) -> list[int]:
        """The ledger ids in ``first..last`` that exist, ascending: like :meth:`list_ledgers`, but descending only
        into the znodes whose digit groups can hold such ids (a range of 20,000 ids in a hierarchical layout
        lists a handful of znodes, whatever else the cluster holds).  A flat layout has one level: it is listed
        whole and filtered."""
        if first > last:
            return []
        if scope_id != 0:
            base = zk_paths.scope_path(self.root, scope_id)
            return sorted(self._walk(base, scope_id, ("", 19, first, last)))
        if self.scheme == "flat":
            return [lid for lid in self._walk_scope0() if first <= lid <= last]
        try:
            children = self.retry(self.zk.get_children, self.root)
        except NoNodeError:
            return []
        ids: list[int] = []
        for child in children:
            if zk_paths.is_special_znode(child) or not zk_paths.is_ledger_parent_node(child, self.scheme):
                continue
            # the top digit group says the layout: 2 digits, ids of 10 (legacy); 3 digits, ids of 19 (long). The
            # hierarchical scheme keeps ids below MAX_SHORT_LEDGER_ID in the legacy tree and the others in the long
            # one (zk_paths.ledger_path), so each tree is walked for its part of the range only.
            legacy = len(child) == 2 and self.scheme != "longhierarchical"
            width = 10 if legacy else 19
            low, high = first, last
            if self.scheme == "hierarchical":
                low, high = (low, min(high, zk_paths.MAX_SHORT_LEDGER_ID - 1)) if legacy else (
                    max(low, zk_paths.MAX_SHORT_LEDGER_ID), high)
            if low <= high and _overlaps(child, width, low, high):
                ids.extend(self._walk(f"{self.root}/{child}", 0, (child, width, low, high)))
        return sorted(ids)

    def _walk(
        self, path: str, scope_id: int, span: tuple[str, int, int, int] | None = None
    ) -> Iterator[int]:
        """The ledger ids under ``path``; with ``span`` = (digits so far, id width, first, last), only those in
        ``first..last``, descending only into digit groups that can hold them."""
        try:
            children = self.retry(self.zk.get_children, path)
        except NoNodeError:
            return
        for child in children:
            full = f"{path}/{child}"
            if child.startswith(zk_paths.LEDGER_PREFIX):
                yield from (lid for lid in self._leaf(full, scope_id) if span is None or span[2] <= lid <= span[3])
            elif _DIGITS.match(child):
                if span is None:
                    yield from self._walk(full, scope_id)
                elif _overlaps(span[0] + child, *span[1:]):
                    yield from self._walk(full, scope_id, (span[0] + child, *span[1:]))

    def _leaf(self, path: str, scope_id: int) -> Iterator[int]:
        try:
            got_scope, ledger_id = zk_paths.parse_ledger_path(self.root, path, self.scheme)
        except (BadMetadataError, InvalidOptionError):
            log.debug("skipping non-ledger znode %s", path)
            return
        if got_scope == scope_id:
            yield ledger_id


def _overlaps(digits: str, width: int, first: int, last: int) -> bool:
    """Whether ids of ``width`` digits that start with ``digits`` can fall in ``first..last``."""
    if len(digits) > width:
        return False
    return int(digits.ljust(width, "9")) >= first and int(digits.ljust(width, "0")) <= last
