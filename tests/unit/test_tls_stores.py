"""JKS and PKCS12 key and trust stores (bkspark/security/stores.py), written by the JDK's keytool: a TLS
handshake with them against an in-process bookie, wrong passwords, the missing extra, the temporary key file,
and certificate reload."""

from __future__ import annotations

import os
import ssl
import stat
import sys
import time
from pathlib import Path

import pytest

from bkspark.client.connection import V2, V3
from bkspark.client.pool import BookiePool
from bkspark.errors import InvalidOptionError, NoSuchEntryError, NoSuchLedgerError, SecurityError, TlsHandshakeError
from bkspark.security import stores
from bkspark.config.secrets import Secret
from bkspark.security.tls import TlsContextProvider, TlsSettings
from bookie_server.server import BookieServer
from tests.harness.security import (
    STORE_PASSWORD,
    JavaStores,
    Pki,
    java_store_bookie_conf,
    java_store_client_conf,
    make_java_stores,
    make_pki,
    tls_client_conf,
)
from tests.unit.test_security import _read_lac, _serve, _v2_read

STORE_TYPES = ["JKS", "PKCS12"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module", params=STORE_TYPES)
def java_stores(request: pytest.FixtureRequest, pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> JavaStores:
    return make_java_stores(pki, tmp_path_factory.mktemp(f"stores-{request.param}"), request.param)


def test_mutual_tls_with_keytool_stores(tmp_path: Path, java_stores: JavaStores) -> None:
    """Bookie and client both use keytool-written stores, the client presenting its own key (mutual TLS)."""

    async def body(pool: BookiePool, server: BookieServer) -> None:
        assert isinstance(await _read_lac(pool), (NoSuchEntryError, NoSuchLedgerError))
        assert isinstance(await _v2_read(pool), (NoSuchEntryError, NoSuchLedgerError))
        assert all(c.tls for c in pool._conns.values())

    _serve(tmp_path, java_store_bookie_conf(java_stores, client_auth=True),
           java_store_client_conf(java_stores, client_auth=True), body)


def test_trust_store_of_another_ca_refused(tmp_path: Path, java_stores: JavaStores) -> None:
    async def body(pool: BookiePool, server: BookieServer) -> None:
        with pytest.raises(TlsHandshakeError, match="not signed by a CA in tlsTrustStore"):
            await pool.get("b", V3)

    _serve(tmp_path, java_store_bookie_conf(java_stores), java_store_client_conf(java_stores, other_ca=True), body)


def test_pem_client_to_bookie_with_keytool_key_store(tmp_path: Path, pki: Pki, java_stores: JavaStores) -> None:
    async def body(pool: BookiePool, server: BookieServer) -> None:
        assert isinstance(await _read_lac(pool), (NoSuchEntryError, NoSuchLedgerError))
        assert (await pool.get("b", V2)).tls

    _serve(tmp_path, java_store_bookie_conf(java_stores), tls_client_conf(pki), body)


def test_wrong_store_password_is_a_clear_error(tmp_path: Path, java_stores: JavaStores) -> None:
    bad = tmp_path / "bad.pw"
    bad.write_text("not-the-password\n")
    for conf, side, what in [
        ({**java_store_bookie_conf(java_stores), "tlsKeyStorePasswordPath": str(bad)}, True, "key store"),
        ({**java_store_client_conf(java_stores), "tlsTrustStorePasswordPath": str(bad)}, False, "trust store"),
    ]:
        settings = TlsSettings.from_conf(conf, server_side=side)
        assert settings is not None
        with pytest.raises(SecurityError, match=f"cannot open the TLS {what}: wrong password") as info:
            settings.build()
        assert "not-the-password" not in str(info.value) and STORE_PASSWORD not in str(info.value)


def test_trust_store_without_password_file(java_stores: JavaStores) -> None:
    """Java reads a trust store without its password (no integrity check): so do we, for JKS; a PKCS12
    file written by keytool is encrypted, so it needs the password."""
    conf = {k: v for k, v in java_store_client_conf(java_stores).items() if k != "tlsTrustStorePasswordPath"}
    settings = TlsSettings.from_conf(conf, server_side=False)
    assert settings is not None
    if java_stores.store_type == "JKS":
        assert settings.build().cert_store_stats()["x509_ca"] == 1
    else:
        with pytest.raises(SecurityError, match="wrong password"):
            settings.build()


def test_jks_type_reads_a_pkcs12_file(pki: Pki, tmp_path: Path) -> None:
    """Since Java 9 keytool writes PKCS12 by default and Java's JKS loader reads it too: so do we."""
    p12 = make_java_stores(pki, tmp_path / "p12", "PKCS12")
    conf = {**java_store_bookie_conf(p12), "tlsKeyStoreType": "JKS", "tlsTrustStoreType": "JKS"}
    settings = TlsSettings.from_conf(conf, server_side=True)
    assert settings is not None and settings.build() is not None


class _RecordingContext(ssl.SSLContext):
    """Records what the temporary key file looked like when ssl read it."""

    seen: list[tuple[str, int, int]] = []

    def load_cert_chain(self, certfile, keyfile=None, password=None):  # type: ignore[no-untyped-def]
        text = Path(certfile).read_text()
        assert "ENCRYPTED PRIVATE KEY" in text and "BEGIN PRIVATE KEY" not in text
        self.seen.append((certfile, stat.S_IMODE(os.stat(certfile).st_mode),
                          stat.S_IMODE(os.stat(os.path.dirname(certfile)).st_mode)))
        return super().load_cert_chain(certfile, keyfile, password)


def test_key_passes_through_a_private_encrypted_file_deleted_after(java_stores: JavaStores) -> None:
    ctx = _RecordingContext(ssl.PROTOCOL_TLS_SERVER)
    _RecordingContext.seen = []
    stores.load_key_store_into(ctx, str(java_stores.bookie_keystore), java_stores.store_type, Secret(STORE_PASSWORD))
    [(path, file_mode, dir_mode)] = _RecordingContext.seen
    assert (file_mode, dir_mode) == (0o600, 0o700)
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
    # Also when ssl refuses it.
    _RecordingContext.seen = []
    with pytest.raises(SecurityError):
        stores.load_key_store_into(ctx, str(java_stores.truststore), java_stores.store_type, Secret(STORE_PASSWORD))
    assert _RecordingContext.seen == []  # a trust store holds no key: refused before any file is written


def test_key_store_reload(java_stores: JavaStores, tmp_path: Path) -> None:
    """tlsCertFilesRefreshDurationSeconds: a changed key store is read again; a broken one keeps the old context."""
    store = tmp_path / java_stores.bookie_keystore.name
    store.write_bytes(java_stores.bookie_keystore.read_bytes())
    conf = {**java_store_bookie_conf(java_stores), "tlsKeyStore": str(store), "tlsCertFilesRefreshDurationSeconds": "0.05"}
    settings = TlsSettings.from_conf(conf, server_side=True)
    assert settings is not None
    provider = TlsContextProvider(settings)
    first = provider.context()
    store.write_bytes(java_stores.client_keystore.read_bytes())  # a new key and certificate
    os.utime(store, (time.time() + 5, time.time() + 5))
    time.sleep(0.1)
    second = provider.context()
    assert second is not first
    store.write_bytes(b"garbage")
    os.utime(store, (time.time() + 10, time.time() + 10))
    time.sleep(0.1)
    assert provider.context() is second


@pytest.mark.parametrize("store_type,module", [("JKS", "jks"), ("PKCS12", "cryptography")])
def test_without_the_extra_an_error_names_it(pki: Pki, monkeypatch: pytest.MonkeyPatch, store_type: str, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    conf = {**tls_client_conf(pki), "tlsTrustStoreType": store_type}
    with pytest.raises(InvalidOptionError, match=r"need the optional extra bkspark\[tls-stores\]"):
        TlsSettings.from_conf(conf, server_side=False)
    # A store type only a side that does not read the store names is no error (Java ignores it too).
    assert TlsSettings.from_conf({**tls_client_conf(pki), "tlsKeyStoreType": store_type}, server_side=False) is not None


def test_a_jks_key_whose_password_differs_from_the_stores_is_refused(tmp_path: Path, pki: Pki) -> None:
    """docs/security.md, JKS and PKCS12 stores: a JKS key whose own password differs from the store's is refused
    (Java's TLSContextFactory uses one password for both)."""
    import subprocess

    java_stores = make_java_stores(pki, tmp_path / "jks", "JKS")  # (PKCS12: keytool gives a key the store's password)
    store = tmp_path / "two-passwords.jks"
    subprocess.run(
        ["keytool", "-importkeystore", "-noprompt", "-srckeystore", str(java_stores.bookie_keystore), "-srcstoretype",
         "JKS", "-srcstorepass", STORE_PASSWORD, "-destkeystore", str(store), "-deststoretype", "JKS",
         "-deststorepass", STORE_PASSWORD, "-destkeypass", "another-key-password"],
        check=True, capture_output=True, timeout=120,
    )
    conf = {**java_store_bookie_conf(java_stores), "tlsKeyStore": str(store)}
    settings = TlsSettings.from_conf(conf, server_side=True)
    assert settings is not None
    with pytest.raises(SecurityError, match="not readable with the store password") as info:
        settings.build()
    assert "another-key-password" not in str(info.value) and STORE_PASSWORD not in str(info.value)
