"""Seed 135's hang, made deterministic: every bookie of a ledger's ensemble cut half-open at once
(docs/reliability.md, "Seed 135").

A half-open cut leaves the client's connections open and silent: nothing answers, nothing closes. Adds must then
time out after ``addEntryTimeoutSec``, the writer must change ensemble onto the other bookies (or fail with a typed
error), and never wait for ever.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkspark.client import BookKeeper
from tests.harness.deadline import GENEROUS
from tests.harness.proxy import FaultProxy, proxied_bookie_id
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import ZkRoot

pytestmark = [pytest.mark.integration, pytest.mark.fault]


@pytest.fixture
def proxied_bookies(zk_root: ZkRoot, tmp_path: Path) -> Iterator[tuple[PythonBookieCluster, list[FaultProxy]]]:
    proxies = [FaultProxy(name=f"py{i}") for i in range(5)]
    cluster = PythonBookieCluster(
        zk_root.metadata_service_uri,
        tmp_path / "bookies",
        bookies=5,
        bookie_ids=[proxied_bookie_id(p) for p in proxies],
    )
    try:
        for proxy, address in zip(proxies, cluster.addresses):
            proxy.target = address
        cluster.start_all()
        yield cluster, proxies
    finally:
        cluster.close()
        for proxy in proxies:
            proxy.close()


def test_half_open_cut_of_the_whole_ensemble_changes_ensemble(proxied_bookies) -> None:  # type: ignore[no-untyped-def]
    cluster, proxies = proxied_bookies
    by_id = {proxied_bookie_id(p): p for p in proxies}
    conf = {"bookieAddressResolverEnabled": False, "addEntryTimeoutSec": 1}
    with BookKeeper(cluster.metadata_service_uri, conf=conf) as bk:
        lh = bk.create_ledger(3, 3, 3)
        for i in range(5):
            lh.append(b"before-%d" % i)
        ensemble = list(lh.metadata.last_ensemble)
        for bookie in ensemble:
            by_id[bookie].half_open()
        deadline = time.monotonic() + GENEROUS
        futures = [lh.append_async(b"during-%d" % i) for i in range(10)]
        outcomes: list[object] = []
        for fut in futures:
            try:
                outcomes.append(fut.result(timeout=max(0.0, deadline - time.monotonic())))
            except TimeoutError:
                pytest.fail(f"the adds neither completed nor failed within {GENEROUS:g} s (seed 135's hang); done: {outcomes}")
        # Each add timed out on the cut bookies after addEntryTimeoutSec, the silent connections were dropped, the
        # ensemble changed onto the two untouched bookies (and one cut one, reached again over a new connection).
        assert outcomes == list(range(5, 15))
        md = bk.get_ledger_metadata(lh.ledger_id)
        assert sorted(md.ensembles) == [0, 5] and list(md.ensembles[5]) != ensemble
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        expected = [b"before-%d" % i for i in range(5)] + [b"during-%d" % i for i in range(10)]
        assert [bytes(e.payload) for e in rh.read(0, 14)] == expected
