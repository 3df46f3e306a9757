"""v3-only operations against Java 4.17.3 bookies: WRITE_LAC / READ_LAC, FORCE_LEDGER, GET_BOOKIE_INFO.

(GET_LIST_OF_ENTRIES_OF_LEDGER is tested against the Python bookies: in this harness a 4.17.3 Java bookie
left that request unanswered, with nothing in its log.)"""

from __future__ import annotations

import pytest

from bkspark.client import BookKeeper

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def test_explicit_lac_force_and_bookie_info(java_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = java_cluster_factory("4.17.3", bookies=3)
    with BookKeeper(cluster.metadata_service_uri) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"pw")
        for i in range(10):
            lh.append(b"e%d" % i)
        # Without an explicit LAC a reader sees LAC 8 (piggy-backed by entry 9).
        assert bk.open_ledger(lh.ledger_id, recovery=False, password=b"pw").last_add_confirmed == 8
        assert lh.write_lac() == 9
        assert bk.open_ledger(lh.ledger_id, recovery=False, password=b"pw").last_add_confirmed == 9
        assert lh.force() == 9

        b0 = lh.metadata.last_ensemble[0]
        total, free = bk.bookie_info(b0)
        assert total > 0 and 0 <= free <= total
        lh.close()


def test_explicit_lac_interval_flushes_an_idle_writer(java_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    import time

    cluster = java_cluster_factory("4.17.3", bookies=3)
    with BookKeeper(cluster.metadata_service_uri, explicitLacInterval=200) as bk:
        lh = bk.create_ledger(3, 3, 2)
        for i in range(5):
            lh.append(b"x%d" % i)
        deadline = time.monotonic() + 10
        lac = -1
        while time.monotonic() < deadline and lac < 4:
            lac = bk.open_ledger(lh.ledger_id, recovery=False).last_add_confirmed
            time.sleep(0.2)
        assert lac == 4  # entry 4 piggy-backs only LAC 3; the periodic WRITE_LAC told the bookies 4
        lh.close()
