"""ZooKeeper digest authentication end to end (``zkDigestAuthPath``, docs/security.md): a ZooKeeper that
requires authentication by the ``digest`` scheme, a cluster created with ``CREATOR_ALL_ACL``; a Python bookie,
the client, the shell and the auditor with the credentials of the file the key names, and clear failures
without them or with a wrong password."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.security import CREATOR_ALL_ACL, make_digest_acl_credential

from bkspark.audit import Auditor
from bkspark.client import BookKeeper
from bkspark.errors import MetadataError
from bkspark.security.zk import ZkSecurity
from tests.harness.python_bookie import PythonBookie
from tests.harness.security import AuthenticatedBookies
from tests.harness.zookeeper import ZooKeeperServer, init_new_cluster
from tests.integration.test_security_cluster import _shell

pytestmark = pytest.mark.integration

ZK_USER, ZK_PASSWORD = "bkdigest", "d1gest-pw-Qm4"
ROOT = "/digest"


@pytest.fixture(scope="module")
def digest_cluster(tmp_path_factory) -> Iterator[dict[str, object]]:  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("zk-digest")
    creds = base / "zk-digest"
    creds.write_text(f"{ZK_USER}:{ZK_PASSWORD}\n")
    creds.chmod(0o600)
    zk = ZooKeeperServer(base / "zk", extra_config=["enforce.auth.enabled=true", "enforce.auth.schemes=digest"])
    zk.start()
    try:
        zk_kwargs = {"auth_data": [("digest", f"{ZK_USER}:{ZK_PASSWORD}")], "default_acl": list(CREATOR_ALL_ACL)}
        admin = KazooClient(hosts=zk.connect_string, **zk_kwargs)  # type: ignore[arg-type]
        admin.start(timeout=30)
        init_new_cluster(admin, ROOT)
        uri = f"zk+hierarchical://{zk.connect_string}{ROOT}"
        conf = {"zkEnableSecurity": "true", "zkDigestAuthPath": str(creds)}
        with AuthenticatedBookies(
            uri, base / "bookies", bookies=1, journal_sync_data=False, conf_overrides=conf, zk_kwargs=zk_kwargs
        ) as cluster:
            cluster.start_all()
            yield {"uri": uri, "conf": conf, "admin": admin, "cluster": cluster, "base": base}
        admin.stop()
        admin.close()
    finally:
        zk.stop()


def _write(uri: str, conf: dict[str, object], n: int = 5) -> int:
    with BookKeeper(uri, conf) as bk:
        lh = bk.create_ledger(1, 1, 1, password=b"pw")
        for i in range(n):
            lh.append(b"digest-%d" % i)
        lh.close()
        return lh.ledger_id


def test_client_and_bookie_with_digest_credentials_and_acls(digest_cluster) -> None:  # type: ignore[no-untyped-def]
    uri, conf, admin = digest_cluster["uri"], digest_cluster["conf"], digest_cluster["admin"]
    ledger_id = _write(uri, conf)
    with BookKeeper(uri, conf) as bk:
        assert [e.payload for e in bk.open_ledger(ledger_id, password=b"pw").read(0, 4)] == [b"digest-%d" % i for i in range(5)]
        path = bk.store.ledger_path(ledger_id)
    owner = make_digest_acl_credential(ZK_USER, ZK_PASSWORD)
    acls, _ = admin.get_acls(path)
    assert [(a.id.scheme, a.id.id, a.perms) for a in acls] == [("digest", owner, 31)]
    bookie = digest_cluster["cluster"].bookie_ids[0]
    acls, _ = admin.get_acls(f"{ROOT}/available/{bookie}")
    assert [(a.id.scheme, a.id.id) for a in acls] == [("digest", owner)]


def test_client_without_or_with_wrong_credentials_fails_clearly(digest_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    uri = digest_cluster["uri"]
    with pytest.raises(MetadataError, match="requires authentication"):
        BookKeeper(uri, {"zkEnableSecurity": "true"}, zkTimeout=5)
    # A wrong password is a valid digest identity, just not the owner's: the ACLs refuse it.
    wrong = tmp_path / "wrong"
    wrong.write_text(f"{ZK_USER}:not-it\n")
    with pytest.raises(MetadataError, match="refused these credentials"):
        with BookKeeper(uri, {"zkEnableSecurity": "true", "zkDigestAuthPath": str(wrong)}, zkTimeout=5) as bk:
            bk.create_ledger(1, 1, 1, password=b"pw")


def test_shell_and_auditor_with_and_without_digest_credentials(digest_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    uri, conf = digest_cluster["uri"], digest_cluster["conf"]
    ledger_id = _write(uri, conf)
    conf_file = tmp_path / "client.conf"
    conf_file.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    ok = _shell("shell", "--metadata-service-uri", uri, "--client-conf", str(conf_file), "listledgers")
    assert ok.returncode == 0, ok.stderr
    assert str(ledger_id) in ok.stdout
    bad = _shell("shell", "--metadata-service-uri", uri, "listledgers")
    assert bad.returncode != 0
    assert "ZooKeeper" in bad.stderr and "authentication" in bad.stderr, bad.stderr[-2000:]
    assert ZK_PASSWORD not in ok.stderr + ok.stdout + bad.stderr + bad.stdout
    auditor = Auditor(uri, zk_security=ZkSecurity.from_conf(conf), grace_period=0)
    try:
        assert auditor.audit_once(record=False) is not None
    finally:
        auditor.stop()
    with pytest.raises(MetadataError, match="requires authentication"):
        Auditor(uri, session_timeout=5)


def test_bookie_without_digest_credentials_fails_clearly(digest_cluster) -> None:  # type: ignore[no-untyped-def]
    bookie = PythonBookie("no-digest", digest_cluster["base"], digest_cluster["uri"], journal_sync_data=False,
                          conf_overrides={"zkEnableSecurity": "true"})
    bookie.launch()
    assert bookie.process is not None
    try:
        code = bookie.process.wait_exit(60)
    finally:
        bookie.process.kill()
    assert code != 0
    log = bookie.log_tail(200)
    assert "requires authentication" in log, log[-3000:]
