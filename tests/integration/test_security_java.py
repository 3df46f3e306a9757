"""TLS and SASL interop with Apache BookKeeper 4.17 (Java), both ways.

* bkspark client -> a Java bookie with TLS (PEM) and ``SASLBookieAuthProviderFactory``: START_TLS and
  SASL on v2 and v3 connections, a wrong CA refused clearly, a wrong password refused;
* bkspark client -> a Java bookie requiring mutual TLS: with a client certificate, and refused without;
* Java client -> Python bookies with mutual TLS and SASL, writing over v2 and reading over v3; the Java
  client with a wrong password refused;
* JKS and PKCS12 stores written by keytool: bkspark client (both types) -> a Java bookie with JKS stores
  (mutual TLS); the Java client (JKS) -> a Python bookie with PKCS12 stores; the Java client trusting
  another CA refused by the Python bookie, which logs why.

Each Java cluster is one bookie (ensemble 1) on its own root, to keep the JVM count small.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bkspark.client import BookKeeper
from bkspark.errors import AuthenticationError, TlsHandshakeError
from tests.harness.security import (
    java_store_bookie_conf,
    java_store_client_conf,
    make_java_stores,
    make_pki,
    one_python_bookie,
    round_trip,
    run_java_client,
    sasl_bookie_conf,
    sasl_client_conf,
    tls_bookie_conf,
    tls_client_conf,
    write_jaas,
)

pytestmark = [pytest.mark.compat, pytest.mark.integration]

VERSION = "4.17.3"
SASL_BOOKIE = {"bookieAuthProviderFactoryClass": "org.apache.bookkeeper.sasl.SASLBookieAuthProviderFactory"}
SASL_CLIENT = {"clientAuthProviderFactoryClass": "org.apache.bookkeeper.sasl.SASLClientProviderFactory"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):  # type: ignore[no-untyped-def]
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def jaas(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    return write_jaas(tmp_path_factory.mktemp("jaas") / "jaas.conf")


@pytest.fixture(scope="module")
def java_tls(module_java_cluster_factory, module_roots, pki, jaas):  # type: ignore[no-untyped-def]
    """One Java bookie with TLS (no client certificate required) and SASL."""
    root = module_roots("java-tls-sasl")
    module_java_cluster_factory(
        VERSION, bookies=1, root=root, journal_sync_data=False, conf_overrides={**tls_bookie_conf(pki), **SASL_BOOKIE},
        jvm_args=[f"-Djava.security.auth.login.config={jaas}"],
    )
    return root


@pytest.fixture(scope="module")
def java_mtls(module_java_cluster_factory, module_roots, pki):  # type: ignore[no-untyped-def]
    """One Java bookie requiring a client certificate (mutual TLS)."""
    root = module_roots("java-mtls")
    module_java_cluster_factory(
        VERSION, bookies=1, root=root, journal_sync_data=False, conf_overrides=tls_bookie_conf(pki, client_auth=True)
    )
    return root


@pytest.mark.parametrize("v2_protocol", [True, False], ids=["v2", "v3"])
def test_python_client_to_java_tls_sasl_bookie(java_tls, pki, jaas, v2_protocol) -> None:  # type: ignore[no-untyped-def]
    round_trip(java_tls.metadata_service_uri, {**tls_client_conf(pki), **sasl_client_conf(jaas)}, v2_protocol)


def test_python_client_wrong_ca_refused_by_java_bookie(java_tls, pki, jaas) -> None:  # type: ignore[no-untyped-def]
    with BookKeeper(java_tls.metadata_service_uri, {**tls_client_conf(pki, ca=pki.other_ca), **sasl_client_conf(jaas)}) as bk:
        bookie = sorted(bk.writable_bookies())[0]
        with pytest.raises(TlsHandshakeError, match="not signed by a CA in tlsTrustStore"):
            bk.run_coroutine(bk.aio.pool.get(bookie, "v2"), timeout=30)


@pytest.mark.parametrize("v2_protocol", [True, False], ids=["v2", "v3"])
def test_python_client_mutual_tls_with_java_bookie(java_mtls, pki, v2_protocol) -> None:  # type: ignore[no-untyped-def]
    round_trip(java_mtls.metadata_service_uri, tls_client_conf(pki, client_auth=True), v2_protocol)


def test_java_bookie_requiring_client_certificate_refuses_client_without(java_mtls, pki) -> None:  # type: ignore[no-untyped-def]
    with BookKeeper(java_mtls.metadata_service_uri, tls_client_conf(pki)) as bk:
        bookie = sorted(bk.writable_bookies())[0]
        with pytest.raises(TlsHandshakeError):
            conn = bk.run_coroutine(bk.aio.pool.get(bookie, "v3"), timeout=30)
            # TLS 1.3: the bookie checks the certificate after the client's handshake ended; the refusal
            # arrives as a lost connection on the first request.
            bk.run_coroutine(_read_lac(conn), timeout=30)


async def _read_lac(conn):  # type: ignore[no-untyped-def]
    import asyncio

    from bkspark.errors import BookieUnavailableError
    from bkspark.protocol import v3

    fut = asyncio.get_running_loop().create_future()
    conn.send_v3(v3.read_lac_request(conn.next_txn_id(), 1), 10, lambda r, e, _arg: fut.done() or fut.set_result((r, e)))
    _, error = await fut
    if isinstance(error, BookieUnavailableError):
        raise TlsHandshakeError("connection lost after the TLS handshake", error=str(error))
    return error


def test_python_client_wrong_password_refused_by_java_bookie(java_tls, pki, tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = write_jaas(tmp_path / "bad.conf", password="wrong")
    conf = {**tls_client_conf(pki), **sasl_client_conf(bad)}
    with BookKeeper(java_tls.metadata_service_uri, conf, connectTimeoutMillis=3000) as bk:
        bookie = sorted(bk.writable_bookies())[0]
        with pytest.raises(AuthenticationError, match="SASL authentication with bookie timed out"):
            bk.run_coroutine(bk.aio.pool.get(bookie, "v3"), timeout=30)


# -- Java client -> Python bookies -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def python_secured(module_roots, tmp_path_factory, pki, jaas):  # type: ignore[no-untyped-def]
    root = module_roots("py-secured")
    conf = {**tls_bookie_conf(pki, client_auth=True), **sasl_bookie_conf(jaas)}
    with one_python_bookie(root.metadata_service_uri, tmp_path_factory.mktemp("pysec"), conf):
        yield root


def _java(java_tools, uri: str, conf: dict[str, object], jaas_file: Path, *args: str):  # type: ignore[no-untyped-def]
    return run_java_client(java_tools, VERSION, uri, conf, [f"-Djava.security.auth.login.config={jaas_file}"], *args)


def test_java_client_to_python_tls_sasl_bookie(java_tools, python_secured, pki, jaas) -> None:  # type: ignore[no-untyped-def]
    """The Java client writes over v2 (START_TLS as v3, then v2 inside TLS) and reads back over v3."""
    uri = python_secured.metadata_service_uri
    conf = {**tls_client_conf(pki, client_auth=True), **SASL_CLIENT}
    proc, events = _java(
        java_tools, uri, conf, jaas, "create-and-write", "--ensemble", "1", "--write", "1", "--ack", "1",
        "--digest", "CRC32C", "--password", "pw", "--entries", "20", "--v2", "true",
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    ledger_id = [e for e in events if e["event"] == "closed"][0]["ledger_id"]
    py_conf = {**tls_client_conf(pki, client_auth=True), **sasl_client_conf(jaas)}
    with BookKeeper(uri, py_conf) as bk:
        rh = bk.open_ledger(ledger_id, password=b"pw")
        assert [e.payload for e in rh.read(0, 19)] == [b"entry-%d" % i for i in range(20)]
    proc, events = _java(java_tools, uri, conf, jaas, "read", "--ledger", str(ledger_id), "--digest", "CRC32C",
                         "--password", "pw", "--v2", "false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = [e for e in events if e["event"] == "done"]
    assert done and done[0]["count"] == 20, events[-3:]


def test_java_client_wrong_password_refused_by_python_bookie(java_tools, python_secured, pki, tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = write_jaas(tmp_path / "bad.conf", password="wrong")
    conf = {**tls_client_conf(pki, client_auth=True), **SASL_CLIENT, "addEntryTimeoutSec": 5}
    proc, events = _java(
        java_tools, python_secured.metadata_service_uri, conf, bad, "create-and-write", "--ensemble", "1",
        "--write", "1", "--ack", "1", "--digest", "CRC32C", "--password", "pw", "--entries", "1",
    )
    assert proc.returncode != 0
    assert any(e["event"] == "error" for e in events), proc.stdout[-2000:]


# -- JKS and PKCS12 stores (keytool) -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def java_stores(pki, tmp_path_factory):  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("stores")
    return {t: make_java_stores(pki, base / t, t) for t in ("JKS", "PKCS12")}


@pytest.fixture(scope="module")
def java_jks_bookie(module_java_cluster_factory, module_roots, java_stores):  # type: ignore[no-untyped-def]
    """One Java bookie whose key and trust stores are JKS, requiring a client certificate."""
    root = module_roots("java-jks")
    module_java_cluster_factory(
        VERSION, bookies=1, root=root, journal_sync_data=False,
        conf_overrides=java_store_bookie_conf(java_stores["JKS"], client_auth=True),
    )
    return root


@pytest.mark.parametrize("store_type,v2_protocol", [("PKCS12", True), ("JKS", False)], ids=["pkcs12-v2", "jks-v3"])
def test_python_client_with_java_stores_to_java_jks_bookie(java_jks_bookie, java_stores, store_type, v2_protocol) -> None:  # type: ignore[no-untyped-def]
    conf = java_store_client_conf(java_stores[store_type], client_auth=True)
    round_trip(java_jks_bookie.metadata_service_uri, conf, v2_protocol)


@pytest.fixture(scope="module")
def python_p12_bookie(module_roots, tmp_path_factory, java_stores):  # type: ignore[no-untyped-def]
    """One Python bookie whose key and trust stores are PKCS12, requiring a client certificate."""
    root = module_roots("py-p12")
    conf = java_store_bookie_conf(java_stores["PKCS12"], client_auth=True)
    with one_python_bookie(root.metadata_service_uri, tmp_path_factory.mktemp("pyp12"), conf) as cluster:
        yield root, cluster


def test_java_client_with_jks_to_python_pkcs12_bookie(java_tools, python_p12_bookie, java_stores, jaas) -> None:  # type: ignore[no-untyped-def]
    root, _ = python_p12_bookie
    uri = root.metadata_service_uri
    conf = java_store_client_conf(java_stores["JKS"], client_auth=True)
    proc, events = _java(
        java_tools, uri, conf, jaas, "create-and-write", "--ensemble", "1", "--write", "1", "--ack", "1",
        "--digest", "CRC32C", "--password", "pw", "--entries", "10", "--v2", "true",
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    ledger_id = [e for e in events if e["event"] == "closed"][0]["ledger_id"]
    proc, events = _java(java_tools, uri, conf, jaas, "read", "--ledger", str(ledger_id), "--digest", "CRC32C",
                         "--password", "pw", "--v2", "false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = [e for e in events if e["event"] == "done"]
    assert done and done[0]["count"] == 10, events[-3:]


def test_java_client_with_wrong_ca_refused_by_python_bookie(java_tools, python_p12_bookie, java_stores, jaas) -> None:  # type: ignore[no-untyped-def]
    """The Java client trusts another CA: no TLS session, the Java client fails, the Python bookie says why."""
    root, cluster = python_p12_bookie
    conf = {**java_store_client_conf(java_stores["JKS"], client_auth=True, other_ca=True), "addEntryTimeoutSec": 5}
    proc, events = _java(
        java_tools, root.metadata_service_uri, conf, jaas, "create-and-write", "--ensemble", "1", "--write", "1",
        "--ack", "1", "--digest", "CRC32C", "--password", "pw", "--entries", "1",
    )
    assert proc.returncode != 0
    assert any(e["event"] == "error" for e in events), proc.stdout[-2000:]
    deadline = time.monotonic() + 30
    expected = "the client refused this bookie's certificate: it is not signed by a CA in the client's trust store"
    while expected not in cluster.log_tail(0, 400):
        assert time.monotonic() < deadline, cluster.log_tail(0, 60)
        time.sleep(0.2)
