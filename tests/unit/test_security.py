"""Security pieces: DIGEST-MD5 (both sides), JAAS files, TLS settings, the key registry, secrets; and the
client's START_TLS/SASL handshake against an in-process bookie server (real sockets, real TLS)."""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import ssl
import time
from pathlib import Path
from typing import Any

import pytest

from bkspark.client.conf import ClientConf
from bkspark.client.connection import V2, V3
from bkspark.client.pool import BookiePool
from bkspark.confkeys import BOOKIE_KEYS, check_keys, check_unsupported
from bkspark.datasource.options import parse_read_options, parse_write_options
from bkspark.errors import (
    AuthenticationError,
    InvalidOptionError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ProtocolError,
    SecurityError,
    TlsHandshakeError,
    UnauthorizedAccessError,
)
from bkspark.protocol import v2, v3
from bkspark.protocol.correlation import read_key
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
from bkspark.protocol.sasl import PLUGIN_NAME, DigestMd5Client, DigestMd5Server, parse_directives
from bkspark.security.auth import BookieSecurity, ClientSecurity
from bkspark.security.jaas import bookie_credentials, client_credentials, parse_jaas
from bkspark.config.secrets import Secret, read_password_file, secret_from
from bkspark.security.tls import TlsContextProvider, TlsSettings
from bkspark.security.zk import ZkSecurity
from bookie_server.bookie import Bookie
from bookie_server.server import BookieServer
from tests.harness.deadline import GENEROUS
from tests.harness.security import (
    SASL_PASSWORD,
    SASL_USER,
    Pki,
    make_pki,
    sasl_bookie_conf,
    sasl_client_conf,
    tls_bookie_conf,
    tls_client_conf,
    write_jaas,
)
from tests.unit.test_bookie_server import KEY, Conn, make_entry, with_bookie

# -- DIGEST-MD5 ----------------------------------------------------------------------------------------------------


def _exchange(server: DigestMd5Server, client: DigestMd5Client) -> None:
    challenge = server.evaluate(client.initial())
    response = client.evaluate(challenge)
    assert response is not None
    final = server.evaluate(response)
    assert client.evaluate(final) is None


def test_digest_md5_roundtrip_with_pure_sasl_client() -> None:
    server = DigestMd5Server({SASL_USER: Secret("pw")})
    client = DigestMd5Client(SASL_USER, Secret("pw"))
    _exchange(server, client)
    assert server.complete and server.user == SASL_USER and client.complete


def test_digest_md5_rfc2831_vector() -> None:
    # RFC 2831 §4's example values, through our server's arithmetic (the response and rspauth it states).
    from bkspark.protocol.sasl import _response_value

    args = (b"chris", b"elwood.innosoft.com", b"secret", b"OA6MG9tEQGm2hh", b"OA6MHXh6VqTrRk", b"00000001", b"auth",
            b"imap/elwood.innosoft.com", None)
    assert _response_value(*args, b"AUTHENTICATE") == b"d388dad90d4bbd760a152321f2143af7"
    assert _response_value(*args, b"") == b"ea40f60335c427b5527b84dbabcdfffd"


@pytest.mark.parametrize(
    "user,password,allowed,message",
    [
        (SASL_USER, "wrong", ".*bookkeeper.*", "wrong SASL password"),
        ("alice", "pw", ".*bookkeeper.*", "unknown SASL user"),
        ("alice", "pw", "bookkeeper.*", "not allowed by saslJaasClientAllowedIds"),
    ],
)
def test_digest_md5_refusals(user: str, password: str, allowed: str, message: str) -> None:
    users = {SASL_USER: Secret("pw")}
    if message.startswith("not allowed"):
        users["alice"] = Secret("pw")
    server = DigestMd5Server(users, allowed)
    client = DigestMd5Client(user, Secret(password))
    response = client.evaluate(server.evaluate(b""))
    with pytest.raises(AuthenticationError, match=message) as info:
        server.evaluate(response or b"")
    assert "pw" not in str(info.value).replace(SASL_USER, "") or password == "pw"


def test_digest_md5_client_rejects_a_bookie_without_the_password() -> None:
    real = DigestMd5Server({SASL_USER: Secret("pw")})
    client = DigestMd5Client(SASL_USER, Secret("pw"))
    response = client.evaluate(real.evaluate(b""))
    real.evaluate(response or b"")
    with pytest.raises(AuthenticationError, match="prove"):
        client.evaluate(b"rspauth=00000000000000000000000000000000")


def test_digest_md5_server_rejects_malformed_tokens() -> None:
    server = DigestMd5Server({SASL_USER: Secret("pw")})
    server.evaluate(b"")
    for token in (b"username", b'username="x', b"x" * 5000, b'username="bookkeeperuser"'):
        with pytest.raises((AuthenticationError, ProtocolError)):
            server.evaluate(token)
    assert parse_directives(b'a="q\\"x",b=c') == {"a": b'q"x', "b": b"c"}


# -- JAAS ----------------------------------------------------------------------------------------------------------


def test_jaas_sections_and_secrets(tmp_path: Path) -> None:
    path = write_jaas(tmp_path / "jaas.conf", zk=True)
    text = path.read_text() + '/* comment */ Other { x.Y optional a="b" // trailing\n ; };\n'
    sections = parse_jaas(text)
    assert set(sections) == {"Bookie", "BookKeeper", "Auditor", "Server", "Client", "Other"}
    assert repr(sections["BookKeeper"][0].options["password"]) == "***"
    assert client_credentials(str(path), "BookKeeper")[0] == SASL_USER
    assert bookie_credentials(str(path), "Bookie")[SASL_USER].reveal() == SASL_PASSWORD
    with pytest.raises(InvalidOptionError, match="no 'Nope' section"):
        client_credentials(str(path), "Nope")
    krb = tmp_path / "krb.conf"
    krb.write_text('BookKeeper { com.sun.security.auth.module.Krb5LoginModule required principal="bk/h@R"; };')
    with pytest.raises(InvalidOptionError, match=r"JAAS section 'BookKeeper' is a Kerberos \(GSSAPI\) one"):
        client_credentials(str(krb), "BookKeeper")  # DIGEST-MD5 credentials only: kerberos_login reads this one


def test_kerberos_sections_are_read_for_bookies_and_zookeeper(tmp_path: Path) -> None:
    """A Kerberos login of a client, a bookie or a ZooKeeper client is read as Java reads it (GSSAPI, docs/security.md
    "Kerberos"); zookeeper.sasl.client=false still turns ZooKeeper's SASL off, for digest credentials instead."""
    krb = tmp_path / "krb.conf"
    module = "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=TRUE keyTab=\"/k\" storeKey=true"
    krb.write_text("".join(f'{s} {{ {module} principal="bk/h@R"; }};\n' for s in ("BookKeeper", "Bookie", "Client")))
    digest = tmp_path / "digest"
    digest.write_text("u:p\n")
    sasl_client = {"clientAuthProviderFactoryClass": "org.apache.bookkeeper.sasl.SASLClientProviderFactory",
                   "java.security.auth.login.config": str(krb), "bookkeeper.sasl.servicename": "bk"}
    sasl = ClientSecurity.from_conf(sasl_client).sasl
    assert sasl is not None and sasl.mechanism == "GSSAPI" and sasl.service_name == "bk"
    assert sasl.kerberos is not None
    assert (sasl.kerberos.principal, sasl.kerberos.keytab, sasl.kerberos.use_keytab) == ("bk/h@R", "/k", True)
    assert sasl.kerberos.store_key and not sasl.kerberos.use_ticket_cache  # "TRUE": Java's Boolean rule, any case
    zk_krb = ZkSecurity.from_conf({"java.security.auth.login.config": str(krb), "zookeeper.sasl.client.username": "zk",
                                   "zookeeper.sasl.client.canonicalize.hostname": "false"})
    assert zk_krb.kerberos is not None and zk_krb.kerberos.principal == "bk/h@R" and zk_krb.authenticated
    assert (zk_krb.kerberos_service, zk_krb.canonicalize_host) == ("zk", False)
    zk = ZkSecurity.from_conf({"java.security.auth.login.config": str(krb), "zookeeper.sasl.client": "false",
                               "zkDigestAuthPath": str(digest)})
    assert zk.sasl_user is None and zk.kazoo_kwargs()["auth_data"] == [("digest", "u:p")]
    with pytest.raises(InvalidOptionError):
        parse_jaas("BookKeeper { x required a= ; };")


def test_kerberos_login_options_are_checked_at_start(tmp_path: Path) -> None:
    from bkspark.security.kerberos import KerberosLogin

    with pytest.raises(InvalidOptionError, match="useKeyTab=true but no keyTab"):
        KerberosLogin.from_options("BookKeeper", {"useKeyTab": "true", "principal": "a@R"})
    with pytest.raises(InvalidOptionError, match="never prompts"):
        KerberosLogin.from_options("BookKeeper", {"principal": "a@R"})
    cache = KerberosLogin.from_options("BookKeeper", {"useTicketCache": "true", "ticketCache": "/tmp/cc"})
    assert cache.use_ticket_cache and cache.ticket_cache == "/tmp/cc" and cache.principal is None
    bookie = KerberosLogin.from_options("Bookie", {"useTicketCache": "true", "principal": "bookkeeper/h@R"})
    with pytest.raises(InvalidOptionError, match="needs useKeyTab=true and keyTab"):
        bookie.acceptor_credentials()


def test_kerberos_without_the_gssapi_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from bkspark.security.kerberos import KerberosLogin

    monkeypatch.setitem(sys.modules, "gssapi", None)  # an install without the kerberos extra
    login = KerberosLogin.from_options("BookKeeper", {"useKeyTab": "true", "keyTab": "/k", "principal": "a@R"})
    with pytest.raises(AuthenticationError, match=r"pip install 'bkspark\[kerberos\]'"):
        login.initiator_credentials()


# -- TLS settings -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_tls_settings_errors_at_start(pki: Pki) -> None:
    base = tls_client_conf(pki)
    assert TlsSettings.from_conf({}, server_side=False) is None
    for change, message in [
        ({"tlsProviderFactoryClass": "com.example.MyTls"}, "unsupported TLS provider factory"),
        ({"tlsProvider": "BoringSSL"}, "JDK or OpenSSL"),
        ({"tlsEnabledCipherSuites": "TLS_AES_128_GCM_SHA256"}, "tlsEnabledCipherSuites is not supported"),
        ({"tlsEnabledProtocols": "SSLv3"}, "unsupported TLS protocol"),
        ({"tlsTrustStore": "/nonexistent/ca.crt"}, "TLS file not found"),
        ({"tlsClientAuthentication": "true", "tlsKeyStoreType": "PEM"}, "tlsCertificatePath is required"),
    ]:
        with pytest.raises(InvalidOptionError, match=message):
            TlsSettings.from_conf({**base, **change}, server_side=False)


def test_tls_client_keys_win_and_case_does_not_matter(pki: Pki) -> None:
    conf = {k.lower(): v for k, v in tls_client_conf(pki).items()}  # as Spark hands them over
    conf["clienttruststore"] = str(pki.other_ca)
    settings = TlsSettings.from_conf(conf, server_side=False)
    assert settings is not None and settings.trust_store == str(pki.other_ca)
    ctx = settings.build()
    assert ctx.verify_mode == ssl.CERT_REQUIRED and not ctx.check_hostname
    # The key store too (docs/security.md: clientKeyStore*, clientTrustStore* win, client only).
    mutual = {**tls_client_conf(pki, client_auth=True), "tlsKeyStoreType": "JKS", "tlsKeyStore": str(pki.bookie_key),
              "clientKeyStoreType": "PEM", "clientKeyStore": str(pki.client_key)}
    client = TlsSettings.from_conf(mutual, server_side=False)
    assert client is not None and (client.key_store, client.key_store_type) == (str(pki.client_key), "PEM")
    server_conf = {**tls_bookie_conf(pki), "clientKeyStore": str(pki.client_key), "clientKeyStoreType": "JKS"}
    bookie = TlsSettings.from_conf(server_conf, server_side=True)
    assert bookie is not None and (bookie.key_store, bookie.key_store_type) == (str(pki.bookie_key), "PEM")


def test_encrypted_key_with_password_file_and_reload(pki: Pki, tmp_path: Path) -> None:
    import subprocess

    key = tmp_path / "enc.key"
    pw = tmp_path / "key.pw"
    pw.write_text("keypass\n")
    subprocess.run(["openssl", "pkcs8", "-topk8", "-in", str(pki.bookie_key), "-out", str(key), "-passout",
                    "pass:keypass", "-v2", "aes-256-cbc"], check=True, capture_output=True)
    conf = {**tls_bookie_conf(pki), "tlsKeyStore": str(key), "tlsKeyStorePasswordPath": str(pw),
            "tlsCertFilesRefreshDurationSeconds": "0.05"}
    settings = TlsSettings.from_conf(conf, server_side=True)
    assert settings is not None
    provider = TlsContextProvider(settings)
    first = provider.context()
    time.sleep(0.1)
    assert provider.context() is first  # nothing changed
    pw.write_text("keypass")  # same password, new mtime: the context is rebuilt
    os.utime(pw, (time.time() + 5, time.time() + 5))
    time.sleep(0.1)
    assert provider.context() is not first
    pw.write_text("wrong")
    os.utime(pw, (time.time() + 10, time.time() + 10))
    time.sleep(0.1)
    assert provider.context() is not None  # a failed reload keeps the last good context
    with pytest.raises(SecurityError, match="wrong key password"):
        TlsSettings.from_conf({**conf, "tlsKeyStorePasswordPath": str(pw)}, server_side=True).build()  # type: ignore[union-attr]


# -- the key registry, secrets ------------------------------------------------------------------------------------


def test_unknown_keys_warned_with_closest_known(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="bkspark.conf"):
        ClientConf.from_mapping(
            {"networkTopologyScriptFileNam": "x", "enableStatistics": "false", "minNumRacksPerWriteQuorum": "2"}
        )
        unknown = check_keys({"bookiePrt": "1", "tlsTrustStore": "x"}, BOOKIE_KEYS | {"bookiePort"}, "bookie")
    assert unknown == ["bookiePrt"]
    text = caplog.text
    assert (
        "unknown client configuration key 'networkTopologyScriptFileNam' is ignored "
        "(did you mean 'networkTopologyScriptFileName'?)"
    ) in text
    assert "'bookiePrt' is ignored (did you mean 'bookiePort'?)" in text
    assert "'enableStatistics' of Apache BookKeeper has no effect" in text
    assert "minNumRacksPerWriteQuorum" not in text


def test_unsupported_values_are_errors() -> None:
    with pytest.raises(InvalidOptionError, match="plain HTTP only"):
        check_unsupported({"httpServerTlsEnable": "true"})
    with pytest.raises(InvalidOptionError, match="unsupported client auth provider"):
        ClientSecurity.from_conf({"clientAuthProviderFactoryClass": "org.example.Auth"})
    with pytest.raises(InvalidOptionError, match="unsupported bookie auth provider"):
        BookieSecurity.from_conf({"bookieAuthProviderFactoryClass": "org.example.Auth"})
    with pytest.raises(InvalidOptionError, match="needs a JAAS configuration"):
        ClientSecurity.from_conf({"clientAuthProviderFactoryClass": "org.apache.bookkeeper.sasl.SASLClientProviderFactory"})


def test_secrets_never_print(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = Secret("hunter2")
    assert repr(secret) == str(secret) == "***" and f"{secret}" == "***"
    assert pickle.loads(pickle.dumps(secret)).reveal() == "hunter2"
    (tmp_path / "pw").write_text("from-file\n")
    monkeypatch.setenv("BK_PW", "from-env")
    assert read_password_file(str(tmp_path / "pw")).reveal() == "from-file"
    assert secret_from(env="BK_PW", what="x").reveal() == "from-env"  # type: ignore[union-attr]
    with pytest.raises(InvalidOptionError, match="one way only"):
        secret_from(value="a", file=str(tmp_path / "pw"), what="x")
    base = {"metadataServiceUri": "zk://127.0.0.1:2181/l", "ledgers": "1"}
    opts = parse_read_options({**base, "passwordFile": str(tmp_path / "pw")})
    assert opts.password == b"from-file" and "from-file" not in repr(opts)
    wopts = parse_write_options({"metadataServiceUri": "zk://127.0.0.1:2181/l", "dataset": "d", "passwordEnv": "BK_PW"})
    assert wopts.password == b"from-env" and "from-env" not in repr(wopts)
    with pytest.raises(InvalidOptionError) as info:
        parse_read_options({**base, "pasword": "hunter2"})
    assert "hunter2" not in str(info.value)


def test_zk_security_from_conf(tmp_path: Path) -> None:
    jaas = write_jaas(tmp_path / "jaas.conf", zk=True)
    (tmp_path / "digest").write_text("alice:pw\n")
    zk = ZkSecurity.from_conf({"zkEnableSecurity": "true", "java.security.auth.login.config": str(jaas),
                               "zkDigestAuthPath": str(tmp_path / "digest")})
    kwargs = zk.kazoo_kwargs()
    assert kwargs["default_acl"][0].id.scheme == "auth"
    assert kwargs["auth_data"] == [("digest", "alice:pw")]
    assert kwargs["sasl_options"]["username"] == SASL_USER
    assert "pw" not in repr(zk).replace(SASL_USER, "")
    assert ZkSecurity.from_conf({}).kazoo_kwargs()["default_acl"][0].id.scheme == "world"


# -- the handshake against an in-process bookie server ---------------------------------------------------------------


class _Resolver:
    def __init__(self, port: int) -> None:
        self.port = port

    def resolve(self, bookie_id: str) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def forget(self, bookie_id: str) -> None:
        pass

    def extensions(self, bookie_id: str) -> frozenset[str]:
        return frozenset()


def _serve(tmp_path: Path, bookie_conf: dict[str, Any], client_conf: dict[str, Any], body: Any) -> None:
    """Run ``body(pool, server)``: a client pool with ``client_conf``'s security, an in-process bookie."""

    @with_bookie(**bookie_conf)
    async def run(bookie: Bookie, server: BookieServer) -> None:
        pool = BookiePool(_Resolver(server.port), max_frame_size=5 << 20, connect_timeout=5,
                          security=ClientSecurity.from_conf(client_conf))
        try:
            await body(pool, server)
        finally:
            await pool.close()

    run(tmp_path)


async def _read_lac(pool: BookiePool) -> Any:
    """The bookie's answer to a v3 READ_LAC: the error it maps to (a ledger it does not have)."""
    conn = await pool.get("b", V3)
    fut = asyncio.get_running_loop().create_future()
    conn.send_v3(v3.read_lac_request(conn.next_txn_id(), 42), 5, lambda r, e, _arg: fut.set_result((r, e)))
    resp, error = await fut
    return error if error is not None else resp.status


async def _v2_read(pool: BookiePool) -> Any:
    """The bookie's answer to a v2 read: the error it maps to (a ledger it does not have)."""
    conn = await pool.get("b", V2)
    fut = asyncio.get_running_loop().create_future()
    conn.send_v2(read_key(42, 0), v2.encode_read_request(42, 0), 5, lambda r, e, _arg: fut.set_result((r, e)))
    resp, error = await fut
    return error if error is not None else resp.rc


def test_tls_and_sasl_handshake_v2_and_v3(tmp_path: Path, pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    """... and the client authenticates after the TLS upgrade: the SASL exchange travels inside TLS (docs/security.md)."""
    jaas = write_jaas(tmp_path / "jaas.conf")

    async def body(pool: BookiePool, server: BookieServer) -> None:
        assert isinstance(await _read_lac(pool), (NoSuchEntryError, NoSuchLedgerError))  # served: not EUA
        assert isinstance(await _v2_read(pool), (NoSuchEntryError, NoSuchLedgerError))
        assert all(c.tls for c in pool._conns.values())

    with caplog.at_level(logging.INFO, logger="bookie_server.security"):
        _serve(tmp_path, {**tls_bookie_conf(pki, client_auth=True), **sasl_bookie_conf(jaas)},
               {**tls_client_conf(pki, client_auth=True), **sasl_client_conf(jaas)}, body)
    steps = [("tls" if "TLS handshake" in r.getMessage() else "sasl") for r in caplog.records
             if "TLS handshake with" in r.getMessage() or "authenticated as" in r.getMessage()]
    assert steps == ["tls", "sasl", "tls", "sasl"], caplog.text  # per connection (v3, then v2): TLS, then SASL


def test_start_tls_refused_by_a_bookie_without_tls(tmp_path: Path, pki: Pki) -> None:
    async def body(pool: BookiePool, server: BookieServer) -> None:
        with pytest.raises(TlsHandshakeError, match="EBADREQ: it has no TLS configured"):
            await pool.get("b", V2)

    _serve(tmp_path, {}, tls_client_conf(pki), body)


def test_wrong_ca_refused(tmp_path: Path, pki: Pki) -> None:
    async def body(pool: BookiePool, server: BookieServer) -> None:
        with pytest.raises(TlsHandshakeError, match="not signed by a CA in tlsTrustStore"):
            await pool.get("b", V3)

    _serve(tmp_path, tls_bookie_conf(pki), tls_client_conf(pki, ca=pki.other_ca), body)


@pytest.mark.parametrize("version", [V2, V3])
def test_wrong_sasl_password_refused(tmp_path: Path, version: str) -> None:
    good = write_jaas(tmp_path / "good.conf")
    bad = write_jaas(tmp_path / "bad.conf", password="nope")

    async def body(pool: BookiePool, server: BookieServer) -> None:
        with pytest.raises(AuthenticationError, match="wrong user name or password"):
            await pool.get("b", version)

    _serve(tmp_path, sasl_bookie_conf(good), sasl_client_conf(bad), body)


def test_frames_behind_start_tls_are_served_after_the_upgrade(tmp_path: Path, pki: Pki) -> None:
    """A client that pipelines a request right behind START_TLS gets its answer inside TLS."""

    async def body(pool: BookiePool, server: BookieServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(v3.encode_request(v3.start_tls_request(1)) + v3.encode_request(v3.read_lac_request(2, 9)))
        await writer.drain()
        n = int.from_bytes(await reader.readexactly(4), "big")
        assert v3.decode_response(await reader.readexactly(n)).status == pb.EOK
        ctx = TlsSettings.from_conf(tls_client_conf(pki), server_side=False).build()  # type: ignore[union-attr]
        await writer.start_tls(ctx, server_hostname="127.0.0.1")
        n = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
        resp = v3.decode_response(await reader.readexactly(n))
        assert resp.header.txnId == 2 and resp.status in (pb.ENOLEDGER, pb.ENOENTRY)
        writer.close()

    _serve(tmp_path, tls_bookie_conf(pki), {}, body)


def test_bookie_refuses_every_request_before_authentication(tmp_path: Path) -> None:
    jaas = write_jaas(tmp_path / "jaas.conf")

    async def body(pool: BookiePool, server: BookieServer) -> None:
        # A client without SASL: its requests reach the bookie unauthenticated.
        assert isinstance(await _read_lac(pool), UnauthorizedAccessError)
        assert isinstance(await _v2_read(pool), UnauthorizedAccessError)
        c = await Conn.open(server.port)
        c.send(v2.encode_add_request(0, KEY, make_entry(42, 0, b"before auth")))  # a v2 add: EUA too
        assert v2.decode_response(await c.body()).rc == v2.EUA
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(v2.encode_batch_read_request(7, 0, 1, 10, 1024))  # any other v2 request: closed
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()

    _serve(tmp_path, sasl_bookie_conf(jaas), {}, body)


def test_http_admin_endpoint_defaults() -> None:
    """docs/security.md, "The bookie's HTTP admin endpoint": off by default (as BookKeeper), port 8000 (not
    BookKeeper's 8080: the endpoint serves /metrics too), bound to 0.0.0.0 (httpAdminWriteEnabled's default, true, is
    tests/unit/test_bookie_app.py::test_http_admin_and_readonly_switch)."""
    from bkspark.config.bookie import BookieConfig

    conf = BookieConfig.from_mapping({})
    assert (conf.httpServerEnabled, conf.httpServerPort, conf.httpServerHost) == (False, 8000, "0.0.0.0")


def test_http_admin_state_changing_routes_can_be_disabled(tmp_path: Path) -> None:
    from bookie_server.app import BookieApp
    from tests.unit.test_bookie_app import conf_for, http

    async def body() -> None:
        app = BookieApp(conf_for(tmp_path, httpAdminWriteEnabled="false"))
        await app.start()
        try:
            assert app.http is not None
            port = app.http.port
            status, payload = await http(port, "PUT", "/api/v1/bookie/state/readonly", b'{"readOnly": true}')
            assert status == 403 and b"httpAdminWriteEnabled=false" in payload
            assert (await http(port, "PUT", "/api/v1/bookie/gc"))[0] == 403
            assert not app.bookie.readonly
            assert (await http(port, "GET", "/api/v1/bookie/state/readonly"))[0] == 200
        finally:
            await app.stop()

    asyncio.run(body())


def test_http_admin_state_changing_routes_need_the_token(tmp_path: Path) -> None:
    from bookie_server.app import BookieApp
    from tests.unit.test_bookie_app import conf_for

    (tmp_path / "token").write_text("t0ken-Xy\n")

    async def put(port: int, auth: str | None) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = "PUT /api/v1/bookie/state/readonly HTTP/1.1\r\nHost: x\r\nContent-Length: 19\r\n"
        if auth is not None:
            head += f"Authorization: {auth}\r\n"
        writer.write(head.encode() + b"\r\n" + b'{"readOnly": false}')
        data = await reader.read()
        writer.close()
        return int(data.split()[1])

    async def body() -> None:
        app = BookieApp(conf_for(tmp_path, httpAdminTokenPath=str(tmp_path / "token")))
        await app.start()
        try:
            assert app.http is not None
            port = app.http.port
            assert await put(port, None) == 401
            assert await put(port, "Bearer wrong") == 401
            assert await put(port, "Bearer t0ken-Xy") == 200
            from tests.unit.test_bookie_app import http

            assert (await http(port, "GET", "/api/v1/bookie/state"))[0] == 200  # reads stay open
        finally:
            await app.stop()

    asyncio.run(body())


def test_tls_bookie_still_serves_plain_clients(tmp_path: Path, pki: Pki) -> None:
    async def body(pool: BookiePool, server: BookieServer) -> None:
        assert isinstance(await _read_lac(pool), (NoSuchEntryError, NoSuchLedgerError))
        assert not any(c.tls for c in pool._conns.values())

    _serve(tmp_path, tls_bookie_conf(pki), {}, body)


def test_tls_protocols_and_hostname_verification(pki: Pki) -> None:
    conf = {**tls_client_conf(pki), "tlsEnabledProtocols": "TLSv1.2", "tlsHostnameVerificationEnabled": "true"}
    ctx = TlsSettings.from_conf(conf, server_side=False).build()  # type: ignore[union-attr]
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2 and ctx.check_hostname


def test_client_role_system_reads_the_auditor_section(tmp_path: Path) -> None:
    from bkspark.security.auth import ClientSasl

    jaas = tmp_path / "jaas.conf"
    jaas.write_text(
        'BookKeeper { m.M required username="bookkeeper-app" password="a"; };\n'
        'Auditor { m.M required username="bookkeeper-auditor" password="b"; };\n'
        'Custom { m.M required username="bookkeeper-custom" password="c"; };\n'
    )
    base = sasl_client_conf(jaas)
    assert ClientSasl.from_conf(base).username == "bookkeeper-app"  # type: ignore[union-attr]
    assert ClientSasl.from_conf({**base, "clientRole": "system"}).username == "bookkeeper-auditor"  # type: ignore[union-attr]
    custom = {**base, "saslJaasClientSectionName": "Custom"}
    assert ClientSasl.from_conf(custom).username == "bookkeeper-custom"  # type: ignore[union-attr]


def test_an_authenticated_connection_gets_auth_disabled_plugin_for_further_auth(tmp_path: Path) -> None:
    """docs/security.md, SASL: after authentication, AUTH requests are answered with the AuthDisabledPlugin
    message, as Java does."""
    jaas = write_jaas(tmp_path / "jaas.conf")

    async def body(pool: BookiePool, server: BookieServer) -> None:
        c = await Conn.open(server.port)
        mech = DigestMd5Client(SASL_USER, Secret(SASL_PASSWORD))
        token: bytes | None = mech.initial()
        txn = 0
        while token is not None:
            txn += 1
            c.send(v3.encode_request(v3.auth_request(txn, PLUGIN_NAME, token)))
            answer = v3.decode_response(await c.body())
            assert answer.status == pb.EOK and answer.authResponse.authPluginName == PLUGIN_NAME
            token = mech.evaluate(bytes(answer.authResponse.payload))
        assert mech.complete
        c.send(v3.encode_request(v3.auth_request(txn + 1, PLUGIN_NAME, b"")))
        again = v3.decode_response(await c.body())
        assert (again.status, again.authResponse.authPluginName) == (pb.EOK, "AuthDisabledPlugin")
        c.send(v3.encode_request(v3.read_lac_request(txn + 2, 42)))  # and the connection stays authenticated
        assert v3.decode_response(await c.body()).status in (pb.ENOLEDGER, pb.ENOENTRY)

    _serve(tmp_path, sasl_bookie_conf(jaas), {}, body)


def test_allowed_ids_match_the_whole_user_name_and_the_authorization_id_must_be_the_users() -> None:
    """docs/security.md, SASL: saslJaasClientAllowedIds must match the whole name; an authorization id, if sent,
    must be the user's own name."""
    from bkspark.protocol.sasl import _response_value

    def exchange(allowed: str, authzid: bytes | None = None) -> None:
        """One exchange as a client sending ``authzid`` would (pure-sasl's client never sends one)."""
        server = DigestMd5Server({SASL_USER: Secret("pw")}, allowed)
        nonce = parse_directives(server.evaluate(b""))["nonce"]
        user, uri, cnonce = SASL_USER.encode(), b"bookkeeper/bookkeeper", b"c0ffee"
        value = _response_value(user, b"bookkeeper", b"pw", nonce, cnonce, b"00000001", b"auth", uri, authzid,
                                b"AUTHENTICATE")
        response = (b'username="%s",realm="bookkeeper",nonce="%s",cnonce="%s",nc=00000001,qop=auth,'
                    b'digest-uri="%s",response=%s' % (user, nonce, cnonce, uri, value))
        server.evaluate(response + (b',authzid="%s"' % authzid if authzid else b""))

    exchange(".*bookkeeper.*")
    exchange(SASL_USER, authzid=SASL_USER.encode())
    assert "bookkeeper" in SASL_USER and SASL_USER != "bookkeeper"
    with pytest.raises(AuthenticationError, match="not allowed by saslJaasClientAllowedIds"):
        exchange("bookkeeper")  # a prefix of the name, not the whole name
    with pytest.raises(AuthenticationError, match="authorization id differs"):
        exchange(".*", authzid=b"bookkeeper-admin")


@pytest.mark.parametrize("name", ["sslPass", "keyPasword", "dbPwd", "clientSecret", "authToken", "awsCredentials"])
def test_an_unknown_option_that_looks_like_a_secret_is_reported_masked(name: str) -> None:
    """docs/security.md, Secrets: an unknown connector option whose name holds pass, pasw, pwd, secret, token or
    credential is reported with its value masked."""
    base = {"metadataServiceUri": "zk://127.0.0.1:2181/l", "ledgers": "1"}
    with pytest.raises(InvalidOptionError) as info:
        parse_read_options({**base, name: "hunter2-value"})
    assert name.lower() in str(info.value).lower() and "hunter2-value" not in str(info.value)
    with pytest.raises(InvalidOptionError) as plain:
        parse_read_options({**base, "colour": "hunter2-value"})
    assert "hunter2-value" in str(plain.value)  # other unknown options are shown as they are


def test_tls_defaults_jks_stores_tls_1_2_and_a_10_second_start_tls_bound(tmp_path: Path, pki: Pki) -> None:
    """docs/security.md, TLS keys: store types default to JKS (as Java); tlsEnabledProtocols defaults to TLS 1.2
    and newer; startTLSTimeoutSecs (default 10) bounds the START_TLS answer: a bookie that never answers is a
    TlsHandshakeError."""
    untyped = {k: v for k, v in tls_client_conf(pki).items() if k != "tlsTrustStoreType"}
    settings = TlsSettings.from_conf(untyped, server_side=False)
    assert settings is not None and settings.trust_store_type == "JKS"
    ctx = TlsSettings.from_conf(tls_client_conf(pki), server_side=False).build()  # type: ignore[union-attr]
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.maximum_version in (ssl.TLSVersion.MAXIMUM_SUPPORTED, ssl.TLSVersion.TLSv1_3)
    assert ClientSecurity.from_conf(tls_client_conf(pki)).start_tls_timeout == 10

    async def main() -> None:
        silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
        port = silent.sockets[0].getsockname()[1]
        pool = BookiePool(_Resolver(port), max_frame_size=5 << 20, connect_timeout=5,
                          security=ClientSecurity.from_conf({**tls_client_conf(pki), "startTLSTimeoutSecs": "1"}))
        try:
            with pytest.raises(TlsHandshakeError, match="timed out"):  # startTLSTimeoutSecs, not wait_for's deadline
                await asyncio.wait_for(pool.get("b", V3), GENEROUS)  # unbounded, the test fails on this deadline
        finally:
            await pool.close()
            silent.close()
            await silent.wait_closed()

    asyncio.run(main())


def test_jaas_file_from_the_environment_and_zookeepers_section_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/security.md: the JAAS file comes from the key java.security.auth.login.config or $BKSPARK_JAAS_CONFIG;
    ZooKeeper's section is `Client` unless zookeeper.sasl.clientconfig names another."""
    from bkspark.security.auth import ClientSasl

    jaas = tmp_path / "jaas.conf"
    jaas.write_text(
        'BookKeeper { m.M required username="bookkeeper-env" password="a"; };\n'
        'Client { m.M required username="zk-default" password="b"; };\n'
        'ZkOther { m.M required username="zk-other" password="c"; };\n'
    )
    factory = {"clientAuthProviderFactoryClass": "org.apache.bookkeeper.sasl.SASLClientProviderFactory"}
    monkeypatch.setenv("BKSPARK_JAAS_CONFIG", str(jaas))
    assert ClientSasl.from_conf(factory).username == "bookkeeper-env"  # type: ignore[union-attr]
    assert ZkSecurity.from_conf({}).sasl_user == "zk-default"
    assert ZkSecurity.from_conf({"zookeeper.sasl.clientconfig": "ZkOther"}).sasl_user == "zk-other"
    other = write_jaas(tmp_path / "other.conf", user="bookkeeper-key")
    assert ClientSasl.from_conf({**factory, "java.security.auth.login.config": str(other)}).username == "bookkeeper-key"  # type: ignore[union-attr]


def test_ledger_metadata_repr_never_shows_the_password() -> None:
    """docs/security.md, Secrets: passwords never appear in the repr of LedgerMetadata."""
    from bkspark.protocol.ledger_metadata import DigestType, LedgerMetadata

    md = LedgerMetadata(ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, digest_type=DigestType.CRC32C,
                        password=b"hunter2-ledger", ensembles={0: ("10.0.0.1:3181",)})
    assert "hunter2" not in repr(md) and "hunter2" not in str(md) and "10.0.0.1:3181" in repr(md)


def test_a_bookie_logs_a_failed_handshake_with_a_hint_and_keeps_serving(
    tmp_path: Path, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/security.md, TLS failures: a client presenting no certificate under tlsClientAuthentication=true is
    logged by the bookie with its reason and a hint, and sees its connection lost (on its first request under
    TLS 1.3); after that and after a client that refused the bookie's certificate, the bookie keeps serving."""

    async def body(pool: BookiePool, server: BookieServer) -> None:
        wrong_ca = BookiePool(_Resolver(server.port), max_frame_size=5 << 20, connect_timeout=5,
                              security=ClientSecurity.from_conf(tls_client_conf(pki, ca=pki.other_ca)))
        try:
            with pytest.raises(TlsHandshakeError, match="not signed by a CA in tlsTrustStore"):
                await wrong_ca.get("b", V3)
        finally:
            await wrong_ca.close()
        outcome: Any
        try:
            outcome = await asyncio.wait_for(_read_lac(pool), 10)  # pool: TLS, but no client certificate
        except (SecurityError, ConnectionError) as exc:
            outcome = exc
        assert isinstance(outcome, BaseException) and not isinstance(outcome, (NoSuchEntryError, NoSuchLedgerError)), outcome
        deadline = time.monotonic() + 5
        while "presented no certificate" not in caplog.text and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        good = BookiePool(_Resolver(server.port), max_frame_size=5 << 20, connect_timeout=5,
                          security=ClientSecurity.from_conf(tls_client_conf(pki, client_auth=True)))
        try:
            assert isinstance(await _read_lac(good), (NoSuchEntryError, NoSuchLedgerError))  # still serving
        finally:
            await good.close()

    with caplog.at_level(logging.WARNING):
        _serve(tmp_path, tls_bookie_conf(pki, client_auth=True), tls_client_conf(pki), body)
    # A bkspark client that refuses the certificate closes without a TLS alert: the bookie's hint says what that
    # means (the hint for a Java client's UNKNOWN_CA alert is checked in tests/integration/test_security_java.py).
    assert "a bkspark client does so when this bookie's certificate is not signed by a CA in its trust store" in caplog.text
    assert "(tlsClientAuthentication=true: the client presented no certificate)" in caplog.text


@pytest.mark.parametrize("version", [V2, V3])
def test_a_sasl_client_of_a_bookie_without_authentication_goes_on_with_a_warning(
    tmp_path: Path, version: str, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/security.md, SASL: a bookie without authentication answers AUTH with AuthDisabledPlugin; the client
    goes on without SASL, as Java's does, and logs a WARNING (nothing falls back silently)."""
    jaas = write_jaas(tmp_path / "jaas.conf")

    async def body(pool: BookiePool, server: BookieServer) -> None:
        answer = await (_read_lac(pool) if version == V3 else _v2_read(pool))
        assert isinstance(answer, (NoSuchEntryError, NoSuchLedgerError))  # served

    with caplog.at_level(logging.WARNING, logger="bkspark.client.secure"):
        _serve(tmp_path, {}, sasl_client_conf(jaas), body)
    assert "does not authenticate clients (it answered AuthDisabledPlugin)" in caplog.text


def test_a_bookie_bounds_the_tls_handshake_with_start_tls_timeout(tmp_path: Path, pki: Pki) -> None:
    """docs/security.md, startTLSTimeoutSecs: on a bookie, the bound on the handshake: a client that asks for
    START_TLS and then never shakes hands is dropped."""

    async def body(pool: BookiePool, server: BookieServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(v3.encode_request(v3.start_tls_request(1)))
        await writer.drain()
        n = int.from_bytes(await reader.readexactly(4), "big")
        assert v3.decode_response(await reader.readexactly(n)).status == pb.EOK
        assert await asyncio.wait_for(reader.read(), GENEROUS) == b""  # no ClientHello: closed by the bookie
        writer.close()

    _serve(tmp_path, {**tls_bookie_conf(pki), "startTLSTimeoutSecs": "1"}, {}, body)
