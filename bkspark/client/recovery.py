"""Ledger recovery (docs/protocol.md §4 item 7): fence, find the last entry, re-replicate the tail, close.

1. Mark the metadata IN_RECOVERY (CAS loop); a CLOSED ledger needs nothing.
2. Fence: ``READ(-1, DO_FENCING, masterKey)`` to every bookie of the last
   segment until the coverage rule holds; keep the answer with the largest
   piggy-backed LAC.  From then on those bookies refuse the old writer's adds.
3. Start at ``max(LAC, lastSegmentStart - 1)`` and read forward with recovery
   reads (``HIGH_PRIORITY | DO_FENCING``) from each entry's write set; an entry
   is missing once ``Qw - Qa + 1`` bookies say so, which ends the ledger.
4. Re-add every entry found with ``RECOVERY_ADD | HIGH_PRIORITY`` (Qa acks).
5. Write CLOSED at the recovered LAC and length (accepting a close someone
   else wrote meanwhile).
"""

from __future__ import annotations

import logging
from operator import itemgetter
from typing import Any

from bkspark.client.services import ClientServices, update_metadata
from bkspark.protocol.ledger_name import LedgerRef
from bkspark.client.ops import FLAG_DO_FENCING, FLAG_HIGH_PRIORITY
from bkspark.client.quorum import Covered, FoundOrAbsent, QuorumRead
from bkspark.client.reader import LedgerReader
from bkspark.client.writer import LedgerWriter
from bkspark.errors import BKError
from bkspark.metadata.store import Versioned
from bkspark.protocol.digest import Digester, VerifiedEntry, master_key
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState

__all__ = ["recover_ledger", "fence_and_read_last"]

log = logging.getLogger(__name__)


async def fence_and_read_last(
    ctx: ClientServices, ref: LedgerRef, md: LedgerMetadata, digester: Digester, key: bytes
) -> tuple[int, int]:
    """Fence the last segment's bookies; ``(max piggy-backed LAC, its length)`` once covered."""
    ensemble = md.last_ensemble

    def verify(data: Any) -> tuple[int, int]:
        v = digester.verify_entry(data, ref.ledger_id, None, ref.scope_id)
        return v.last_add_confirmed, v.length

    read = QuorumRead(len(ensemble), Covered(md, (-1, 0), key=itemgetter(0)), verify, ledger_id=ref.ledger_id)
    for idx, bookie in enumerate(ensemble):
        ctx.ops.read(
            bookie, ref.ledger_id, -1, ref.scope_id, read.on_response, idx, flags=FLAG_DO_FENCING, master_key=key
        )
    return await read.done


async def _recovery_read(
    ctx: ClientServices, ref: LedgerRef, md: LedgerMetadata, ensemble: tuple[str, ...], entry_id: int,
    digester: Digester, key: bytes,
) -> VerifiedEntry | None:
    """Read ``entry_id`` for recovery: the entry, or None once Qw - Qa + 1 bookies lack it."""
    ws = md.write_set(entry_id)
    read = QuorumRead(
        len(ws),
        FoundOrAbsent(md),
        lambda data: digester.verify_entry(data, ref.ledger_id, entry_id, ref.scope_id),
        ledger_id=ref.ledger_id,
        entry_id=entry_id,
    )
    for idx in ws:
        ctx.ops.read(
            ensemble[idx], ref.ledger_id, entry_id, ref.scope_id, read.on_response, idx,
            flags=FLAG_DO_FENCING | FLAG_HIGH_PRIORITY, master_key=key,
        )
    return await read.done


async def recover_ledger(ctx: ClientServices, ref: LedgerRef, versioned: Versioned, password: bytes) -> Versioned:
    """Run the whole recovery; returns the CLOSED metadata (ours or a concurrent closer's)."""
    md = versioned.metadata
    if md.state == LedgerState.CLOSED:
        return versioned

    versioned = await update_metadata(
        ctx,
        ref,
        versioned,
        lambda m: m.state == LedgerState.OPEN,
        lambda m: m.in_recovery(),
    )
    md = versioned.metadata
    if md.state == LedgerState.CLOSED:
        return versioned
    digester = Digester(md.digest_type, password)
    key = master_key(password)

    lac, length = await fence_and_read_last(ctx, ref, md, digester, key)
    last_start = md.last_segment_start
    if last_start - 1 > lac:
        # Every entry before the last segment is confirmed; learn its length from the entry itself
        # (Java keeps the stale length of the fencing answer here).
        reader = LedgerReader(ctx, ref, md, digester)
        v = await reader.read_entry(last_start - 1)
        lac, length = last_start - 1, v.length
    log.info("recovering ledger %s from LAC %s", ref.ledger_id, lac)

    writer = LedgerWriter(ctx, ref, versioned, password, last_add_confirmed=lac, length=length, recovery=True)
    failures: list[BaseException] = []

    def on_added(_eid: int | None, exc: BaseException | None) -> None:
        if exc is not None:
            failures.append(exc)

    entry_id = lac + 1
    while True:
        ensemble = md.ensemble_at(entry_id)
        found = await _recovery_read(ctx, ref, md, ensemble, entry_id, digester, key)
        if found is None:
            break
        if failures:
            raise failures[0]
        # The entry's header holds the cumulative length including it (Java: length = header - payload).
        writer.length = found.length - len(found.payload)
        writer.append(bytes(found.payload), on_added, entry_id=entry_id)
        entry_id += 1
    await writer.drain()
    if failures:
        raise failures[0] if isinstance(failures[0], BKError) else BKError(str(failures[0]))
    writer.versioned = versioned
    final = await writer.close_recovered()
    log.info("ledger %s recovered: last entry %s, length %s", ref.ledger_id, final.last_entry_id, final.length)
    return writer.versioned
