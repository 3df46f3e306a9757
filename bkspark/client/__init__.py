"""The bkspark BookKeeper client: an asyncio API and a blocking facade over it (see docs/client.md).

The names below are imported on first use (PEP 562): a module of this package that needs none of them (the Arrow
helpers, the configuration, the payload buffers) is imported without the whole client, which keeps a Spark
planner process that only checks options from paying for it (docs/connector.md, "Process model").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bkspark.client.aio import AsyncBookKeeper, AsyncLedgerHandle, AsyncReadHandle
    from bkspark.client.bookkeeper import AppendFuture, BookKeeper, LedgerHandle, ReadHandle
    from bkspark.client.conf import ClientConf
    from bkspark.client.payloads import PackedPayloads
    from bkspark.client.reader import LedgerEntry

#: Each public name and the module that defines it.
_HOMES = {
    "BookKeeper": "bkspark.client.bookkeeper",
    "LedgerHandle": "bkspark.client.bookkeeper",
    "ReadHandle": "bkspark.client.bookkeeper",
    "AppendFuture": "bkspark.client.bookkeeper",
    "AsyncBookKeeper": "bkspark.client.aio",
    "AsyncLedgerHandle": "bkspark.client.aio",
    "AsyncReadHandle": "bkspark.client.aio",
    "LedgerEntry": "bkspark.client.reader",
    "ClientConf": "bkspark.client.conf",
    "PackedPayloads": "bkspark.client.payloads",
}

__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
