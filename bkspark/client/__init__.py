"""The bkspark BookKeeper client: an asyncio API and a blocking facade over it (see docs/client.md)."""

from bkspark.client.aio import AsyncBookKeeper, AsyncLedgerHandle, AsyncReadHandle
from bkspark.client.bookkeeper import AppendFuture, BookKeeper, LedgerHandle, ReadHandle
from bkspark.client.conf import ClientConf
from bkspark.client.payloads import PackedPayloads
from bkspark.client.reader import LedgerEntry

__all__ = [
    "BookKeeper",
    "LedgerHandle",
    "ReadHandle",
    "AppendFuture",
    "AsyncBookKeeper",
    "AsyncLedgerHandle",
    "AsyncReadHandle",
    "LedgerEntry",
    "ClientConf",
    "PackedPayloads",
]
