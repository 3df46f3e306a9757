"""ZooKeeper paths: Java's StringUtils / ledger managers / id generators, char for char."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkspark.errors import BadMetadataError, InvalidOptionError
from bkspark.protocol import zk_paths as zp

ROOT = "/ledgers"

# docs/protocol.md §8 worked examples (hybrid, long).
SPEC_PATHS = [
    (0, "/00/0000/L0000", "/000/0000/0000/0000/L0000"),
    (5, "/00/0000/L0005", "/000/0000/0000/0000/L0005"),
    (123456789, "/01/2345/L6789", "/000/0000/0001/2345/L6789"),
    (2147483646, "/21/4748/L3646", "/000/0000/0021/4748/L3646"),
    (2147483647, "/000/0000/0021/4748/L3647", "/000/0000/0021/4748/L3647"),
    (4294967301, "/000/0000/0042/9496/L7301", "/000/0000/0042/9496/L7301"),
    (9223372036854775807, "/922/3372/0368/5477/L5807", "/922/3372/0368/5477/L5807"),
]


@pytest.mark.parametrize("ledger_id, hybrid, long", SPEC_PATHS)
def test_spec_paths(ledger_id: int, hybrid: str, long: str) -> None:
    assert zp.ledger_path(ROOT, ledger_id) == ROOT + hybrid
    assert zp.ledger_path(ROOT, ledger_id, "longhierarchical") == ROOT + long
    assert zp.parse_ledger_path(ROOT, ROOT + hybrid) == (0, ledger_id)
    assert zp.ledger_id_from_path(ROOT, ROOT + long, "longhierarchical") == ledger_id


def test_legacy_and_flat() -> None:
    assert zp.ledger_path(ROOT, 5, "legacyhierarchical") == "/ledgers/00/0000/L0005"
    assert zp.ledger_path(ROOT, 5, "flat") == "/ledgers/L0000000005"
    assert zp.ledger_path(ROOT, 12345678901, "flat") == "/ledgers/L12345678901"  # %010d prints longer ids in full
    assert zp.parse_ledger_path(ROOT, "/ledgers/L12345678901", "flat") == (0, 12345678901)
    with pytest.raises(InvalidOptionError, match="legacy"):
        zp.ledger_path(ROOT, 2**31 - 1, "legacyhierarchical")
    with pytest.raises(BadMetadataError):
        zp.parse_ledger_path(ROOT, "/ledgers/L05", "flat")


def test_root_forms() -> None:
    assert zp.ledger_path("", 5) == "/00/0000/L0005"
    assert zp.ledger_path("/a/b", 5) == "/a/b/00/0000/L0005"
    for bad in ("ledgers", "/ledgers/", "/", "/a//b"):
        with pytest.raises(InvalidOptionError, match="root"):
            zp.ledger_path(bad, 5)


@pytest.mark.parametrize("bad_id", [-1, 2**63, True, 1.0])
def test_bad_ledger_ids(bad_id: object) -> None:
    with pytest.raises(InvalidOptionError):
        zp.ledger_path(ROOT, bad_id)  # type: ignore[arg-type]


def test_scoped_paths() -> None:
    assert zp.ledger_path(ROOT, 5, scope_id=7) == "/ledgers/scopes/0000/0000/0000/0000/0007/000/0000/0000/0000/L0005"
    assert zp.ledger_path(ROOT, 5, "longhierarchical", scope_id=7) == zp.ledger_path(ROOT, 5, scope_id=7)
    assert zp.scope_path(ROOT, -1) == "/ledgers/scopes/1844/6744/0737/0955/1615"
    assert zp.scope_path(ROOT, -(2**63)) == "/ledgers/scopes/0922/3372/0368/5477/5808"
    assert zp.parse_ledger_path(ROOT, zp.ledger_path(ROOT, 9, scope_id=-1)) == (-1, 9)
    assert zp.scopes_root(ROOT) == "/ledgers/scopes"
    with pytest.raises(InvalidOptionError, match="flat"):
        zp.ledger_path(ROOT, 5, "flat", scope_id=1)
    with pytest.raises(InvalidOptionError, match="scope 0"):
        zp.scope_path(ROOT, 0)
    with pytest.raises(InvalidOptionError):
        zp.ledger_path(ROOT, 5, scope_id=2**63)


def test_scopes_node_is_invisible_to_java_listing() -> None:
    # Java only descends into root children that match its ledger-parent regex.
    for scheme in ("hierarchical", "longhierarchical", "legacyhierarchical"):
        assert not zp.is_ledger_parent_node(zp.SCOPES, scheme)
    assert zp.is_ledger_parent_node("00") and zp.is_ledger_parent_node("000")
    assert not zp.is_ledger_parent_node("000", "legacyhierarchical") and not zp.is_ledger_parent_node("00", "longhierarchical")
    assert not zp.is_ledger_parent_node("\u0661\u0662")  # Java's \d is ASCII only
    assert not zp.is_special_znode(zp.SCOPES)


@pytest.mark.parametrize(
    "path",
    [
        "/other/00/0000/L0005",
        "/ledgers/00/0000/0005",  # no L
        "/ledgers/0/0000/L0005",  # not padded
        "/ledgers/000/0000/0000/0000/L0005",  # small id in long form under the hybrid scheme
        "/ledgers/99/9999/L9999",  # >= Integer.MAX_VALUE in short form
        "/ledgers/00/0000",
        "/ledgers/available/x:1",
        "/ledgers/scopes/0000/0000/0000/0000/0000/000/0000/0000/0000/L0005",  # scope 0
        "/ledgers/scopes/9999/9999/9999/9999/9999/000/0000/0000/0000/L0005",  # > 64 bits
        "/ledgers/scopes/0000/0000/0000/0000/0001/000/0000/0000/0000",
        "/ledgers/999/9999/9999/9999/L9999",  # > int64
    ],
)
def test_non_canonical_paths_rejected(path: str) -> None:
    with pytest.raises(BadMetadataError):
        zp.parse_ledger_path(ROOT, path)


def test_scope_zero_only_for_ledger_id_from_path() -> None:
    with pytest.raises(BadMetadataError, match="scope 3"):
        zp.ledger_id_from_path(ROOT, zp.ledger_path(ROOT, 1, scope_id=3))


@given(st.integers(0, 2**63 - 1), st.integers(-(2**63), 2**63 - 1), st.sampled_from(["hierarchical", "longhierarchical"]))
def test_round_trip(ledger_id: int, scope_id: int, scheme: str) -> None:
    path = zp.ledger_path(ROOT, ledger_id, scheme, scope_id)
    assert zp.parse_ledger_path(ROOT, path, scheme) == (scope_id, ledger_id)
    assert path.rsplit("/", 1)[1].startswith("L")


@given(st.integers(0, 2**31 - 2))
def test_round_trip_legacy(ledger_id: int) -> None:
    path = zp.ledger_path(ROOT, ledger_id, "legacyhierarchical")
    assert zp.parse_ledger_path(ROOT, path, "legacyhierarchical") == (0, ledger_id)


def test_special_znodes() -> None:
    for name in ("available", "cookies", "LAYOUT", "INSTANCEID", "underreplication", "idgen", "idgen-long", "ID-0000000001"):
        assert zp.is_special_znode(name)
    for name in ("L0005", "00", "layout", "readonly", "disableHealthCheck"):
        assert not zp.is_special_znode(name)


def test_cluster_paths() -> None:
    assert zp.available_path(ROOT) == "/ledgers/available"
    assert zp.readonly_path(ROOT) == "/ledgers/available/readonly"
    assert zp.bookie_registration_path(ROOT, "h:1") == "/ledgers/available/h:1"
    assert zp.bookie_registration_path(ROOT, "h:1", readonly=True) == "/ledgers/available/readonly/h:1"
    assert zp.cookie_path(ROOT, "h:1") == "/ledgers/cookies/h:1"
    assert zp.layout_path(ROOT) == "/ledgers/LAYOUT"
    assert zp.instance_id_path(ROOT) == "/ledgers/INSTANCEID"
    assert zp.disable_health_check_path(ROOT) == "/ledgers/disableHealthCheck"
    assert zp.underreplication_path(ROOT) == "/ledgers/underreplication"


def test_underreplication_paths() -> None:
    assert zp.underreplicated_ledger_path(ROOT, 5) == "/ledgers/underreplication/ledgers/0000/0000/0000/0005/urL0000000005"
    assert zp.underreplicated_ledger_path(ROOT, 4294967301) == (
        "/ledgers/underreplication/ledgers/0000/0001/0000/0005/urL4294967301"
    )
    assert zp.underreplication_lock_path(ROOT, 5) == "/ledgers/underreplication/locks/urL0000000005"


def test_id_generation_paths() -> None:
    assert zp.idgen_prefix(ROOT) == "/ledgers/idgen/ID-"
    assert zp.sequential_id("/ledgers/idgen/ID-0000000042", zp.idgen_prefix(ROOT)) == 42
    assert zp.idgen_long_path(ROOT) == "/ledgers/idgen-long"
    assert zp.hob_path(ROOT, 1) == "/ledgers/idgen-long/HOB-0000000001"
    assert zp.hob_prefix(ROOT, 1) == "/ledgers/idgen-long/HOB-0000000001/ID-"
    assert zp.compose_long_id(1, 5) == 4294967301
    assert zp.is_short_id_overflow(2**31 - 1) and not zp.is_short_id_overflow(2**31 - 2)
    assert zp.parse_hob("HOB-0000000007") == 7 and zp.parse_hob("junk") is None
    with pytest.raises(BadMetadataError):
        zp.sequential_id("/ledgers/idgen/ID-00x", zp.idgen_prefix(ROOT))
    with pytest.raises(BadMetadataError):
        zp.sequential_id("/elsewhere/ID-1", zp.idgen_prefix(ROOT))
    with pytest.raises(InvalidOptionError):
        zp.compose_long_id(1, 2**31 - 1)


def test_bkspark_tree_paths_sit_under_the_ledgers_root_and_ignore_a_trailing_slash() -> None:
    from bkspark.protocol import zk_paths as zp

    for root in ("/ledgers", "/ledgers/"):
        assert zp.bkspark_path(root) == "/ledgers/bkspark"
        assert zp.audit_path(root) == "/ledgers/bkspark/audit"
        assert zp.datasets_path(root) == "/ledgers/bkspark/datasets"
        assert zp.write_jobs_path(root) == "/ledgers/bkspark/jobs"
        for znode in ("orphans", "config", "election", "status"):
            assert zp.audit_znode_path(root, znode) == f"/ledgers/bkspark/audit/{znode}"
        assert zp.dataset_path(root, "d") == "/ledgers/bkspark/datasets/d"
        assert zp.dataset_shards_path(root, "d") == "/ledgers/bkspark/datasets/d/shards"
        assert zp.dataset_shard_path(root, "d", "j.ab.0") == "/ledgers/bkspark/datasets/d/shards/j.ab.0"
        assert zp.write_job_path(root, "j") == "/ledgers/bkspark/jobs/j"
        assert zp.job_ledger_path(root, "j", -7, 12) == "/ledgers/bkspark/jobs/j/-7-12"
    with pytest.raises(InvalidOptionError):
        zp.audit_znode_path("/ledgers", "../datasets")
    assert zp.bkspark_path("") == "/bkspark"
    # Not a ledger parent and not a ledger: listing the ledgers root skips it.
    assert not zp.is_ledger_parent_node(zp.BKSPARK)
