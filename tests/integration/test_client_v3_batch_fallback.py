"""v3 batch reads sent to Java bookies that do not serve them (docs/extensions.md §3.2, docs/architecture.md).

A Java bookie never advertises ``batch-read-v3``; these tests make the client believe it does (a stale
registration, as after a downgrade) and check the fallback: Java 4.17 answers EBADREQ, Java 4.16 cannot
parse the request and closes the connection; either way the read completes with single v3 reads and
the bookie is remembered as unable to serve v3 batch reads.
"""

from __future__ import annotations

import pytest

from bkspark.client import BookKeeper
from bkspark.errors import BadRequestError, BookieUnavailableError
from bkspark.protocol.service_info import BATCH_READ_V3_EXTENSION

pytestmark = [pytest.mark.integration, pytest.mark.compat]


@pytest.mark.parametrize("version", ["4.17.3", "4.16.6"])
def test_v3_batch_read_falls_back_and_is_remembered_per_bookie(java_cluster_factory, version) -> None:  # type: ignore[no-untyped-def]
    cluster = java_cluster_factory(version, bookies=3)
    with BookKeeper(cluster.metadata_service_uri, useV2WireProtocol=False, readEntryTimeoutSec=10) as bk:
        lh = bk.create_ledger(3, 3, 2)
        for i in range(60):
            lh.append_async(b"entry-%03d" % i)
        lh.close()
        # The stale registration: every bookie "advertises" our v3 batch read.
        bk.registry.extensions = lambda bookie_id: frozenset({BATCH_READ_V3_EXTENSION})  # type: ignore[method-assign]
        rh = bk.open_ledger(lh.ledger_id)
        ensemble = set(lh.metadata.last_ensemble)
        # What each Java version does with the request, seen through the ops layer.
        probe = lh.metadata.last_ensemble[0]
        expected = BadRequestError if version == "4.17.3" else BookieUnavailableError
        with pytest.raises(expected):
            bk.run_coroutine(bk.aio.services.ops.batch_read_async(probe, lh.ledger_id, 0, 10, 0, 0))
        assert bk.aio.pool.batch_unsupported["v3"] == {probe}
        bk.run_coroutine(_forget(bk, probe))
        first = rh.batch_read(0, 20)
        assert first and [e.payload for e in first] == [b"entry-%03d" % i for i in range(len(first))]
        unsupported = bk.aio.pool.batch_unsupported["v3"]
        assert unsupported and unsupported <= ensemble
        assert not bk.aio.pool.batch_unsupported["v2"]
        # Every later call completes too; each bookie is tried for a batch at most once.
        everything = list(rh.read_batched(0, 59, batch_size=20, parallel=1))
        assert [e.payload for e in everything] == [b"entry-%03d" % i for i in range(60)]
        for _ in range(3):
            assert rh.batch_read(40, 20)[0].payload == b"entry-040"
        assert bk.aio.pool.batch_unsupported["v3"] == ensemble
        # Single reads and other v3 calls on the same bookies still work.
        assert rh.read(59, 59)[0].payload == b"entry-059"
        assert rh.read_last_add_confirmed() == 59


async def _forget(bk: BookKeeper, bookie_id: str) -> None:
    """Clear the pool's memory of one bookie (loop thread), as a new registration of it would."""
    bk.aio.pool.batch_unsupported["v3"].discard(bookie_id)
