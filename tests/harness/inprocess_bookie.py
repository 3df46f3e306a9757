"""A Python bookie in the calling process's event loop: the unit tests' bookie and ``bench.bookie_loop``'s."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from bookie_server.bookie import Bookie
from bkspark.config.bookie import BookieConfig
from bookie_server.metrics import BookieMetrics
from bookie_server.server import BookieServer


def bookie_conf(base_dir: Path, **conf: object) -> BookieConfig:
    """A test bookie's settings: journal and ledgers under ``base_dir``, a free loopback port, journal without
    fsync; ``conf`` adds or overrides keys."""
    values: dict[str, object] = {
        "journalDirectories": str(base_dir / "j"),
        "ledgerDirectories": str(base_dir / "l"),
        "bookiePort": 0,
        "bindAddress": "127.0.0.1",
        "journalSyncData": "false",
    }
    values.update(conf)
    return BookieConfig.from_mapping(values)


@contextlib.asynccontextmanager
async def started_bookie(base_dir: Path, **conf: object) -> AsyncIterator[tuple[Bookie, BookieServer]]:
    """A started ``Bookie`` and ``BookieServer`` with :func:`bookie_conf`'s settings; stopped (connections closed)
    on exit."""
    cfg = bookie_conf(base_dir, **conf)
    metrics = BookieMetrics()
    bookie = Bookie(cfg, metrics=metrics)
    await bookie.start()
    server = BookieServer(bookie, cfg, metrics)
    await server.start()
    try:
        yield bookie, server
    finally:
        await server.stop_accepting()
        await server.close_connections()
        await bookie.stop()
