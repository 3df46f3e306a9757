"""BP-44's close context is a second metadata update after the client's close: what is left between the two
steps, against a real ZooKeeper and a Python bookie."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from bkspark.audit import Auditor, OrphanReason
from bkspark.client import BookKeeper
from bkspark.context import LedgerCloseContext, close_with_context, create_ledger_with_context, read_context
from bkspark.errors import BKError, NoSuchLedgerMetadataError
from tests.harness.proxy import Direction, FaultProxy, proxied_bookie_id
from tests.harness.python_bookie import PythonBookieCluster
from tests.integration.test_shell_between_steps import CREATE

pytestmark = pytest.mark.integration


def orphans(uri: str) -> dict[int, set[OrphanReason]]:
    """One audit pass with no grace period: ledger id -> its reasons."""
    auditor = Auditor(uri, grace_period=0, audit_period=3600)
    try:
        result = auditor.audit_once(record=False)
    finally:
        auditor.stop()
    found: dict[int, set[OrphanReason]] = {}
    for record in result.orphans:
        found.setdefault(record.ledger_id, set()).add(record.reason)
    return found


def test_a_close_context_left_unwritten_is_written_by_running_close_with_context_again(
    zk_root: Any, tmp_path: Path
) -> None:
    """Closed, then the context write did not happen (the process failed in between): the ledger is closed with
    its create context only, and the audit cannot know when it should go. ``close_with_context`` run again on the
    closed handle records the context (the close is not repeated), and the audit then reports it; a ledger deleted
    meanwhile is a typed error, not a context written into nothing."""
    uri = zk_root.metadata_service_uri
    overdue = (
        LedgerCloseContext.builder().because_no_more_data()
        .expect_delete_after(datetime.now(timezone.utc) - timedelta(minutes=1)).build()
    )
    with PythonBookieCluster(uri, tmp_path, bookies=1) as cluster, BookKeeper(uri) as bk:
        cluster.start_all()
        handles = [create_ledger_with_context(bk, CREATE, ensemble_size=1, write_quorum_size=1, ack_quorum_size=1)
                   for _ in range(2)]
        for handle in handles:
            handle.append(b"row")
            handle.close()  # step 1 of close_with_context; step 2 never ran
        kept, deleted = handles
        md = bk.get_ledger_metadata(kept.ledger_id)
        assert md.is_closed and read_context(md).close is None
        assert kept.ledger_id not in orphans(uri)

        md = close_with_context(bk, kept, overdue)
        assert md.last_entry_id == 0 and read_context(md).close == overdue and read_context(md).create == CREATE
        assert orphans(uri).get(kept.ledger_id) == {OrphanReason.DELETE_OVERDUE}

        bk.delete_ledger(deleted.ledger_id)
        with pytest.raises(NoSuchLedgerMetadataError):
            close_with_context(bk, deleted, overdue)



def test_close_with_context_on_a_ledger_a_recovery_closed_first_records_the_context_then_raises(
    zk_root: Any, tmp_path: Path
) -> None:
    """docs/context-and-audit.md: when the writer's close fails because a recovery closed the ledger first (at
    another end: the writer never heard its last add acknowledged), the context is still recorded on the ledger
    as the recovery closed it, then the close error is raised; the seal time is the time close() returned."""
    uri = zk_root.metadata_service_uri
    abnormal = LedgerCloseContext.builder().because_client_shutdown().closing_abnormally("fenced").build()
    proxy = FaultProxy(name="bookie0")
    try:
        with PythonBookieCluster(uri, tmp_path, bookies=1, bookie_ids=[proxied_bookie_id(proxy)]) as cluster:
            proxy.target = cluster.addresses[0]
            cluster.start_all()
            # The writer dials the bookie through the proxy; the recovering client dials it directly.
            with BookKeeper(uri, bookieAddressResolverEnabled=False, addEntryTimeoutSec=2) as writer, \
                    BookKeeper(uri) as other:
                handle = create_ledger_with_context(
                    writer, CREATE, ensemble_size=1, write_quorum_size=1, ack_quorum_size=1
                )
                handle.append(b"a")
                handle.append(b"b")
                proxy.blackhole(Direction.DOWN)  # the bookie stores entry 2, the writer never hears so
                pending = handle.append_async(b"c")
                time.sleep(0.5)
                other.open_ledger(handle.ledger_id, recovery=True)  # fences, closes at entry 2
                recovered_md = other.get_ledger_metadata(handle.ledger_id)
                assert recovered_md.is_closed and recovered_md.last_entry_id == 2

                with pytest.raises(BKError):
                    close_with_context(writer, handle, abnormal, clock=lambda: 1_700_000_000.5)
                with pytest.raises(BKError):
                    pending.result(10)
                md = other.get_ledger_metadata(handle.ledger_id)
                ctx = read_context(md)
                assert ctx.close == abnormal and ctx.create == CREATE and ctx.seal_time_ms == 1_700_000_000_500
                assert (md.last_entry_id, md.length) == (recovered_md.last_entry_id, recovered_md.length)
    finally:
        proxy.close()
