"""BookieServiceInfo: what a bookie publishes in ``<root>/available[/readonly]/<bookieId>``.

Since 4.11 a Java bookie writes ``BookieServiceInfoFormat`` as plain protobuf
binary (not delimited; ``ZKRegistrationManager.serializeBookieServiceInfo``).
Empty data (bookies up to 4.10) means the legacy form: one ``bookie-rpc``
endpoint whose host and port come from the id itself, read as ``host:port``
(``BookieServiceInfoUtils.buildLegacyBookieServiceInfo``).  Clients connect to
the first endpoint whose protocol is ``bookie-rpc``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bkspark.protocol.values import encode_varint
from bkspark.errors import BadMetadataError, BookieUnavailableError, InvalidBookieIdError
from bkspark.protocol.bookie_id import BookieId
from bkspark.protocol.proto import DataFormats_pb2 as pb

__all__ = [
    "Endpoint",
    "BookieServiceInfo",
    "BOOKIE_RPC",
    "HTTP",
    "serialize",
    "parse",
    "legacy_service_info",
    "endpoint_for",
    "EXTENSIONS_PROPERTY",
    "SCOPE_IDS_EXTENSION",
    "BATCH_READ_V3_EXTENSION",
]

#: Protocol of the endpoint a stock bookie publishes for its BookKeeper RPC port (id ``bookie``).
BOOKIE_RPC = "bookie-rpc"
#: Protocol of the HTTP admin endpoint (id ``httpserver``).
HTTP = "http"

#: The property through which a bookie advertises our v3 extensions, comma-separated (docs/extensions.md).
EXTENSIONS_PROPERTY = "bkspark.extensions"
#: The extension of a bookie that stores scope ids != 0 (BP-35).
SCOPE_IDS_EXTENSION = "scope-ids"
#: The extension of a bookie that serves v3 BATCH_READ_ENTRY.
BATCH_READ_V3_EXTENSION = "batch-read-v3"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One service of a bookie (``BookieServiceInfo.Endpoint``)."""

    id: str
    host: str
    port: int
    protocol: str = BOOKIE_RPC
    auth: tuple[str, ...] = ()
    extensions: tuple[str, ...] = ()  # e.g. ("tls",) when the bookie has a TLS provider


@dataclass(frozen=True)
class BookieServiceInfo:
    """A bookie's endpoints and free-form properties."""

    endpoints: tuple[Endpoint, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict, hash=False)

    @classmethod
    def for_bookie(
        cls, host: str, port: int, tls: bool = False, properties: Mapping[str, str] | None = None
    ) -> "BookieServiceInfo":
        """What a stock Java bookie publishes: endpoint ``bookie`` / ``bookie-rpc`` (``BookieService.publishInfo``)."""
        endpoint = Endpoint("bookie", host, port, BOOKIE_RPC, (), ("tls",) if tls else ())
        return cls((endpoint,), dict(properties or {}))


def serialize(info: BookieServiceInfo) -> bytes:
    """The registration znode data a Java bookie writes (properties sorted by key, for determinism).

    An info with no endpoints and no properties gives ``b""``, which readers
    take for a legacy bookie whose id is its ``host:port``.
    """
    fmt = pb.BookieServiceInfoFormat()
    for e in info.endpoints:
        fmt.endpoints.add(
            id=e.id, port=e.port, host=e.host, protocol=e.protocol, auth=list(e.auth), extensions=list(e.extensions)
        )
    # Map entries are appended by hand: Python's protobuf orders map entries by
    # hash (or, "deterministic", by length first), Java by its map's iteration
    # order.  We write keys sorted, each entry with key and value always present,
    # as protobuf-java's MapEntryLite does (a TreeMap in Java gives these bytes).
    out = bytearray(fmt.SerializeToString())
    for key in sorted(info.properties):
        entry = _length_delimited(1, key.encode("utf-8")) + _length_delimited(2, info.properties[key].encode("utf-8"))
        out += _length_delimited(_PROPERTIES_FIELD, entry)
    return bytes(out)


_PROPERTIES_FIELD = 7




def _length_delimited(field_number: int, payload: bytes) -> bytes:
    return encode_varint(field_number << 3 | 2) + encode_varint(len(payload)) + payload


def legacy_service_info(bookie_id: str) -> BookieServiceInfo:
    """The service info Java assumes for a bookie that registered with empty data.

    Raises :class:`BadMetadataError` when the id is not ``host:port`` (Java's
    ``UnknownHostException``): such a bookie cannot be reached.
    """
    try:
        host, port = BookieId.parse(bookie_id).host_port()
    except InvalidBookieIdError as exc:
        raise BadMetadataError(f"empty BookieServiceInfo and the id cannot serve as an address: {exc}") from None
    return BookieServiceInfo((Endpoint(bookie_id, host, port, BOOKIE_RPC),), {})


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def parse(data: bytes | bytearray | memoryview | None, bookie_id: str) -> BookieServiceInfo:
    """Read a registration znode's data (``ZKRegistrationClient.deserializeBookieServiceInfo``).

    Raises :class:`BadMetadataError` for bytes that are not a complete
    ``BookieServiceInfoFormat``.
    """
    if not data:
        return legacy_service_info(bookie_id)
    fmt = pb.BookieServiceInfoFormat()
    try:
        fmt.ParseFromString(bytes(data))
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError and, rarely, others
        raise BadMetadataError(f"BookieServiceInfo of {bookie_id!r} is not a BookieServiceInfoFormat: {exc}") from None
    missing = fmt.FindInitializationErrors()
    if missing:
        raise BadMetadataError(f"BookieServiceInfo of {bookie_id!r} misses required fields: {', '.join(missing)}")
    endpoints = tuple(
        Endpoint(
            _text(e.id),
            _text(e.host),
            e.port,
            _text(e.protocol),
            tuple(_text(a) for a in e.auth),
            tuple(_text(x) for x in e.extensions),
        )
        for e in fmt.endpoints
    )
    properties = {_text(k): _text(v) for k, v in fmt.properties.items()}
    return BookieServiceInfo(endpoints, properties)


def endpoint_for(info: BookieServiceInfo, protocol: str = BOOKIE_RPC) -> tuple[str, int]:
    """``(host, port)`` of the first endpoint speaking ``protocol`` (what Java's resolver picks).

    Raises :class:`BookieUnavailableError` when the bookie publishes none.
    """
    for e in info.endpoints:
        if e.protocol == protocol:
            return e.host, e.port
    raise BookieUnavailableError(
        f"bookie publishes no {protocol!r} endpoint", endpoints=[e.protocol for e in info.endpoints]
    )
