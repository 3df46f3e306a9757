"""Many small ledgers with real entries, written fast (for planning tests and ``bench.planning``).

One :class:`~bkspark.client.aio.AsyncBookKeeper` on its own loop, ``concurrency`` ledgers being written at once
(create, append, close), so thousands of one-entry ledgers take seconds instead of one create after another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from bkspark.client.aio import AsyncBookKeeper

__all__ = ["write_small_ledgers", "payload_of"]


def payload_of(index: int, entry: int) -> bytes:
    """The default payload of entry ``entry`` of the ``index``-th ledger: says where it belongs."""
    return f"ledger-{index}-entry-{entry}".encode()


def write_small_ledgers(
    uri: str,
    count: int,
    *,
    entries: int = 1,
    quorum: tuple[int, int, int] = (1, 1, 1),
    password: bytes = b"",
    concurrency: int = 64,
    payload: Callable[[int, int], bytes] = payload_of,
) -> list[int]:
    """Create ``count`` closed ledgers of ``entries`` entries each; their ids, in the order of ``index``."""

    async def write_all() -> list[int]:
        slots = asyncio.Semaphore(concurrency)
        async with AsyncBookKeeper(uri) as bk:

            async def one(index: int) -> int:
                async with slots:
                    handle = await bk.create_ledger(*quorum, "CRC32C", password)
                    if entries:
                        await handle.append_many([payload(index, e) for e in range(entries)])
                    await handle.close()
                    return handle.ledger_id

            return list(await asyncio.gather(*(one(i) for i in range(count))))

    return asyncio.run(write_all())
