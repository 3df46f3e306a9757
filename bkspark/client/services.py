"""What every ledger handle shares: the client's loop, bookie ops, metadata store, registry and policy.

Also the metadata update loop (Java's ``MetadataUpdateLoop``): every change to
ledger metadata (ensemble change, close, IN_RECOVERY marking, recovered close)
is "check, transform, compare-and-set, on conflict re-read and check again",
bounded by :data:`bkspark.retry.METADATA_CAS_RETRY`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass
from typing import Any, Callable

from bkspark.client.conf import ClientConf
from bkspark.client.ops import BookieOps
from bkspark.errors import MetadataVersionError
from bkspark.metadata.registry import BookieRegistry
from bkspark.metadata.store import Versioned, ZkMetadataStore
from bkspark.placement.base import EnsemblePlacementPolicy
from bkspark.protocol.ledger_metadata import LedgerMetadata
from bkspark.protocol.ledger_name import LedgerRef
from bkspark.retry import BOOKIE_RETRY, METADATA_CAS_RETRY, RetryPolicy

__all__ = ["ClientServices", "update_metadata"]


@dataclass
class ClientServices:
    """The client-wide services a handle needs; used from the client's event loop thread only."""

    conf: ClientConf
    loop: asyncio.AbstractEventLoop
    ops: BookieOps
    store: ZkMetadataStore
    registry: BookieRegistry
    policy: EnsemblePlacementPolicy
    #: Compare-and-set loops on ledger metadata (ensemble change, close, recovery).
    cas_retry: RetryPolicy = METADATA_CAS_RETRY
    #: Idempotent requests to one named bookie (GET_BOOKIE_INFO, GET_LIST_OF_ENTRIES_OF_LEDGER):
    #: there is no other replica to move on to, so a retriable failure is tried again.
    bookie_retry: RetryPolicy = BOOKIE_RETRY
    #: Where blocking (ZooKeeper) calls run; None: the loop's default executor.
    executor: concurrent.futures.Executor | None = None

    async def in_thread(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run a blocking (ZooKeeper) call off the loop, in :attr:`executor`."""
        return await self.loop.run_in_executor(self.executor, func, *args)

    def failure_history(self) -> dict[str, int]:
        return self.ops.pool.failures_since(self.conf.bookieFailureHistoryExpirationMSec / 1000.0)


async def update_metadata(
    ctx: ClientServices,
    ref: LedgerRef,
    current: Versioned,
    needs_update: Callable[[LedgerMetadata], bool],
    transform: Callable[[LedgerMetadata], LedgerMetadata],
) -> Versioned:
    """Java's ``MetadataUpdateLoop``: CAS ``transform(md)`` while ``needs_update(md)`` holds.

    ``needs_update`` and ``transform`` may raise to abort.  A lost race re-reads
    and tries again while ``ctx.cas_retry`` allows (then the
    :class:`MetadataVersionError` is raised).  Returns the metadata in force at
    the end (written by us, or found already satisfying the condition).
    """
    attempts = ctx.cas_retry.start()
    while True:
        if not needs_update(current.metadata):
            return current
        new = transform(current.metadata)
        try:
            return await ctx.in_thread(ctx.store.write_ledger_metadata, ref.ledger_id, new, current.version, ref.scope_id)
        except MetadataVersionError as exc:
            await attempts.backoff_async(exc)
            current = await ctx.in_thread(ctx.store.read_ledger_metadata, ref.ledger_id, ref.scope_id)
