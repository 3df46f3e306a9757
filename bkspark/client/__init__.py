"""The bkspark BookKeeper client: an asyncio core with a blocking facade (see docs/client.md)."""

from bkspark.client.bookkeeper import BookKeeper, LedgerHandle, ReadHandle
from bkspark.client.conf import ClientConf
from bkspark.client.reader import LedgerEntry

__all__ = ["BookKeeper", "LedgerHandle", "ReadHandle", "LedgerEntry", "ClientConf"]
