"""Many ledgers, fast (for the planning tests and ``bench.planning``).

* :func:`write_small_ledgers`: real ledgers with real entries, ``concurrency`` of them written at once by one
  :class:`~bkspark.client.aio.AsyncBookKeeper` (create, append, close), so thousands of one-entry ledgers take
  seconds instead of one create after another.
* :func:`write_small_ledgers_in_two_processes`: the same, half of them written by a second process at the same
  time (one writer's client keeps one core busy; ZooKeeper and the bookies take less).
* :func:`create_metadata_only`: closed ledgers whose metadata alone exists (pipelined ZooKeeper multi ops), each
  claiming one entry that no bookie stores: enough to plan 100,000 ledgers, not to read them.
* :func:`publish_dataset`: make a list of ledgers a committed dataset, as one write job would.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bkspark.client import BookKeeper
from bkspark.client.aio import AsyncBookKeeper
from bkspark.datasource.datasets import CommitKey, DatasetRegistry, JobRecord, JobState
from bkspark.protocol import ledger_metadata as md_codec
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState

__all__ = ["write_small_ledgers", "write_small_ledgers_in_two_processes", "payload_of", "create_metadata_only", "publish_dataset"]

#: Ledger creates per ZooKeeper multi op, and multi ops in flight (one transaction per 500 ledgers is ~8x faster
#: here than one pipelined create per ledger).
MULTI_OPS = 500
MULTIS_IN_FLIGHT = 8


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
    first: int = 0,
) -> list[int]:
    """Create ``count`` closed ledgers of ``entries`` entries each, indexes ``first`` to ``first + count - 1``
    (``payload(index, entry)``); their ids, in the order of ``index``."""

    async def write_all() -> list[int]:
        slots = asyncio.Semaphore(concurrency)
        async with AsyncBookKeeper(uri) as bk:

            async def one(index: int) -> int:
                async with slots:
                    handle = await bk.create_ledger(*quorum, "CRC32C", password)
                    if entries:
                        await handle.append_many([payload(first + index, e) for e in range(entries)])
                    await handle.close()
                    return handle.ledger_id

            return list(await asyncio.gather(*(one(i) for i in range(count))))

    return asyncio.run(write_all())


def write_small_ledgers_in_two_processes(uri: str, count: int, **options: Any) -> list[int]:
    """:func:`write_small_ledgers` of ``count`` ledgers, the second half written by a spawned process at the same
    time; the same ids and payloads in the same order (``options`` must pickle)."""
    half = count // 2
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        second = pool.submit(write_small_ledgers, uri, count - half, first=half, **options)
        return write_small_ledgers(uri, half, **options) + second.result()


def create_metadata_only(bk: BookKeeper, ids: Sequence[int]) -> None:
    """Closed one-entry ledgers ``ids``, metadata only, created with pipelined ZooKeeper multi ops."""
    bookies = tuple(sorted(bk.registry.writable_bookies()))[:2]
    md = LedgerMetadata(
        ensemble_size=len(bookies), write_quorum_size=len(bookies), ack_quorum_size=len(bookies),
        state=LedgerState.CLOSED, last_entry_id=0, length=10, ensembles={0: bookies}, ctime=int(time.time() * 1000),
    )
    data = md_codec.serialize(md, version=md.format_version)
    zk = bk.store.zk
    for path in sorted({bk.store.ledger_path(lid).rsplit("/", 1)[0] for lid in ids}):
        zk.ensure_path(path)
    pending: list = []
    for start in range(0, len(ids), MULTI_OPS):
        transaction = zk.transaction()
        for lid in ids[start : start + MULTI_OPS]:
            transaction.create(bk.store.ledger_path(lid), data)
        pending.append(transaction.commit_async())
        if len(pending) == MULTIS_IN_FLIGHT or start + MULTI_OPS >= len(ids):
            for result in pending:
                created = result.get(timeout=120)
                failed = [op for op in created if isinstance(op, Exception)]  # a failed op comes back in the results
                if failed:
                    raise RuntimeError(f"ledger metadata creates failed: {failed[:3]}")
            pending = []


def publish_dataset(bk: BookKeeper, dataset: str, ids: Sequence[int], scope_id: int = 0) -> None:
    """Commit ``ids`` as dataset ``dataset`` (one job, as the Spark writer's commit would)."""
    registry = DatasetRegistry(bk.store.zk, bk.store.root)
    job_id = uuid.uuid4().hex
    registry.begin_job(job_id, JobRecord(JobState.WRITING, dataset))
    registry.register(job_id, scope_id, ids[0])
    result = registry.publish(dataset, [(scope_id, lid) for lid in ids], replace_all=False, job_id=job_id,
                              key=CommitKey(job_id))
    if result.root.ledger_count < len(ids):
        raise RuntimeError(f"dataset {dataset!r} holds {result.root.ledger_count} ledgers, not {len(ids)}")
    registry.forget_job(job_id)
