"""TLS (START_TLS) and SASL DIGEST-MD5 between bkspark's client and bkspark's Python bookies.

One cluster of three Python bookies with TLS (mutual TLS optional per connection: off here) and SASL
required; the client over v2 and v3, a wrong CA, a wrong password, a client without credentials, and
the bookie's BookieServiceInfo advertising its TLS endpoint.
"""

from __future__ import annotations

import socket
import struct

import pytest

from bkspark.client import BookKeeper
from bkspark.errors import AuthenticationError, BKError, TlsHandshakeError
from bkspark.protocol import service_info as si
from bkspark.protocol import v2, v3
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.security import (
    make_pki,
    sasl_bookie_conf,
    sasl_client_conf,
    tls_bookie_conf,
    tls_client_conf,
    write_jaas,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pki(tmp_path_factory):  # type: ignore[no-untyped-def]
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secured(module_zk_root, tmp_path_factory, pki):  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("secured")
    jaas = write_jaas(base / "jaas.conf")
    conf = {**tls_bookie_conf(pki), **sasl_bookie_conf(jaas)}
    with PythonBookieCluster(
        module_zk_root.metadata_service_uri, base, bookies=3, journal_sync_data=False, conf_overrides=conf
    ) as cluster:
        cluster.start_all()
        yield cluster, jaas


def _roundtrip(uri: str, conf: dict[str, object], v2_protocol: bool) -> None:
    data = [b"secure-%d" % i * 20 for i in range(50)]
    with BookKeeper(uri, conf, useV2WireProtocol=v2_protocol, connectTimeoutMillis=5000) as bk:
        lh = bk.create_ledger(3, 3, 2, password=b"ledger-pw")
        for d in data:
            lh.append_async(d)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"ledger-pw")
        assert [e.payload for e in rh.read(0, 49)] == data
        assert rh.read_last_add_confirmed() == 49  # READ_LAC over the v3 connection
        for conn in bk.pool._conns.values():
            assert conn.tls, conn.bookie_id


@pytest.mark.parametrize("v2_protocol", [True, False], ids=["v2", "v3"])
def test_tls_and_sasl_roundtrip(secured, module_zk_root, pki, v2_protocol) -> None:  # type: ignore[no-untyped-def]
    cluster, jaas = secured
    conf = {**tls_client_conf(pki), **sasl_client_conf(jaas)}
    _roundtrip(module_zk_root.metadata_service_uri, conf, v2_protocol)


def test_bookie_advertises_tls_endpoint(secured) -> None:  # type: ignore[no-untyped-def]
    cluster, _ = secured
    data, _ = cluster.zk.get(f"{cluster.root}/available/{cluster.bookie_ids[0]}")
    info = si.parse(data, cluster.bookie_ids[0])
    rpc = [e for e in info.endpoints if e.protocol == si.BOOKIE_RPC]
    assert rpc and rpc[0].extensions == ("tls",)


def test_wrong_ca_is_refused_clearly(secured, module_zk_root, pki) -> None:  # type: ignore[no-untyped-def]
    cluster, jaas = secured
    conf = {**tls_client_conf(pki, ca=pki.other_ca), **sasl_client_conf(jaas)}
    with BookKeeper(module_zk_root.metadata_service_uri, conf, connectTimeoutMillis=5000) as bk:
        with pytest.raises(TlsHandshakeError, match="not signed by a CA in tlsTrustStore"):
            bk.ctx.loop  # noqa: B018 - the client itself starts fine
            bk._run(bk.pool.get(cluster.bookie_ids[0], "v2"), timeout=30)


def test_wrong_password_is_refused(secured, module_zk_root, pki, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cluster, _ = secured
    bad = write_jaas(tmp_path / "bad.conf", password="not-the-password")
    for version in ("v2", "v3"):
        conf = {**tls_client_conf(pki), **sasl_client_conf(bad)}
        with BookKeeper(module_zk_root.metadata_service_uri, conf, connectTimeoutMillis=5000) as bk:
            with pytest.raises(AuthenticationError, match="wrong user name or password"):
                bk._run(bk.pool.get(cluster.bookie_ids[0], version), timeout=30)


def _frame_exchange(sock: socket.socket, frame: bytes) -> bytes | None:
    sock.sendall(frame)
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return None
    (n,) = struct.unpack(">i", head)
    return sock.recv(n, socket.MSG_WAITALL)


def test_bookie_refuses_requests_before_authentication(secured) -> None:  # type: ignore[no-untyped-def]
    cluster, _ = secured
    host, port = cluster.addresses[0]
    # v3: any request but AUTH / START_TLS gets EUA.
    with socket.create_connection((host, port), timeout=10) as sock:
        body = _frame_exchange(sock, v3.encode_request(v3.read_lac_request(1, 7)))
        assert body is not None
        assert v3.decode_response(body).status == pb.EUA
    # v2: an add gets EUA; a batch read closes the connection.
    with socket.create_connection((host, port), timeout=10) as sock:
        body = _frame_exchange(sock, v2.encode_read_request(7, 0))
        assert body is not None
        resp = v2.decode_response(body)
        assert isinstance(resp, v2.ReadResponse) and resp.rc == v2.EUA
        assert _frame_exchange(sock, v2.encode_batch_read_request(7, 0, 1, 10, 1024)) is None


def test_client_without_credentials_fails_clearly(secured, module_zk_root, pki) -> None:  # type: ignore[no-untyped-def]
    cluster, _ = secured
    with BookKeeper(module_zk_root.metadata_service_uri, tls_client_conf(pki), addEntryTimeoutSec=3) as bk:
        lh = bk.create_ledger(3, 3, 2, password=b"pw")
        with pytest.raises(BKError) as info:
            lh.append(b"x")
        assert "EUA" in str(info.value) or "Unauthorized" in type(info.value).__name__ or "authenticat" in str(info.value)
