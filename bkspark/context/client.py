"""Writing ledger contexts through the client: create with a context, close and record one.

The codec (:mod:`bkspark.context.codec`) knows nothing of clients; these
helpers put its bytes into a ledger's ``customMetadata``: the create context
with the ledger's first metadata, the close context by a compare-and-set right
after the client's own close (bounded by :data:`bkspark.retry.METADATA_CAS_RETRY`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from bkspark.context.codec import (
    CLOSE_KEY,
    SEAL_TIME_KEY,
    LedgerCloseContext,
    LedgerCreateContext,
    _check_count,
)
from bkspark.errors import InvalidOptionError, LedgerClosedError, MetadataVersionError, NoSuchLedgerMetadataError
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bkspark.retry import METADATA_CAS_RETRY, RetryPolicy

if TYPE_CHECKING:  # only for annotations: the client imports nothing from here
    from bkspark.client.bookkeeper import BookKeeper, LedgerHandle
    from bkspark.metadata.store import Versioned, ZkMetadataStore

__all__ = ["create_ledger_with_context", "record_close_context", "close_with_context"]


def create_ledger_with_context(
    bk: "BookKeeper",
    create_context: LedgerCreateContext,
    *,
    custom_metadata: Mapping[str, bytes] | None = None,
    **kwargs: Any,
) -> "LedgerHandle":
    """``bk.create_ledger(**kwargs)`` with ``create_context`` stored in the ledger's first metadata."""
    if not isinstance(create_context, LedgerCreateContext):
        raise InvalidOptionError("create_context must be a LedgerCreateContext")
    return bk.create_ledger(custom_metadata=create_context.to_custom_metadata(custom_metadata), **kwargs)


def record_close_context(
    store: "ZkMetadataStore",
    ledger_id: int,
    close_context: LedgerCloseContext,
    *,
    scope_id: int = 0,
    seal_time_ms: int | None = None,
    retry: RetryPolicy = METADATA_CAS_RETRY,
) -> "Versioned":
    """Put ``close_context`` (and the seal time) into a CLOSED ledger's customMetadata, by compare-and-set.

    A lost CAS re-reads and tries again (Java's ``MetadataUpdateLoop``) while
    ``retry`` allows, so a concurrent re-replication or ensemble fix is never
    overwritten.  A seal time
    already stored is kept: the ledger was sealed once.  Raises
    :class:`LedgerClosedError` if the ledger is not closed (a close context on
    an open ledger would lie), :class:`NoSuchLedgerMetadataError` if it is gone.
    """
    if not isinstance(close_context, LedgerCloseContext):
        raise InvalidOptionError("close_context must be a LedgerCloseContext")
    seal = int(time.time() * 1000) if seal_time_ms is None else _check_count(seal_time_ms, "seal time")
    encoded = close_context.to_bytes()
    current = store.read_ledger_metadata(ledger_id, scope_id)
    attempts = retry.start()
    while True:
        md = current.metadata
        if md.state != LedgerState.CLOSED:
            raise LedgerClosedError(
                "a close context can only be recorded on a closed ledger", ledger_id=ledger_id, state=md.state.name
            )
        custom = dict(md.custom_metadata)
        custom[CLOSE_KEY] = encoded
        custom.setdefault(SEAL_TIME_KEY, str(seal).encode("ascii"))
        if custom == md.custom_metadata:
            return current
        try:
            return store.write_ledger_metadata(ledger_id, md.with_custom_metadata(custom), current.version, scope_id)
        except MetadataVersionError as exc:
            attempts.backoff(exc)
            current = store.read_ledger_metadata(ledger_id, scope_id)


def close_with_context(
    bk: "BookKeeper",
    handle: "LedgerHandle",
    close_context: LedgerCloseContext,
    *,
    clock: Callable[[], float] = time.time,
) -> LedgerMetadata:
    """Close ``handle`` (the client's own close), then record ``close_context`` and the seal time.

    The client's ``close()`` has no context hook, so the context is a second
    metadata update right after the CLOSED one.  If the close fails because
    someone else (a recovery) closed the ledger first, the context is still
    recorded on the ledger as they closed it, and the close error is raised
    afterwards.  Returns the metadata as finally stored.
    """
    if not isinstance(close_context, LedgerCloseContext):
        raise InvalidOptionError("close_context must be a LedgerCloseContext")
    close_error: BaseException | None = None
    try:
        handle.close()
    except MetadataVersionError as exc:  # recovered concurrently: closed, but not at our end
        close_error = exc
    seal = int(clock() * 1000)
    try:
        versioned = record_close_context(
            bk.store, handle.ledger_id, close_context, scope_id=handle.scope_id, seal_time_ms=seal
        )
    except (LedgerClosedError, NoSuchLedgerMetadataError):
        if close_error is not None:
            raise close_error from None
        raise
    if close_error is not None:
        raise close_error
    return versioned.metadata

