"""What every ledger handle shares: the client's loop, pool, metadata store and policy.

Also the metadata update loop (Java's ``MetadataUpdateLoop``): every change to
ledger metadata (ensemble change, close, IN_RECOVERY marking, recovered close)
is "check, transform, compare-and-set, on conflict re-read and check again".
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable

from bkspark.client.conf import ClientConf
from bkspark.client.ops import BookieOps
from bkspark.errors import MetadataVersionError
from bkspark.metadata.registry import BookieRegistry
from bkspark.metadata.store import Versioned, ZkMetadataStore
from bkspark.placement.base import EnsemblePlacementPolicy
from bkspark.protocol.ledger_metadata import LedgerMetadata

__all__ = ["ClientContext", "LedgerRef", "update_metadata"]


@dataclass
class ClientContext:
    """The client-wide services a handle needs (all used from the event loop thread)."""

    conf: ClientConf
    loop: asyncio.AbstractEventLoop
    ops: BookieOps
    store: ZkMetadataStore
    registry: BookieRegistry
    policy: EnsemblePlacementPolicy

    async def in_thread(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run a blocking (ZooKeeper) call off the loop."""
        return await self.loop.run_in_executor(None, func, *args)

    def failure_history(self) -> dict[str, int]:
        return self.ops.pool.failures_since(self.conf.bookieFailureHistoryExpirationMSec / 1000.0)


@dataclass(frozen=True)
class LedgerRef:
    """A ledger's 128-bit name (BP-35): scope id and ledger id."""

    ledger_id: int
    scope_id: int = 0


async def update_metadata(
    ctx: ClientContext,
    ref: LedgerRef,
    current: Versioned,
    needs_update: Callable[[LedgerMetadata], bool],
    transform: Callable[[LedgerMetadata], LedgerMetadata],
) -> Versioned:
    """Java's ``MetadataUpdateLoop``: CAS ``transform(md)`` while ``needs_update(md)`` holds.

    ``needs_update`` may raise to abort.  Returns the metadata in force at the
    end (written by us, or found already satisfying the condition).
    """
    while True:
        if not needs_update(current.metadata):
            return current
        new = transform(current.metadata)
        try:
            return await ctx.in_thread(ctx.store.write_ledger_metadata, ref.ledger_id, new, current.version, ref.scope_id)
        except MetadataVersionError:
            current = await ctx.in_thread(ctx.store.read_ledger_metadata, ref.ledger_id, ref.scope_id)
