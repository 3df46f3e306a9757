"""A real Apache BookKeeper bookie that refuses adds as too many (ETOOMANYREQUESTS, rc 106).

A Java bookie queues at most ``maxPendingAddRequestsPerThread`` adds on its add thread and refuses the rest with
ETOOMANYREQUESTS. The client, as Apache BookKeeper's Java client does, replaces that bookie (docs/client.md, "Write
path"); that is why the Spark writer keeps at most 2,000 adds in flight per task (docs/connector.md).
"""

from __future__ import annotations

import pytest

from bkspark.client import BookKeeper

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def test_a_java_bookie_refusing_adds_as_too_many_is_replaced_and_nothing_is_lost(  # type: ignore[no-untyped-def]
    java_cluster_factory,
) -> None:
    limited = java_cluster_factory("4.17.3", bookies=1, conf_overrides={"maxPendingAddRequestsPerThread": 10})
    spare = java_cluster_factory("4.17.3", bookies=1)  # the same ledgers root: one cluster of two bookies
    refusing, other = limited.bookie_ids[0], spare.bookie_ids[0]
    payloads = [b"entry-%05d-" % i + bytes(80) for i in range(5000)]
    with BookKeeper(limited.metadata_service_uri) as bk:
        lh = bk.create_ledger(1, 1, 1)
        while lh.metadata.last_ensemble[0] != refusing:  # the placement is random: until the limited one is chosen
            lh.close()
            bk.delete_ledger(lh.ledger_id)
            lh = bk.create_ledger(1, 1, 1)
        assert lh.append_many(payloads).result(timeout=120) == range(5000)
        # It began on the limited bookie and ends on the other (a change at entry 0, before any acknowledgement,
        # rewrites the first segment rather than adding one).
        assert list(lh.metadata.last_ensemble) == [other]
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        assert rh.last_add_confirmed == 4999
        assert [entry.payload for entry in rh.read(0, 4999)] == payloads
