"""A real Apache BookKeeper bookie that refuses adds as too many (ETOOMANYREQUESTS, rc 106).

A Java bookie queues at most ``maxPendingAddRequestsPerThread`` adds on its add thread and refuses the rest with
ETOOMANYREQUESTS. The client, as Apache BookKeeper's Java client does, replaces that bookie when another can take
its place; when none can (where Java's client fails the ledger), it sends the refused adds to the same bookie again
after a back-off (docs/client.md, "Write path"). The Spark writer keeps at most 2,000 adds in flight per task so that
this stays rare (docs/connector.md).
"""

from __future__ import annotations

import pytest

from bkspark.client import BookKeeper
from tests.integration.test_connector_spark import entries_of, read_dataset, spark  # noqa: F401 - the Spark fixture

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


def test_a_java_bookie_refusing_adds_as_too_many_that_none_can_replace_gets_them_again(  # type: ignore[no-untyped-def]
    java_cluster_factory,
) -> None:
    limited = java_cluster_factory("4.17.3", bookies=1, conf_overrides={"maxPendingAddRequestsPerThread": 10})
    payloads = [b"entry-%05d-" % i + bytes(80) for i in range(5000)]
    with BookKeeper(limited.metadata_service_uri) as bk:
        lh = bk.create_ledger(1, 1, 1)
        assert lh.append_many(payloads).result(timeout=120) == range(5000)
        assert lh.append_many(payloads[:3000]).result(timeout=120) == range(5000, 8000)
        # The same bookie from the first entry to the last: no ensemble change.
        assert lh.metadata.ensembles == {0: (limited.bookie_ids[0],)}
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        assert rh.last_add_confirmed == 7999
        assert [entry.payload for entry in rh.read(0, 7999)] == payloads + payloads[:3000]


def test_a_spark_write_on_one_java_bookie_that_refuses_adds_as_too_many_ends_with_every_row(  # type: ignore[no-untyped-def]
    java_cluster_factory, spark  # noqa: F811 - the Spark fixture
) -> None:
    # Two tasks, 2,000 adds in flight each, on one bookie that queues 10: refusals all along, no bookie to move to.
    limited = java_cluster_factory("4.17.3", bookies=1, conf_overrides={"maxPendingAddRequestsPerThread": 10})
    uri = limited.metadata_service_uri
    rows = [(b"row-%06d" % i,) for i in range(20000)]
    df = spark.createDataFrame(rows, "payload binary").repartition(2)
    options = {"metadataServiceUri": uri, "dataset": "busy", "ensembleSize": "1", "writeQuorumSize": "1",
               "ackQuorumSize": "1"}
    df.write.format("bookkeeper").options(**options).mode("append").save()
    written = entries_of(read_dataset(spark, uri, "busy"))
    assert len(written) == 2
    assert sorted(payload for entries in written.values() for _, payload in entries) == [r[0] for r in rows]
    with BookKeeper(uri) as bk:
        for ledger_id, entries in written.items():
            assert [entry_id for entry_id, _ in entries] == list(range(len(entries)))
            assert bk.open_ledger(ledger_id).metadata.ensembles == {0: (limited.bookie_ids[0],)}
