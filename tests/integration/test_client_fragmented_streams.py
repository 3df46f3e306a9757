"""Every client path over streams that the network cuts anywhere: each bookie behind a fault proxy that forwards
every chunk, both ways, in pieces of 1 to a few hundred bytes (``FaultProxy.fragment``; docs/reliability.md).

TCP promises bytes in order, not frames: a frame may end in any read of the socket.  The client's frame splitter
hands a frame cut across reads over in another shape than one that came whole, and the Python bookie reassembles
requests the same way; a path that only handled whole frames once failed the connection on an acknowledgement cut
in two (a forced ensemble change under load).  Here every kind of request and answer is cut: single, pipelined and
bulk adds, single, batched and Arrow reads, striped reads, v2 and v3, on Python and on Java 4.17.3 bookies.  Any
failure would show as an ensemble change (the ledgers are checked to have none) or as a wrong byte.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from bkspark.client import BookKeeper
from tests.harness.proxy import FaultProxy, proxied_bookie_id
from tests.harness.python_bookie import PythonBookieCluster

pytestmark = [pytest.mark.integration, pytest.mark.compat, pytest.mark.fault]

#: The largest piece the proxies cut a chunk into.
MAX_PIECE = 300


@pytest.fixture(params=["python", "java"])
def fragmented(request, zk_root, java_cluster_factory, tmp_path) -> Iterator[tuple[str, list[FaultProxy]]]:  # type: ignore[no-untyped-def]
    """Three bookies of the parameter's kind, each behind a proxy that fragments both directions."""
    proxies = [FaultProxy(name=f"bookie{i}") for i in range(3)]
    ids = [proxied_bookie_id(p) for p in proxies]
    cluster: Any = None
    try:
        if request.param == "java":
            cluster = java_cluster_factory("4.17.3", bookies=3, bookie_ids=ids, start=False)
            addresses = cluster.addresses
        else:
            cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=3, bookie_ids=ids,
                                          journal_sync_data=False)
            addresses = cluster.addresses
        for seed, (proxy, address) in enumerate(zip(proxies, addresses)):
            proxy.target = address
            proxy.fragment(MAX_PIECE, seed=seed)
        cluster.start_all()
        yield zk_root.metadata_service_uri, proxies
    finally:
        if request.param == "python" and cluster is not None:
            cluster.close()
        for proxy in proxies:
            proxy.close()


def _payloads(rng: random.Random, count: int) -> list[bytes]:
    """Entries of every size class: empty, a few bytes, 1 KiB, and now and then 64 KiB (many pieces each)."""
    sizes = [0, 1, 7, 100, 1024, 3000]
    out = []
    for i in range(count):
        size = 65536 if i % 97 == 13 else rng.choice(sizes)
        out.append(rng.randbytes(size))
    return out


@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v3"])
def test_every_path_over_fragmented_streams(fragmented, v2: bool) -> None:  # type: ignore[no-untyped-def]
    uri, proxies = fragmented
    rng = random.Random(14)
    with BookKeeper(uri, bookieAddressResolverEnabled=False, useV2WireProtocol=v2, addEntryTimeoutSec=30,
                    readEntryTimeoutSec=30) as bk:
        for ensemble, quorum, ack in ((3, 3, 2), (3, 2, 2)):  # every bookie holds every entry; striped
            lh = bk.create_ledger(ensemble, quorum, ack)
            written: list[bytes] = []
            for payload in _payloads(rng, 10):  # one at a time
                lh.append(payload)
                written.append(payload)
            pipelined = _payloads(rng, 200)  # queued one after another: sent as runs over v2
            futures = [lh.append_async(p) for p in pipelined]
            assert [f.result(60) for f in futures] == list(range(len(written), len(written) + len(pipelined)))
            written += pipelined
            for _ in range(3):
                bulk = _payloads(rng, 300)
                assert lh.append_many(bulk).result(60) == range(len(written), len(written) + len(bulk))
                written += bulk
            lh.close()
            assert sorted(bk.get_ledger_metadata(lh.ledger_id).ensembles) == [0], "a bookie was given up on"
            last = len(written) - 1
            with bk.open_ledger(lh.ledger_id) as rh:
                assert [e.payload for e in rh.read(0, last)] == written
                assert [e.payload for e in rh.read_batched(0, last)] == written
                got: list[bytes] = []
                for batch in rh.read_batches(0, last):
                    got += batch.column("payload").to_pylist()
                assert got == written
            assert sorted(bk.get_ledger_metadata(lh.ledger_id).ensembles) == [0]
    # The proxies did carry the traffic (the ids name them, not the bookies).
    assert all(p.connections_accepted >= 1 for p in proxies)
