"""bkspark/metadata/znodes.py against a real ZooKeeper: absent znodes and lost races are values, multis' outcomes,
the writer's commit-marker znode built by the store."""

from __future__ import annotations

import threading

import pytest

from bkspark.metadata import ZkMetadataStore
from bkspark.metadata.znodes import DEFAULT_SESSION_TIMEOUT, Outcome, ZkClient, Znodes, session_timeout_of
from bkspark.protocol import ledger_metadata as md_codec
from bkspark.protocol.digest import DigestType
from bkspark.protocol.ledger_metadata import INVALID_ENTRY_ID, LedgerMetadata, LedgerState

pytestmark = pytest.mark.integration

BOOKIES = ("10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181")


def test_absent_znodes_lost_races_and_creates_are_values_not_kazoo_errors(zk_root) -> None:  # type: ignore[no-untyped-def]
    znodes = Znodes(zk_root.zk_client)
    base = f"{zk_root.path}/bkspark/znodes-test"
    assert znodes.get(f"{base}/none") is None and znodes.stat(f"{base}/none") is None
    assert znodes.children(f"{base}/none") == []
    assert znodes.create(f"{base}/a/b", b"x") is Outcome.NO_NODE  # no parent, no makepath
    assert znodes.create(f"{base}/a/b", b"x", makepath=True) is Outcome.OK
    assert znodes.create(f"{base}/a/b", b"y", makepath=True) is Outcome.NODE_EXISTS
    data, stat = znodes.get(f"{base}/a/b")  # type: ignore[misc]
    assert data == b"x" and znodes.children(f"{base}/a") == ["b"]
    assert znodes.set(f"{base}/a/b", b"z", version=stat.version + 5) is None  # a lost compare-and-set
    assert znodes.set(f"{base}/a/b", b"z", version=stat.version).version == stat.version + 1  # type: ignore[union-attr]
    assert znodes.set(f"{base}/none", b"z") is None
    assert [found is None for _, found in znodes.read_many([f"{base}/a/b", f"{base}/none"])] == [False, True]
    assert znodes.get_each([f"{base}/none", f"{base}/a/b"])[1][0] == b"z"  # type: ignore[index]
    assert znodes.missing([f"{base}/a/b", f"{base}/none"]) == [False, True]
    fired = threading.Event()
    znodes.stat(f"{base}/a/b", watch=lambda _event: fired.set())
    assert znodes.delete(f"{base}/a", recursive=True) and not znodes.delete(f"{base}/a")
    assert fired.wait(30)


def test_a_multi_reports_each_operations_outcome_and_applies_all_or_nothing(zk_root) -> None:  # type: ignore[no-untyped-def]
    znodes = Znodes(zk_root.zk_client)
    base = f"{zk_root.path}/bkspark/multi-test"
    znodes.ensure_path(f"{base}/kept")
    tx = znodes.multi().check(f"{base}/kept").create(f"{base}/new", b"n").set(f"{base}/kept", b"k", version=3)
    assert tx.commit() == [Outcome.ROLLED_BACK, Outcome.ROLLED_BACK, Outcome.BAD_VERSION]
    assert znodes.get(f"{base}/new") is None  # nothing applied
    with pytest.raises(Exception) as failure:
        tx.raise_failure()
    assert type(failure.value).__name__ == "BadVersionError"
    tx = znodes.multi().check(f"{base}/kept").create(f"{base}/new", b"n").set(f"{base}/kept", b"k", version=0)
    assert tx.commit() == [Outcome.OK, Outcome.OK, Outcome.OK]
    tx.raise_failure()  # nothing to raise
    assert znodes.get(f"{base}/kept")[0] == b"k"  # type: ignore[index]
    assert znodes.multi().check(f"{base}/gone").delete(f"{base}/new").commit() == [Outcome.NO_NODE, Outcome.ROLLED_BACK]


def test_a_client_made_by_the_store_says_its_session_timeout(zk_root) -> None:  # type: ignore[no-untyped-def]
    """No kazoo private field: the store's client is a ZkClient with a public session_timeout; a foreign client
    gets the default."""
    with ZkMetadataStore(zk_root.metadata_service_uri, session_timeout=7.5) as store:
        assert isinstance(store.zk, ZkClient) and session_timeout_of(store.zk) == 7.5
        assert Znodes(store.zk).session_timeout == 7.5
    assert session_timeout_of(zk_root.zk_client) == DEFAULT_SESSION_TIMEOUT
    assert Znodes(zk_root.zk_client, session_timeout=3).session_timeout == 3.0


def test_the_store_builds_a_ledger_znode_for_a_callers_multi_as_its_own_create_would(zk_root) -> None:  # type: ignore[no-untyped-def]
    """The Spark writer's commit marker: an empty closed sibling of a ledger, its bytes and path from the store (a
    fresh cToken, the parent znodes made), created in the caller's multi and read back as that metadata."""
    with ZkMetadataStore(zk_root.metadata_service_uri, zk=zk_root.zk_client) as store:
        model = LedgerMetadata(
            ensemble_size=3, write_quorum_size=2, ack_quorum_size=2, digest_type=DigestType.CRC32C, password=b"pw",
            ensembles={0: BOOKIES}, custom_metadata={"app": b"x"},
        ).with_last_ensemble(10, ("10.0.0.9:3181", *BOOKIES[1:]))
        marker = model.empty_closed_sibling(1234, {"role": b"parent"})
        assert (marker.state, marker.last_entry_id, marker.length) == (LedgerState.CLOSED, INVALID_ENTRY_ID, 0)
        assert marker.ensembles == {0: BOOKIES} and marker.ctime == 1234 and marker.password == b"pw"
        ledger_id = store.generate_ledger_id() + (1 << 40)  # a long id: its parent znodes do not exist yet
        path, data = store.ledger_znode_to_create(ledger_id, marker)
        assert path == store.ledger_path(ledger_id)
        assert md_codec.parse(data).ctoken != 0
        assert Znodes(store.zk).multi().create(path, data).commit() == [Outcome.OK]
        read = store.read_ledger_metadata(ledger_id).metadata
        assert read.is_closed and read.ensembles == {0: BOOKIES} and read.custom_metadata == {"role": b"parent"}
