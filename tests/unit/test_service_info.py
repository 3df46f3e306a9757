"""BookieServiceInfo: bytes equal to Java 4.17.3's ZKRegistrationManager.serializeBookieServiceInfo."""

from __future__ import annotations

import pytest

from bkspark.errors import BadMetadataError, BookieUnavailableError
from bkspark.protocol.service_info import (
    BOOKIE_RPC,
    BookieServiceInfo,
    Endpoint,
    endpoint_for,
    legacy_service_info,
    parse,
    serialize,
)

# serializeBookieServiceInfo(new BookieServiceInfo({a=b, autorecovery.enabled=true},
#   [Endpoint(bookie, 3181, 10.0.0.1, bookie-rpc, [], [tls]), Endpoint(httpserver, 8080, 10.0.0.1, http, [basic], [])]))
JAVA_BSI = bytes.fromhex(
    "32260a06626f6f6b696510ed181a0831302e302e302e31220a626f6f6b69652d7270633203746c7332260a0a68747470"
    "73657276657210903f1a0831302e302e302e312204687474702a0562617369633a060a01611201623a1c0a146175746f"
    "7265636f766572792e656e61626c6564120474727565"
)
INFO = BookieServiceInfo(
    (
        Endpoint("bookie", "10.0.0.1", 3181, BOOKIE_RPC, (), ("tls",)),
        Endpoint("httpserver", "10.0.0.1", 8080, "http", ("basic",), ()),
    ),
    {"autorecovery.enabled": "true", "a": "b"},
)


def test_serialize_equals_java() -> None:
    assert serialize(INFO) == JAVA_BSI


def test_parse_java_bytes() -> None:
    info = parse(JAVA_BSI, "10.0.0.1:3181")
    assert info == INFO
    assert endpoint_for(info) == ("10.0.0.1", 3181)
    assert endpoint_for(info, "http") == ("10.0.0.1", 8080)


def test_stock_bookie_info() -> None:
    info = BookieServiceInfo.for_bookie("10.0.0.9", 3181, tls=True)
    assert info.endpoints == (Endpoint("bookie", "10.0.0.9", 3181, BOOKIE_RPC, (), ("tls",)),)
    assert parse(serialize(info), "custom-id") == info


@pytest.mark.parametrize("data", [b"", None])
def test_empty_data_is_legacy(data: bytes | None) -> None:
    info = parse(data, "bk1.example.com:3181")
    assert info == legacy_service_info("bk1.example.com:3181")
    assert info.endpoints[0].id == "bk1.example.com:3181"
    assert endpoint_for(info) == ("bk1.example.com", 3181)


def test_empty_data_with_custom_id_cannot_resolve() -> None:
    with pytest.raises(BadMetadataError, match="host:port"):
        parse(b"", "bookie-1")


def test_no_rpc_endpoint() -> None:
    info = BookieServiceInfo((Endpoint("httpserver", "h", 80, "http"),))
    with pytest.raises(BookieUnavailableError, match="bookie-rpc"):
        endpoint_for(info)


@pytest.mark.parametrize("data", [b"\x32\x02\x0a\x00", b"\xff\xff", JAVA_BSI[:-3]])
def test_bad_bytes(data: bytes) -> None:
    with pytest.raises(BadMetadataError):
        parse(data, "h:1")


def test_properties_are_written_sorted_with_empty_values_kept() -> None:
    info = BookieServiceInfo((Endpoint("bookie", "h", 1),), {"b": "", "a": "x"})
    data = serialize(info)
    assert data.endswith(bytes.fromhex("3a060a0161120178" "3a050a01621200"))
    assert parse(data, "h:1") == info
