"""Kerberos (SASL GSSAPI) against a real MIT KDC, both ways with Apache BookKeeper 4.17 and 4.18 (docs/security.md).

A KDC of its own per module (tests/harness/kdc.py): a realm ``BKSPARK.TEST``, the bookies' service
principal ``bookkeeper/127.0.0.1`` (Java's client names a bookie by the host of its address, as
registered: ``127.0.0.1`` here), a client ``bkclient-bookkeeper`` that the default ``saslJaasClientAllowedIds``
(``.*bookkeeper.*``) admits and a client ``intruder`` that it does not. One bookie per kind (a Java
bookie of each version, a bkspark bookie), each with TLS configured: a client that sends no START_TLS
is served in plain text, so each bookie covers "with TLS" and "without".

* bkspark client -> Java bookie and bkspark bookie, v2 and v3, with and without TLS;
* Java client -> bkspark bookie, with and without TLS (writes over v2, reads over v3);
* a Spark job writes and reads a dataset on the Kerberized bookie, its executors given the keytab by a path
  every node has and the Kerberos configuration by ``bookkeeper.java.security.krb5.conf``;
* ZooKeeper with Kerberos (a ``Client`` section): ``sasl`` ACLs of the creator's principal with zkEnableSecurity,
  and a cluster formatted by the shell, a bookie registered and a ledger written through it;
* refusals, each a typed error and nothing written: a principal that ``saslJaasClientAllowedIds``
  refuses, a keytab whose key the KDC no longer has, an expired ticket cache, a KDC that is down.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkspark.client import BookKeeper
from bkspark.errors import AuthenticationError, BKError, UnauthorizedAccessError
from tests.harness.kdc import REALM, Kdc, kdc_available, start_kdc
from tests.harness.security import make_pki, one_python_bookie, round_trip, run_java_client, tls_bookie_conf, tls_client_conf
from tests.integration.test_connector_spark import spark  # noqa: F401 - the Spark fixture

pytestmark = [pytest.mark.compat, pytest.mark.integration, pytest.mark.kerberos]

VERSIONS = ["4.17.3", "4.18.2"]
SASL_BOOKIE = {"bookieAuthProviderFactoryClass": "org.apache.bookkeeper.sasl.SASLBookieAuthProviderFactory"}
SASL_CLIENT = {"clientAuthProviderFactoryClass": "org.apache.bookkeeper.sasl.SASLClientProviderFactory"}
CLIENT = "bkclient-bookkeeper"
INTRUDER = "intruder"
SERVICE = "bookkeeper/127.0.0.1"


def _skip_reason() -> str | None:
    reason = kdc_available()
    if reason is not None:
        return reason
    try:
        import gssapi  # noqa: F401
    except ImportError:
        return "the gssapi package is missing: pip install 'bkspark[kerberos]' (make setup installs it)"
    return None


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kdc]:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(f"Kerberos tests skipped: {reason}")
    kdc = start_kdc(tmp_path_factory.mktemp("kdc"))
    saved = {k: os.environ.get(k) for k in kdc.env}
    os.environ.update(kdc.env)  # this process's GSS-API library and the bookies it starts read the realm's krb5.conf
    try:
        yield kdc
    finally:
        kdc.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _krb5_section(name: str, principal: str, keytab: Path) -> str:
    return (
        f"{name} {{\n  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n"
        f'  keyTab="{keytab}"\n  storeKey=true\n  useTicketCache=false\n  principal="{principal}@{REALM}";\n}};\n'
    )


@pytest.fixture(scope="module")
def keytabs(kdc: Kdc) -> dict[str, Path]:
    return {name: kdc.principal(name) for name in (SERVICE, CLIENT, INTRUDER)}


@pytest.fixture(scope="module")
def jaas(kdc: Kdc, keytabs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The operator's file: the bookie's key and the client's, as Java reads them."""
    path = tmp_path_factory.mktemp("jaas") / "jaas.conf"
    path.write_text(_krb5_section("Bookie", SERVICE, keytabs[SERVICE]) + _krb5_section("BookKeeper", CLIENT, keytabs[CLIENT]))
    return path


def _client_jaas(path: Path, principal: str, keytab: Path) -> Path:
    path.write_text(_krb5_section("BookKeeper", principal, keytab))
    return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def java_krb(module_java_cluster_factory, module_roots, kdc, jaas, pki):  # type: ignore[no-untyped-def]
    """One Java bookie per version with a Kerberos Bookie section and TLS (plain-text clients still served)."""
    out = {}
    for version in VERSIONS:
        root = module_roots(f"java-krb-{version}")
        module_java_cluster_factory(
            version, bookies=1, root=root, journal_sync_data=False,
            conf_overrides={**tls_bookie_conf(pki), **SASL_BOOKIE},
            jvm_args=[f"-Djava.security.auth.login.config={jaas}", *kdc.jvm_args],
        )
        out[version] = root
    return out


@pytest.fixture(scope="module")
def python_krb(module_roots, kdc, jaas, pki, tmp_path_factory):  # type: ignore[no-untyped-def]
    """A bkspark bookie with a Kerberos Bookie section and TLS."""
    root = module_roots("py-krb")
    conf = {**tls_bookie_conf(pki), **SASL_BOOKIE, "java.security.auth.login.config": str(jaas)}
    with one_python_bookie(root.metadata_service_uri, tmp_path_factory.mktemp("pykrb"), conf):
        yield root


def _client_conf(jaas_file: Path, pki=None) -> dict[str, object]:  # type: ignore[no-untyped-def]
    conf: dict[str, object] = {**SASL_CLIENT, "java.security.auth.login.config": str(jaas_file)}
    if pki is not None:
        conf.update(tls_client_conf(pki), startTLSTimeoutSecs=30)
    return conf


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("v2_protocol", [True, False], ids=["v2", "v3"])
@pytest.mark.parametrize("version", VERSIONS)
def test_bkspark_client_to_java_kerberos_bookie(java_krb, jaas, pki, version, v2_protocol, tls) -> None:  # type: ignore[no-untyped-def]
    round_trip(java_krb[version].metadata_service_uri, _client_conf(jaas, pki if tls else None), v2_protocol)


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("v2_protocol", [True, False], ids=["v2", "v3"])
def test_bkspark_client_to_bkspark_kerberos_bookie(python_krb, jaas, pki, v2_protocol, tls) -> None:  # type: ignore[no-untyped-def]
    round_trip(python_krb.metadata_service_uri, _client_conf(jaas, pki if tls else None), v2_protocol)


def _java(java_tools, version: str, uri: str, conf: dict[str, object], jaas_file: Path, kdc: Kdc, *args: str):  # type: ignore[no-untyped-def]
    jvm_args = [f"-Djava.security.auth.login.config={jaas_file}", *kdc.jvm_args]
    return run_java_client(java_tools, version, uri, conf, jvm_args, *args)


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("version", VERSIONS)
def test_java_client_to_bkspark_kerberos_bookie(java_tools, python_krb, jaas, pki, kdc, version, tls) -> None:  # type: ignore[no-untyped-def]
    """Apache BookKeeper's client authenticates to our bookie with its Kerberos section, writes over v2, reads over v3."""
    uri = python_krb.metadata_service_uri
    conf: dict[str, object] = {**SASL_CLIENT, **(tls_client_conf(pki) if tls else {})}
    proc, events = _java(
        java_tools, version, uri, conf, jaas, kdc, "create-and-write", "--ensemble", "1", "--write", "1", "--ack", "1",
        "--digest", "CRC32C", "--password", "pw", "--entries", "20", "--v2", "true",
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    ledger_id = [e for e in events if e["event"] == "closed"][0]["ledger_id"]
    with BookKeeper(uri, _client_conf(jaas)) as bk:
        rh = bk.open_ledger(ledger_id, password=b"pw")
        assert [e.payload for e in rh.read(0, 19)] == [b"entry-%d" % i for i in range(20)]
    proc, events = _java(java_tools, version, uri, conf, jaas, kdc, "read", "--ledger", str(ledger_id), "--digest",
                         "CRC32C", "--password", "pw", "--v2", "false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = [e for e in events if e["event"] == "done"]
    assert done and done[0]["count"] == 20, events[-3:]


# -- refusals: a typed error, nothing written ------------------------------------------------------------------


def _refused(uri: str, conf: dict[str, object], error: type[BKError], match: str | None = None) -> int:
    """The client's first write fails with ``error`` (its message holding ``match``) and ends the ledger's writes."""
    with BookKeeper(uri, {**conf, "addEntryTimeoutSec": 10}) as bk:
        lh = bk.create_ledger(1, 1, 1, password=b"pw")
        with pytest.raises(error, match=match):
            lh.append(b"never")
        with pytest.raises(error):  # no ensemble change around a refusal: the ledger takes no more writes
            lh.append(b"never again")
        return lh.ledger_id


def _nothing_written(uri: str, jaas_file: Path, ledger_id: int) -> None:
    with BookKeeper(uri, _client_conf(jaas_file)) as bk:
        rh = bk.open_ledger(ledger_id, password=b"pw", recovery=True)
        assert rh.last_add_confirmed == -1


@pytest.mark.parametrize("bookie", ["java", "python"])
def test_principal_not_allowed_is_refused(java_krb, python_krb, jaas, keytabs, tmp_path, bookie) -> None:  # type: ignore[no-untyped-def]
    uri = (java_krb[VERSIONS[0]] if bookie == "java" else python_krb).metadata_service_uri
    intruder = _client_jaas(tmp_path / "intruder.conf", INTRUDER, keytabs[INTRUDER])
    # The client has sent its last GSSAPI token when the bookie refuses it: both bookies answer its requests
    # with EUA (Java's client gets BKUnauthorizedAccessException the same way); the bookie logs the principal.
    ledger_id = _refused(uri, _client_conf(intruder), UnauthorizedAccessError)
    _nothing_written(uri, jaas, ledger_id)


def test_wrong_keytab_is_a_clear_error(python_krb, kdc, jaas, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A keytab whose key the KDC has replaced: the client cannot get a ticket, says so, and writes nothing."""
    name = "stale-bookkeeper"
    keytab = kdc.principal(name)
    kdc.rekey(name)
    conf = _client_conf(_client_jaas(tmp_path / "stale.conf", name, keytab))
    ledger_id = _refused(python_krb.metadata_service_uri, conf, AuthenticationError, "Kerberos")
    _nothing_written(python_krb.metadata_service_uri, jaas, ledger_id)


def test_expired_ticket_cache_is_a_clear_error(python_krb, kdc, keytabs, jaas, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ccache = tmp_path / "ccache"
    kdc.kinit(CLIENT, keytabs[CLIENT], ccache, lifetime="3s")
    jaas_file = tmp_path / "cache.conf"
    jaas_file.write_text(
        "BookKeeper {\n  com.sun.security.auth.module.Krb5LoginModule required\n  useTicketCache=true\n"
        f'  ticketCache="{ccache}"\n  principal="{CLIENT}@{REALM}";\n}};\n'
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait for the event (the ticket's end), not for a fixed time
        import gssapi

        creds = gssapi.Credentials(usage="initiate", store={"ccache": f"FILE:{ccache}"})
        try:
            if creds.lifetime == 0:
                break
        except gssapi.exceptions.ExpiredCredentialsError:
            break
        time.sleep(0.5)
    with pytest.raises(AuthenticationError, match="Kerberos credentials"):
        with BookKeeper(python_krb.metadata_service_uri, _client_conf(jaas_file)) as bk:
            lh = bk.create_ledger(1, 1, 1, password=b"pw")
            lh.append(b"never")
    _nothing_written(python_krb.metadata_service_uri, jaas, lh.ledger_id)


def test_kdc_down_is_a_clear_error(python_krb, kdc, jaas, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """No KDC: a new client cannot get a ticket; the error says which KDC problem, and nothing is written."""
    kdc.stop()
    try:
        name = "late-bookkeeper"
        keytab = kdc.directory / "late.keytab"
        conf = _client_conf(_client_jaas(tmp_path / "late.conf", name, keytab))
        kdc.start()
        kdc.principal(name, keytab)
        kdc.stop()
        ledger_id = _refused(python_krb.metadata_service_uri, conf, AuthenticationError, "Kerberos")
    finally:
        kdc.start()
    _nothing_written(python_krb.metadata_service_uri, jaas, ledger_id)


def test_bookie_keytab_without_its_principal_fails_at_start(kdc, keytabs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A bookie whose keytab does not hold its principal's key stops at start with a typed error (docs/security.md)."""
    from bkspark.errors import InvalidOptionError
    from bkspark.security.auth import BookieSecurity

    jaas_file = tmp_path / "bookie.conf"
    jaas_file.write_text(_krb5_section("Bookie", "bookkeeper/elsewhere", keytabs[CLIENT]))
    with pytest.raises(InvalidOptionError, match="cannot read the bookie's Kerberos key"):
        BookieSecurity.from_conf({**SASL_BOOKIE, "java.security.auth.login.config": str(jaas_file)})


def test_spark_job_writes_and_reads_a_dataset_on_a_kerberized_bookie(spark, python_krb, kdc, jaas) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """Executors authenticate with the keytab the JAAS file names (a path every node has) and take the realm's
    krb5.conf from the ``java.security.krb5.conf`` key, not from an environment they were started without.
    The options name files only: no secret is in the plan."""
    options = {
        "metadataServiceUri": python_krb.metadata_service_uri,
        "dataset": "kerberized",
        "bookkeeper.clientAuthProviderFactoryClass": SASL_CLIENT["clientAuthProviderFactoryClass"],
        "bookkeeper.java.security.auth.login.config": str(jaas),
        "bookkeeper.java.security.krb5.conf": str(kdc.krb5_conf),
    }
    rows = spark.range(200).selectExpr("CAST(CONCAT('krb-', id) AS BINARY) AS payload")
    quorums = {"ensembleSize": "1", "writeQuorumSize": "1", "ackQuorumSize": "1"}
    rows.write.format("bookkeeper").options(**options, **quorums).mode("append").save()
    back = spark.read.format("bookkeeper").options(**options).load()
    assert sorted(r.payload.decode() for r in back.select("payload").collect()) == sorted(f"krb-{i}" for i in range(200))


def test_krb5_conf_key_is_checked(kdc, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from bkspark.errors import InvalidOptionError
    from bkspark.security.kerberos import use_krb5_conf

    with pytest.raises(InvalidOptionError, match="does not exist"):
        use_krb5_conf(str(tmp_path / "missing.conf"))
    other = tmp_path / "other.conf"
    other.write_text("[libdefaults]\n")
    with pytest.raises(InvalidOptionError, match="another Kerberos configuration"):
        use_krb5_conf(str(other))  # this process already uses the test realm's
    use_krb5_conf(str(kdc.krb5_conf))  # the same one again: fine


# -- ZooKeeper with Kerberos (its Client section) and sasl ACLs -------------------------------------------------------

ZK_SERVICE = "zookeeper/localhost"  # Java's client (and bkspark's) canonicalises 127.0.0.1 to its reverse name


@pytest.fixture(scope="module")
def kerberized_zookeeper(kdc, keytabs, tmp_path_factory):  # type: ignore[no-untyped-def]
    """A ZooKeeper that takes SASL with Kerberos (its JAAS Server section, the SASL auth provider)."""
    from tests.harness.zookeeper import ZooKeeperServer

    base = tmp_path_factory.mktemp("krb-zk")
    keytab = kdc.principal(ZK_SERVICE)
    server_jaas = base / "server-jaas.conf"
    server_jaas.write_text(_krb5_section("Server", ZK_SERVICE, keytab))
    zk = ZooKeeperServer(
        base / "zk",
        extra_config=["authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"],
        jvm_args=[f"-Djava.security.auth.login.config={server_jaas}", *kdc.jvm_args],
    )
    zk.start()
    try:
        yield zk
    finally:
        zk.stop()


def _zk_conf(jaas_file: Path, kdc: Kdc) -> dict[str, object]:
    return {"java.security.auth.login.config": str(jaas_file), "java.security.krb5.conf": str(kdc.krb5_conf),
            "zkEnableSecurity": "true"}


def _kazoo(zk, conf):  # type: ignore[no-untyped-def]
    from kazoo.client import KazooClient

    from bkspark.security.zk import ZkSecurity

    client = KazooClient(hosts=zk.connect_string, timeout=30, **ZkSecurity.from_conf(conf).kazoo_kwargs())
    client.start(timeout=60)
    return client


def test_zookeeper_kerberos_login_and_sasl_acls(kerberized_zookeeper, kdc, keytabs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A client's Kerberos Client section logs it in to ZooKeeper; with zkEnableSecurity its znodes carry the sasl
    ACL of its principal, which another principal cannot change and a client without SASL cannot read."""
    from kazoo.exceptions import NoAuthError
    from kazoo.security import Permissions

    owner_jaas = tmp_path / "owner.conf"
    owner_jaas.write_text(_krb5_section("Client", CLIENT, keytabs[CLIENT]))
    other_jaas = tmp_path / "other.conf"
    other_jaas.write_text(_krb5_section("Client", INTRUDER, keytabs[INTRUDER]))
    owner = _kazoo(kerberized_zookeeper, _zk_conf(owner_jaas, kdc))
    try:
        owner.create("/krb-owned", b"v1")
        acls, _ = owner.get_acls("/krb-owned")
        assert [(a.id.scheme, a.id.id, a.perms) for a in acls] == [("sasl", f"{CLIENT}@{REALM}", Permissions.ALL)]
        other = _kazoo(kerberized_zookeeper, _zk_conf(other_jaas, kdc))
        try:
            with pytest.raises(NoAuthError):
                other.set("/krb-owned", b"v2")
        finally:
            other.stop()
            other.close()
        anonymous = _kazoo(kerberized_zookeeper, {})
        try:
            with pytest.raises(NoAuthError):
                anonymous.get("/krb-owned")
        finally:
            anonymous.stop()
            anonymous.close()
        assert owner.get("/krb-owned")[0] == b"v1"
    finally:
        owner.stop()
        owner.close()


def test_bookies_and_client_through_a_kerberized_zookeeper(kerberized_zookeeper, kdc, keytabs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The whole path through a Kerberized ZooKeeper: the cluster formatted by the shell, bkspark bookies registering
    and a client writing and reading a ledger, every znode with the sasl ACL (zkEnableSecurity), as Apache
    BookKeeper expects its parts to share one principal."""
    from tests.harness.python_bookie import PythonBookieCluster

    jaas_file = tmp_path / "client.conf"
    jaas_file.write_text(_krb5_section("Client", CLIENT, keytabs[CLIENT]))
    conf = _zk_conf(jaas_file, kdc)
    uri = f"zk+hierarchical://{kerberized_zookeeper.connect_string}/krb-ledgers"
    shell = subprocess.run(  # the shell formats the cluster with the same keys (--conf), as an operator would
        [sys.executable, "-m", "bkspark.cli", "shell", "--metadata-service-uri", uri,
         *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")), "initnewcluster"],
        capture_output=True, text=True, timeout=180,
    )
    assert shell.returncode == 0, shell.stdout + shell.stderr
    with PythonBookieCluster(uri, tmp_path / "bookies", bookies=1, journal_sync_data=False, conf_overrides=conf) as c:
        c.start_all()
        with BookKeeper(uri, conf) as bk:
            lh = bk.create_ledger(1, 1, 1, password=b"pw")
            for i in range(5):
                lh.append(b"zk-krb-%d" % i)
            lh.close()
            rh = bk.open_ledger(lh.ledger_id, password=b"pw")
            assert [e.payload for e in rh.read(0, 4)] == [b"zk-krb-%d" % i for i in range(5)]
    checker = _kazoo(kerberized_zookeeper, conf)
    try:
        ledgers = [p for p in checker.get_children("/krb-ledgers") if p.isdigit() or p.startswith("L")]
        assert ledgers
        for path in ("/krb-ledgers", f"/krb-ledgers/{ledgers[0]}"):  # the shell's root, the client's ledger
            acls, _ = checker.get_acls(path)
            assert [(a.id.scheme, a.id.id) for a in acls] == [("sasl", f"{CLIENT}@{REALM}")], path
    finally:
        checker.stop()
        checker.close()
