"""Test material for secured clusters: PEM certificates made with `openssl`, JAAS files, TLS/SASL settings.

`make_pki(dir)` writes a CA, a bookie certificate (subjectAltName IP:127.0.0.1 and DNS:localhost), a
client certificate, and a second, unrelated CA (for "wrong CA" tests). Private keys are PKCS#8
(`-----BEGIN PRIVATE KEY-----`), which both Java's TLSContextFactory (PEM) and Python's ssl read.
"""

from __future__ import annotations

import json
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from tests.harness.python_bookie import PythonBookieCluster

__all__ = ["AuthenticatedBookies", "Pki", "JavaStores", "make_pki", "make_java_stores", "java_store_bookie_conf", "java_store_client_conf", "write_jaas", "SASL_USER", "SASL_PASSWORD", "tls_client_conf", "tls_bookie_conf", "sasl_client_conf", "sasl_bookie_conf", "run_java_client", "JAVA_CLIENT", "one_python_bookie", "round_trip"]

TLS_FACTORY = "org.apache.bookkeeper.tls.TLSContextFactory"
SASL_USER = "bookkeeperuser"
SASL_PASSWORD = "s3cr3t-sasl-pw"


@dataclass(frozen=True)
class Pki:
    ca: Path
    bookie_cert: Path
    bookie_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    key, crt = d / f"{name}.key", d / f"{name}.crt"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt), "-days", "2",
             "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    return key, crt


def _leaf(d: Path, name: str, ca_key: Path, ca_crt: Path, san: str) -> tuple[Path, Path]:
    key, csr, crt, ext = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.crt", d / f"{name}.ext"
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(key), cwd=d)
    _openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", f"/CN={name}", cwd=d)
    ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial",
             "-out", str(crt), "-days", "2", "-extfile", str(ext), cwd=d)
    return key, crt


def make_pki(d: Path) -> Pki:
    """Certificates for one test module (a few seconds of RSA key generation)."""
    d.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = _ca(d, "ca")
    bkey, bcrt = _leaf(d, "bookie", ca_key, ca_crt, "IP:127.0.0.1,DNS:localhost")
    ckey, ccrt = _leaf(d, "client", ca_key, ca_crt, "DNS:bkspark-client")
    _, other = _ca(d, "other-ca")
    return Pki(ca_crt, bcrt, bkey, ccrt, ckey, other)


STORE_PASSWORD = "st0re-pw-Kx7"


@dataclass(frozen=True)
class JavaStores:
    """Key and trust stores of one type written by the JDK's ``keytool`` (so in the real Java formats)."""

    store_type: str
    bookie_keystore: Path
    client_keystore: Path
    truststore: Path
    other_truststore: Path  # holds only the unrelated CA
    password_file: Path


def _keytool(*args: str) -> None:
    subprocess.run(["keytool", *args], check=True, capture_output=True, timeout=120)


def make_java_stores(pki: Pki, d: Path, store_type: str, password: str = STORE_PASSWORD) -> JavaStores:
    """``store_type`` (JKS or PKCS12) stores of the PKI's keys: openssl bundles each key with its chain
    (keytool cannot import a bare PEM key), then keytool rewrites the bundle as a key store of ``store_type``
    and imports the CAs as trusted certificate entries."""
    d.mkdir(parents=True, exist_ok=True)
    ext = "jks" if store_type == "JKS" else "p12"
    out = {}
    for name, key, cert in (("bookie", pki.bookie_key, pki.bookie_cert), ("client", pki.client_key, pki.client_cert)):
        bundle, store = d / f"{name}-bundle.p12", d / f"{name}.{ext}"
        _openssl("pkcs12", "-export", "-inkey", str(key), "-in", str(cert), "-certfile", str(pki.ca), "-name", name,
                 "-out", str(bundle), "-passout", f"pass:{password}", cwd=d)
        _keytool("-importkeystore", "-noprompt", "-srckeystore", str(bundle), "-srcstoretype", "PKCS12",
                 "-srcstorepass", password, "-destkeystore", str(store), "-deststoretype", store_type,
                 "-deststorepass", password, "-destkeypass", password)
        bundle.unlink()
        out[name] = store
    trust, other = d / f"trust.{ext}", d / f"other-trust.{ext}"
    for store, ca in ((trust, pki.ca), (other, pki.other_ca)):
        _keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(ca), "-keystore", str(store),
                 "-storetype", store_type, "-storepass", password)
    pw = d / f"{ext}.pw"
    pw.write_text(password + "\n")
    return JavaStores(store_type, out["bookie"], out["client"], trust, other, pw)


def java_store_bookie_conf(stores: JavaStores, client_auth: bool = False) -> dict[str, object]:
    """bk_server.conf TLS keys with key and trust stores of ``stores.store_type`` (Java and Python bookies)."""
    return {
        "tlsProviderFactoryClass": TLS_FACTORY,
        "tlsProvider": "JDK",
        "tlsKeyStoreType": stores.store_type,
        "tlsKeyStore": str(stores.bookie_keystore),
        "tlsKeyStorePasswordPath": str(stores.password_file),
        "tlsTrustStoreType": stores.store_type,
        "tlsTrustStore": str(stores.truststore),
        "tlsTrustStorePasswordPath": str(stores.password_file),
        "tlsClientAuthentication": "true" if client_auth else "false",
    }


def java_store_client_conf(stores: JavaStores, client_auth: bool = False, other_ca: bool = False) -> dict[str, object]:
    """Client TLS keys with stores of ``stores.store_type`` (Java and Python clients)."""
    conf: dict[str, object] = {
        "tlsProviderFactoryClass": TLS_FACTORY,
        "tlsProvider": "JDK",
        "tlsTrustStoreType": stores.store_type,
        "tlsTrustStore": str(stores.other_truststore if other_ca else stores.truststore),
        "tlsTrustStorePasswordPath": str(stores.password_file),
        "tlsHostnameVerificationEnabled": "false",
    }
    if client_auth:
        conf.update(
            tlsClientAuthentication="true",
            tlsKeyStoreType=stores.store_type,
            tlsKeyStore=str(stores.client_keystore),
            tlsKeyStorePasswordPath=str(stores.password_file),
        )
    return conf


def tls_bookie_conf(pki: Pki, client_auth: bool = False) -> dict[str, object]:
    """bk_server.conf TLS keys (the same for Java and Python bookies)."""
    return {
        "tlsProviderFactoryClass": TLS_FACTORY,
        "tlsProvider": "JDK",
        "tlsKeyStoreType": "PEM",
        "tlsKeyStore": str(pki.bookie_key),
        "tlsCertificatePath": str(pki.bookie_cert),
        "tlsTrustStoreType": "PEM",
        "tlsTrustStore": str(pki.ca),
        "tlsClientAuthentication": "true" if client_auth else "false",
    }


def tls_client_conf(pki: Pki, client_auth: bool = False, ca: Path | None = None) -> dict[str, object]:
    """Client TLS keys (the same for the Java and the Python client)."""
    conf: dict[str, object] = {
        "tlsProviderFactoryClass": TLS_FACTORY,
        "tlsProvider": "JDK",
        "tlsTrustStoreType": "PEM",
        "tlsTrustStore": str(ca or pki.ca),
        "tlsHostnameVerificationEnabled": "false",
    }
    if client_auth:
        conf.update(
            tlsClientAuthentication="true",
            tlsKeyStoreType="PEM",
            tlsKeyStore=str(pki.client_key),
            tlsCertificatePath=str(pki.client_cert),
        )
    return conf


def write_jaas(path: Path, password: str = SASL_PASSWORD, user: str = SASL_USER, zk: bool = False) -> Path:
    """A JAAS file with the sections BookKeeper reads (Bookie, BookKeeper, Auditor) and, with `zk`, the
    ZooKeeper server's (Server) and client's (Client) DIGEST-MD5 sections."""
    module = "org.apache.zookeeper.server.auth.DigestLoginModule"
    text = (
        f'Bookie {{\n  {module} required\n  user_{SASL_USER}="{SASL_PASSWORD}";\n}};\n'
        f'BookKeeper {{\n  {module} required\n  username="{user}"\n  password="{password}";\n}};\n'
        f'Auditor {{\n  {module} required\n  username="{user}"\n  password="{password}";\n}};\n'
    )
    if zk:
        text += (
            f'Server {{\n  {module} required\n  user_{SASL_USER}="{SASL_PASSWORD}";\n}};\n'
            f'Client {{\n  {module} required\n  username="{user}"\n  password="{password}";\n}};\n'
        )
    path.write_text(text)
    return path


def sasl_bookie_conf(jaas: Path) -> dict[str, object]:
    """Python bookie keys for SASL (a Java bookie gets the JAAS file as a JVM system property instead)."""
    return {
        "bookieAuthProviderFactoryClass": "org.apache.bookkeeper.sasl.SASLBookieAuthProviderFactory",
        "java.security.auth.login.config": str(jaas),
    }


def sasl_client_conf(jaas: Path) -> dict[str, object]:
    """Python client keys for SASL."""
    return {
        "clientAuthProviderFactoryClass": "org.apache.bookkeeper.sasl.SASLClientProviderFactory",
        "java.security.auth.login.config": str(jaas),
    }


class AuthenticatedBookies(PythonBookieCluster):
    """Python bookies whose harness kazoo client (registration checks, ``bookie_ids``) authenticates with
    ``zk_kwargs`` (``auth_data`` / ``sasl_options``), for a ZooKeeper that requires authentication."""

    def __init__(self, *args: Any, zk_kwargs: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.zk_kwargs = dict(zk_kwargs)

    @property
    def zk(self) -> KazooClient:  # type: ignore[override]
        if self._zk is None:
            self._zk = KazooClient(hosts=self.connect_string, timeout=15.0, **self.zk_kwargs)
            self._zk.start(timeout=30)
        return self._zk


JAVA_CLIENT = "bkspark.tools.JavaClient"


def run_java_client(
    java_tools: Any, version: str, uri: str, conf: Mapping[str, object], jvm_args: Sequence[str], *args: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run tools/java's JavaClient (Apache BookKeeper's client) and parse the JSON events it prints."""
    proc = java_tools.run(version, JAVA_CLIENT, *args, metadata_service_uri=uri, conf=conf, jvm_args=list(jvm_args), timeout=180)
    events = []
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return proc, events


@contextmanager
def one_python_bookie(uri: str, directory: Path, conf: Mapping[str, object]) -> Iterator[PythonBookieCluster]:
    """One started Python bookie (no journal fsync) with ``conf`` on the root of ``uri``, stopped on exit."""
    with PythonBookieCluster(uri, directory, bookies=1, journal_sync_data=False, conf_overrides=conf) as cluster:
        cluster.start_all()
        yield cluster


def round_trip(uri: str, conf: Mapping[str, object], v2_protocol: bool, n: int = 30) -> None:
    """Write ``n`` entries to a new ledger and read them back (and its LAC, over v3) through a secured cluster; every
    bookie connection is TLS exactly when ``conf`` configures TLS."""
    from bkspark.client import BookKeeper

    data = [b"secured-%d" % i * 20 for i in range(n)]
    with BookKeeper(uri, {**conf, "startTLSTimeoutSecs": 30}, useV2WireProtocol=v2_protocol) as bk:
        lh = bk.create_ledger(1, 1, 1, password=b"pw")
        futures = [lh.append_async(d) for d in data]
        assert [f.result(60) for f in futures] == list(range(n))
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"pw")
        assert [e.payload for e in rh.read(0, n - 1)] == data
        assert rh.read_last_add_confirmed() == n - 1  # v3 connection too
        conns = bk.aio.pool._conns
        assert conns and all(c.tls for c in conns.values()) == ("tlsProviderFactoryClass" in conf)
