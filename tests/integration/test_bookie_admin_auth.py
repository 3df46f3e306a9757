"""Secure defaults of the bookie's admin HTTP server, on real bookie processes (docs/security.md, "The bookie's
HTTP admin endpoint"): a bookie with authentication configured (SASL, TLS client certificates or ZooKeeper auth)
takes no state-changing admin request without its token, and refuses them all (401) when no token is set; a bookie
without authentication keeps its open routes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.security import sasl_bookie_conf, write_jaas

pytestmark = pytest.mark.integration

READONLY = "/api/v1/bookie/state/readonly"


def _call(port: int, method: str, path: str, body: object = None, token: str | None = None) -> tuple[int, str]:
    """Status and text of one admin request (an error status is an answer here, not an exception)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_sasl_bookie_without_a_token_set_refuses_every_state_change(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    jaas = write_jaas(tmp_path / "jaas.conf")
    with PythonBookieCluster(
        zk_root.metadata_service_uri, tmp_path / "bookies", bookies=1, journal_sync_data=False,
        conf_overrides=sasl_bookie_conf(jaas),
    ) as cluster:
        port = cluster.bookies[0].http_port
        status, text = _call(port, "PUT", READONLY, {"readOnly": True})
        assert status == 401 and "httpAdminTokenPath" in text
        assert _call(port, "PUT", READONLY, {"readOnly": True}, token="guess")[0] == 401
        assert _call(port, "PUT", "/api/v1/bookie/gc")[0] == 401
        # Nothing changed, and the read-only routes stay open.
        assert cluster.http_get(0, "/api/v1/bookie/state")["readOnly"] is False
        assert _call(port, "GET", READONLY) == (200, '{"readOnly": false}')
        assert cluster.registered() == cluster.bookie_ids and cluster.registered(readonly=True) == []


def test_a_bookie_with_zookeeper_auth_takes_state_changes_with_its_token_only(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "digest").write_text("bookie:zk-s3cret\n")
    (tmp_path / "token").write_text("adm1n-t0ken\n")
    conf = {"zkDigestAuthPath": str(tmp_path / "digest"), "httpAdminTokenPath": str(tmp_path / "token")}
    with PythonBookieCluster(
        zk_root.metadata_service_uri, tmp_path / "bookies", bookies=1, journal_sync_data=False, conf_overrides=conf
    ) as cluster:
        port = cluster.bookies[0].http_port
        assert _call(port, "PUT", READONLY, {"readOnly": True})[0] == 401
        assert _call(port, "PUT", READONLY, {"readOnly": True}, token="adm1n-t0ken-not")[0] == 401
        assert cluster.http_get(0, "/api/v1/bookie/state")["readOnly"] is False
        assert _call(port, "PUT", READONLY, {"readOnly": True}, token="adm1n-t0ken") == (200, '{"readOnly": true}')
        assert cluster.http_get(0, "/api/v1/bookie/state")["readOnly"] is True
        assert _call(port, "PUT", READONLY, {"readOnly": False}, token="adm1n-t0ken") == (200, '{"readOnly": false}')


def test_a_bookie_without_authentication_keeps_its_open_admin_routes(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with PythonBookieCluster(
        zk_root.metadata_service_uri, tmp_path / "bookies", bookies=1, journal_sync_data=False
    ) as cluster:
        port = cluster.bookies[0].http_port
        assert _call(port, "PUT", READONLY, {"readOnly": True}) == (200, '{"readOnly": true}')
        assert _call(port, "PUT", READONLY, {"readOnly": False}) == (200, '{"readOnly": false}')
