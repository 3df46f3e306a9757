"""A fully secured cluster: ZooKeeper requiring SASL (JAAS made here), ACLs (zkEnableSecurity), Python
bookies with TLS and SASL; the client, the shell, the auditor and Spark (read and write) with credentials,
and clear failures without them; no password in any log line or in Spark's explain output."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import redirect_stdout

import pytest
from kazoo.client import KazooClient
from kazoo.security import CREATOR_ALL_ACL

from bkspark.audit import Auditor
from bkspark.client import BookKeeper
from bkspark.errors import MetadataError
from bkspark.protocol import service_info as si
from bkspark.security.zk import ZkSecurity
from tests.harness.python_bookie import REPO_ROOT
from tests.harness.security import (
    AuthenticatedBookies,
    SASL_PASSWORD,
    SASL_USER,
    make_pki,
    sasl_bookie_conf,
    sasl_client_conf,
    tls_bookie_conf,
    tls_client_conf,
    write_jaas,
)
from tests.harness.zookeeper import ZooKeeperServer, init_new_cluster

pytestmark = pytest.mark.integration

LEDGER_PASSWORD = "ledger-pw-Zq81x"
ROOT = "/secured"


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[dict[str, object]]:  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("secured-cluster")
    pki = make_pki(base / "pki")
    jaas = write_jaas(base / "jaas.conf", zk=True)
    zk = ZooKeeperServer(
        base / "zk",
        extra_config=[
            "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
            "enforce.auth.enabled=true",
            "enforce.auth.schemes=sasl",
        ],
        jvm_args=[f"-Djava.security.auth.login.config={jaas}"],
    )
    zk.start()
    try:
        zk_kwargs = {
            "sasl_options": {"mechanism": "DIGEST-MD5", "username": SASL_USER, "password": SASL_PASSWORD},
            "default_acl": list(CREATOR_ALL_ACL),
        }
        admin = KazooClient(hosts=zk.connect_string, **zk_kwargs)  # type: ignore[arg-type]
        admin.start(timeout=30)
        init_new_cluster(admin, ROOT)
        uri = f"zk+hierarchical://{zk.connect_string}{ROOT}"
        security = {"zkEnableSecurity": "true", "java.security.auth.login.config": str(jaas)}
        bookie_conf = {**tls_bookie_conf(pki), **sasl_bookie_conf(jaas), **security}
        client_conf = {**tls_client_conf(pki), **sasl_client_conf(jaas), **security}
        with AuthenticatedBookies(
            uri, base / "bookies", bookies=3, journal_sync_data=False, conf_overrides=bookie_conf, zk_kwargs=zk_kwargs
        ) as c:
            c.start_all()
            yield {"uri": uri, "client_conf": client_conf, "admin": admin, "cluster": c, "base": base, "jaas": jaas}
        admin.stop()
        admin.close()
    finally:
        zk.stop()


def _write(uri: str, conf: dict[str, object], n: int = 20) -> int:
    with BookKeeper(uri, conf) as bk:
        lh = bk.create_ledger(3, 3, 2, password=LEDGER_PASSWORD.encode())
        for i in range(n):
            lh.append(b"secured-%d" % i)
        lh.close()
        return lh.ledger_id


def test_client_with_credentials_and_acls(secured) -> None:  # type: ignore[no-untyped-def]
    uri, conf = secured["uri"], secured["client_conf"]
    ledger_id = _write(uri, conf)
    with BookKeeper(uri, conf) as bk:
        rh = bk.open_ledger(ledger_id, password=LEDGER_PASSWORD.encode())
        assert [e.payload for e in rh.read(0, 19)] == [b"secured-%d" % i for i in range(20)]
        path = bk.store.ledger_path(ledger_id)
    admin = secured["admin"]
    # zkEnableSecurity: the ledger znode belongs to the authenticated creator only (CREATOR_ALL_ACL).
    acls, _ = admin.get_acls(path)
    assert [(a.id.scheme, a.id.id, a.perms) for a in acls] == [("sasl", SASL_USER, 31)]
    # Bookie registrations too; they advertise the TLS endpoint as Java's BookieService does.
    bookie = secured["cluster"].bookie_ids[0]
    acls, _ = admin.get_acls(f"{ROOT}/available/{bookie}")
    assert acls[0].id.scheme == "sasl"
    data, _ = admin.get(f"{ROOT}/available/{bookie}")
    rpc = [e for e in si.parse(data, bookie).endpoints if e.protocol == si.BOOKIE_RPC]
    assert rpc and rpc[0].extensions == ("tls",)


def test_client_without_zookeeper_credentials_fails_clearly(secured) -> None:  # type: ignore[no-untyped-def]
    conf = {k: v for k, v in secured["client_conf"].items() if k != "java.security.auth.login.config"}
    with pytest.raises(MetadataError, match="requires authentication"):
        BookKeeper(secured["uri"], {k: v for k, v in conf.items() if not k.startswith("clientAuth")}, zkTimeout=5)


def _shell(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "bkspark.cli", *args], capture_output=True, text=True, timeout=120, env=env, cwd=REPO_ROOT
    )


def test_shell_and_auditor_with_and_without_credentials(secured, tmp_path) -> None:  # type: ignore[no-untyped-def]
    uri = secured["uri"]
    ledger_id = _write(uri, secured["client_conf"])
    conf_file = tmp_path / "client.conf"
    conf_file.write_text("".join(f"{k}={v}\n" for k, v in secured["client_conf"].items()))
    ok = _shell("shell", "--metadata-service-uri", uri, "--client-conf", str(conf_file), "listledgers")
    assert ok.returncode == 0, ok.stderr
    assert str(ledger_id) in ok.stdout
    bad = _shell("shell", "--metadata-service-uri", uri, "listledgers")
    assert bad.returncode != 0
    assert "ZooKeeper" in bad.stderr and "authentication" in bad.stderr
    # The auditor: a pass with credentials; a clear error without.
    auditor = Auditor(uri, zk_security=ZkSecurity.from_conf(secured["client_conf"]), grace_period=0)
    try:
        result = auditor.audit_once(record=False)
        assert result is not None
    finally:
        auditor.stop()
    with pytest.raises(MetadataError, match="requires authentication"):
        Auditor(uri, session_timeout=5)
    # `bkspark auditor --client-conf FILE` joins the election with the file's credentials.
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bkspark.cli", "auditor", "--metadata-service-uri", uri, "--client-conf", str(conf_file),
         "--audit-period", "3600"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT,
    )
    admin = secured["admin"]
    try:
        deadline = time.monotonic() + 60
        while not (admin.exists(f"{ROOT}/bkspark/audit/election") and admin.get_children(f"{ROOT}/bkspark/audit/election")):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the auditor did not join the election"
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(30)


def test_spark_read_write_secured_and_no_password_leaks(secured, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    uri, conf = secured["uri"], secured["client_conf"]
    pw_file = tmp_path / "ledger.pw"
    pw_file.write_text(LEDGER_PASSWORD + "\n")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]").appName("bkspark-security")
        .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    try:
        opts = {f"bookkeeper.{k}": str(v) for k, v in conf.items()}
        df = spark.createDataFrame([(b"row-%d" % i,) for i in range(40)], "payload binary")
        (
            df.write.format("bookkeeper").mode("append").option("metadataServiceUri", uri).option("dataset", "sec")
            .option("ensembleSize", "3").option("writeQuorumSize", "3").option("ackQuorumSize", "2")
            .option("passwordFile", str(pw_file)).options(**opts).save()
        )
        reader = (
            spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", "sec")
            .option("password", LEDGER_PASSWORD).options(**opts)
        )
        got = sorted(bytes(r.payload) for r in reader.load().select("payload").collect())
        assert got == sorted(b"row-%d" % i for i in range(40))
        out = io.StringIO()
        with redirect_stdout(out):
            reader.load().explain(True)
        plan = out.getvalue()
        assert "bookkeeper" in plan.lower() or "BatchScan" in plan
        assert LEDGER_PASSWORD not in plan and SASL_PASSWORD not in plan
        # Without ZooKeeper credentials (JAAS file gone): a clear error, not a hang.
        no_creds = {k: v for k, v in opts.items() if not k.endswith(("login.config", "clientAuthProviderFactoryClass"))}
        with pytest.raises(Exception, match="requires authentication"):
            (
                spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", "sec")
                .option("password", LEDGER_PASSWORD).options(**no_creds).load().collect()
            )
    finally:
        spark.stop()
    # No password in any log: the bookies' logs, this process's captured records.
    for bookie in secured["cluster"].bookies:
        text = bookie.log_tail(100000)
        assert LEDGER_PASSWORD not in text and SASL_PASSWORD not in text
    for record in caplog.records:
        assert LEDGER_PASSWORD not in record.getMessage() and SASL_PASSWORD not in record.getMessage()


@pytest.mark.compat
def test_java_client_opens_acl_protected_ledger_with_same_credentials(secured, java_tools) -> None:  # type: ignore[no-untyped-def]
    """A ledger bkspark created under zkEnableSecurity (CREATOR_ALL_ACL, sasl:<user>) is read by Apache
    BookKeeper's Java client logged in as the same user (JAAS 'Client' for ZooKeeper, 'BookKeeper' for the
    bookies), over TLS."""
    uri, conf = secured["uri"], secured["client_conf"]
    ledger_id = _write(uri, conf, n=5)
    java_conf = {k: v for k, v in conf.items() if k != "java.security.auth.login.config"}
    java_conf["clientAuthProviderFactoryClass"] = "org.apache.bookkeeper.sasl.SASLClientProviderFactory"
    proc = java_tools.run(
        "4.17.3", "bkspark.tools.JavaClient", "read", "--ledger", str(ledger_id), "--digest", "CRC32C",
        "--password", LEDGER_PASSWORD, metadata_service_uri=uri, conf=java_conf,
        jvm_args=[f"-Djava.security.auth.login.config={secured['jaas']}"], timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert '"count":5' in proc.stdout.replace(" ", ""), proc.stdout[-2000:]


def test_bookie_without_zookeeper_credentials_fails_clearly(secured) -> None:  # type: ignore[no-untyped-def]
    from tests.harness.python_bookie import PythonBookie

    conf = {k: v for k, v in secured["client_conf"].items() if not k.startswith(("tls", "client"))}
    conf.pop("java.security.auth.login.config")
    bookie = PythonBookie("no-creds", secured["base"], secured["uri"], journal_sync_data=False, conf_overrides=conf)
    bookie.launch()
    assert bookie.process is not None
    try:
        code = bookie.process.wait_exit(60)
    finally:
        bookie.process.kill()
    assert code != 0
    log = bookie.log_tail(200)
    assert "ZooKeeper requires authentication" in log or "requires authentication" in log, log[-3000:]
