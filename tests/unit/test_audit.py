"""The orphan audit's judgement and its ZooKeeper records, without servers."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from bkspark.audit.records import (
    AuditConfig,
    AuditStatus,
    OrphanReason,
    OrphanRecord,
    audit_root,
    decode_records,
    encode_records,
    orphans_path,
)
from bkspark.audit.scan import orphan_reasons
from bkspark.context import CLOSE_KEY, CREATE_KEY, LedgerCloseContext, LedgerCreateContext, LedgerLink
from bkspark.errors import BadLedgerContextError, BadMetadataError, InvalidOptionError
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState

DELETE_AT = datetime.fromtimestamp(1615839671, timezone.utc)
DELETE_MS = 1615839671000


def closed(custom: dict[str, bytes]) -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, state=LedgerState.CLOSED, last_entry_id=0, length=1,
        ensembles={0: ("127.0.0.1:3181",)}, custom_metadata=custom,
    )


def with_delete(at: datetime = DELETE_AT) -> LedgerMetadata:
    return closed({CLOSE_KEY: LedgerCloseContext.builder().because_no_more_data().expect_delete_after(at).build().to_bytes()})


def child_of(parent: int, scope: int = 0) -> LedgerMetadata:
    return closed({CREATE_KEY: LedgerCreateContext.builder().child_of_ledger(parent, scope).build().to_bytes()})


def never(_: LedgerLink) -> bool:
    raise AssertionError("parent existence asked for a ledger without a parent")


def test_delete_overdue_only_after_the_grace_period():
    grace = 60_000
    assert orphan_reasons(0, 5, with_delete(), DELETE_MS + grace, grace, never) == []
    found = orphan_reasons(0, 5, with_delete(), DELETE_MS + grace + 1, grace, never)
    assert found == [OrphanRecord(5, 0, OrphanReason.DELETE_OVERDUE, 1615839671)]


def test_broken_parent_ref_asks_about_the_right_parent():
    asked: list[LedgerLink] = []

    def exists(link: LedgerLink) -> bool:
        asked.append(link)
        return link.ledger_id == 1

    assert orphan_reasons(0, 5, child_of(1), 0, 0, exists) == []
    found = orphan_reasons(0, 6, child_of(2, scope=9), 0, 0, exists)
    assert found == [OrphanRecord(6, 0, OrphanReason.BROKEN_PARENT_REF, 2, detail_scope_id=9)]
    assert found[0].detail_label == "00000000000000090000000000000002"
    assert asked == [LedgerLink(1), LedgerLink(2, 9)]


def test_parent_grace_spares_young_children_only():
    md = LedgerMetadata(
        ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, ensembles={0: ("127.0.0.1:3181",)},
        custom_metadata={CREATE_KEY: LedgerCreateContext.builder().child_of_ledger(2).build().to_bytes()},
        ctime=1_000_000,
    )
    absent = lambda _: False  # noqa: E731
    assert orphan_reasons(0, 5, md, 1_000_000 + 59_999, 0, absent, parent_grace_ms=60_000) == []
    found = orphan_reasons(0, 5, md, 1_000_000 + 60_000, 0, absent, parent_grace_ms=60_000)
    assert [r.reason for r in found] == [OrphanReason.BROKEN_PARENT_REF]
    # Without a grace (the seed's rule) a missing parent counts at once.
    assert orphan_reasons(0, 5, md, 1_000_000, 0, absent)[0].detail == 2


def test_both_reasons_at_once_and_none_without_context():
    md = closed({
        CREATE_KEY: LedgerCreateContext.builder().child_of_ledger(3).build().to_bytes(),
        CLOSE_KEY: LedgerCloseContext.builder().expect_delete_after(DELETE_AT).build().to_bytes(),
    })
    reasons = {r.reason for r in orphan_reasons(0, 5, md, DELETE_MS + 1, 0, lambda _: False)}
    assert reasons == {OrphanReason.DELETE_OVERDUE, OrphanReason.BROKEN_PARENT_REF}
    assert orphan_reasons(0, 5, closed({"app": b"x"}), DELETE_MS * 2, 0, never) == []


def test_malformed_context_is_reported_not_swallowed():
    with pytest.raises(BadLedgerContextError):
        orphan_reasons(0, 5, closed({CLOSE_KEY: b"{garbage"}), 0, 0, never)


def test_records_round_trip_and_name_the_ledger_by_qualified_name():
    records = [
        OrphanRecord(5, 0, OrphanReason.DELETE_OVERDUE, 1615839671, first_seen_ms=1),
        OrphanRecord(5, 0, OrphanReason.BROKEN_PARENT_REF, 100277, first_seen_ms=2),
    ]
    name = records[0].name
    assert name == "00000000000000000000000000000005" and records[0].ledger_label == "5"
    assert decode_records(name, encode_records(records)) == records
    scoped = OrphanRecord(5, -1, OrphanReason.DELETE_OVERDUE, 1)
    assert scoped.ledger_label == "ffffffffffffffff0000000000000005"


def test_stored_records_and_config_have_the_documented_json_shapes():
    """Other tools read these znodes by the documented keys (docs/context-and-audit.md, ZooKeeper layout), so a
    renamed key is a broken promise even when our own round trip still works."""
    stored = json.loads(encode_records([OrphanRecord(5, 0, OrphanReason.BROKEN_PARENT_REF, 7, 9, first_seen_ms=3)]))
    assert stored == {"v": 1, "reasons": [{
        "ledgerId": 5, "scopeId": 0, "reason": "BROKEN_PARENT_REF", "detail": 7, "detailScopeId": 9, "firstSeenMs": 3,
    }]}
    assert json.loads(AuditConfig(300, 3600, 0).to_bytes()) == {
        "v": 1, "auditPeriodSeconds": 300.0, "gracePeriodSeconds": 3600.0, "parentGracePeriodSeconds": 0.0,
    }


@pytest.mark.parametrize(
    "name, data",
    [
        ("00000000000000000000000000000005", b"junk"),
        ("00000000000000000000000000000005", b'{"reasons": []}'),
        ("00000000000000000000000000000005", b'{"reasons": [{"ledgerId": 6, "scopeId": 0, "reason": "DELETE_OVERDUE", "detail": 1}]}'),
        ("00000000000000000000000000000005", b'{"reasons": [{"ledgerId": 5, "scopeId": 0, "reason": "SAD", "detail": 1}]}'),
        ("00000000000000000000000000000005", b'{"reasons": [{"ledgerId": 5, "scopeId": 0, "reason": "DELETE_OVERDUE", "detail": "1"}]}'),
        ("not-a-name", encode_records([OrphanRecord(5, 0, OrphanReason.DELETE_OVERDUE, 1)])),
    ],
)
def test_malformed_records_are_a_typed_error(name, data):
    with pytest.raises(BadMetadataError):
        decode_records(name, data)


def test_config_parses_partial_znodes_over_defaults_and_validates():
    defaults = AuditConfig(audit_period=30, grace_period=10)
    assert AuditConfig.from_bytes(b'{"gracePeriodSeconds": 5}', defaults) == AuditConfig(30, 5)
    assert AuditConfig.from_bytes(b"", defaults) == defaults
    assert AuditConfig.from_bytes(AuditConfig(1.5, 0, 30).to_bytes()) == AuditConfig(1.5, 0, 30)
    assert AuditConfig.from_bytes(b'{"parentGracePeriodSeconds": 9}', defaults).parent_grace_period == 9
    for bad in (b"[]", b"nope", b'{"auditPeriodSeconds": 0}', b'{"gracePeriodSeconds": -1}', b'{"auditPeriodSeconds": "5"}',
                b'{"parentGracePeriodSeconds": -2}'):
        with pytest.raises(BadMetadataError):
            AuditConfig.from_bytes(bad)
    with pytest.raises(InvalidOptionError):
        AuditConfig(audit_period=float("inf"))


def test_status_round_trips_and_rejects_junk():
    status = AuditStatus("a1", 1, 2, 3, 4, 5, 6)
    assert AuditStatus.from_bytes(json.dumps(status.to_json()).encode()) == status
    with pytest.raises(BadMetadataError):
        AuditStatus.from_bytes(b'{"auditor": 5}')


def test_audit_znodes_sit_where_java_never_walks():
    # Java descends only into root children of 2 or 3 digits (docs/scoped-ledger-paths.md).
    assert audit_root("/ledgers") == "/ledgers/bkspark/audit"
    assert orphans_path("/ledgers").split("/")[2] == "bkspark"
    assert audit_root("") == "/bkspark/audit"


def test_delete_overdue_uses_exact_milliseconds():
    at = DELETE_AT + timedelta(milliseconds=999)
    assert orphan_reasons(0, 5, with_delete(at), DELETE_MS + 999, 0, never) == []
    assert orphan_reasons(0, 5, with_delete(at), DELETE_MS + 1000, 0, never)[0].detail == 1615839671
