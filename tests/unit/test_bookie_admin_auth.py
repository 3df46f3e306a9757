"""Which bookies count as authenticated for the admin HTTP server, and what its state-changing routes answer then
(docs/security.md, "The bookie's HTTP admin endpoint"); real processes: tests/integration/test_bookie_admin_auth.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bkspark.security.auth import BookieSecurity
from bookie_server.http_admin import AdminHttpServer, json_body
from bookie_server.security import authentication_configured
from tests.harness.security import make_pki, sasl_bookie_conf, tls_bookie_conf, write_jaas
from tests.unit.test_bookie_app import http


def _configured(conf: dict[str, object]) -> bool:
    return authentication_configured(BookieSecurity.from_conf(conf), conf)


def test_sasl_client_certificates_and_zookeeper_auth_count_and_plain_tls_does_not(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    (tmp_path / "digest").write_text("bookie:pw\n")
    assert not _configured({})
    assert not _configured(tls_bookie_conf(pki))  # TLS that any client may use identifies nobody
    assert _configured(tls_bookie_conf(pki, client_auth=True))
    assert _configured(sasl_bookie_conf(write_jaas(tmp_path / "jaas.conf")))
    assert _configured({"zkDigestAuthPath": str(tmp_path / "digest")})
    assert _configured({"zkEnableSecurity": "true"})
    zk_sasl = write_jaas(tmp_path / "zk-jaas.conf", zk=True)
    assert _configured({"java.security.auth.login.config": str(zk_sasl)})  # its Client section: ZooKeeper SASL


@pytest.mark.parametrize("token", [None, b"t0k"], ids=["no token set", "a token set"])
def test_with_authentication_every_method_but_get_needs_the_token(token: bytes | None) -> None:
    """A route registered without ``state_changing`` but answering PUT/POST/DELETE is guarded all the same."""
    calls: list[bytes] = []

    async def handler(body: bytes) -> tuple[int, str, bytes]:
        calls.append(body)
        return json_body({"ok": True})

    async def body() -> None:
        server = AdminHttpServer("127.0.0.1", 0, token, token_required=True)
        server.route("GET", "/r", handler)
        server.route("POST", "/w", handler)
        server.route("DELETE", "/w2", handler, state_changing=True)
        await server.start()
        try:
            assert (await http(server.port, "GET", "/r"))[0] == 200
            for method, path in (("POST", "/w"), ("DELETE", "/w2")):
                status, text = await http(server.port, method, path, b"x")
                assert status == 401, (method, text)
            assert calls == [b""]  # only the GET reached its handler
        finally:
            await server.stop()

    asyncio.run(body())


def test_without_authentication_and_without_a_token_the_routes_stay_open() -> None:
    async def handler(_body: bytes) -> tuple[int, str, bytes]:
        return json_body({"ok": True})

    async def body() -> None:
        server = AdminHttpServer("127.0.0.1", 0)
        server.route("PUT", "/w", handler, state_changing=True)
        await server.start()
        try:
            assert (await http(server.port, "PUT", "/w"))[0] == 200
        finally:
            await server.stop()

    asyncio.run(body())
