"""v3-only operations against Java 4.17.3 bookies: WRITE_LAC / READ_LAC, FORCE_LEDGER, bookie info, entry lists."""

from __future__ import annotations

import pytest

from bkspark.client import BookKeeper
from bkspark.errors import NoSuchLedgerError

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def test_explicit_lac_force_info_and_entry_lists(java_cluster_factory) -> None:  # type: ignore[no-untyped-def]
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
        # E=3/W=2: bookie 0 holds the entries whose write set includes index 0.
        expected = [e for e in range(10) if 0 in ((e) % 3, (e + 1) % 3)]
        assert bk.list_entries_on_bookie(b0, lh.ledger_id) == expected
        with pytest.raises(NoSuchLedgerError):
            bk.list_entries_on_bookie(b0, lh.ledger_id + 999)
        lh.close()
