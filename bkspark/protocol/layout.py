"""The ``<root>/LAYOUT`` znode and the ``metadataServiceUri``, as Java reads and writes them.

LAYOUT (``meta/LedgerLayout``) is ``"<layoutFormatVersion>\\n<factoryClass>:<managerVersion>"``
in UTF-8, no trailing newline; format 2 names the ledger manager factory by
class, format 1 (old) by a short type name (``flat`` / ``hierarchical``).
The factory decides the path scheme of ledger znodes (see ``zk_paths``).

The URI (``meta/zk/ZKMetadataDriverBase``) is ``zk[+<type>]://<hosts>/<root>``:
the scheme is lower-cased and split on ``+``, ``;`` between hosts becomes
``,``, and the path is the ledgers root.  ``<type>`` ``null`` or absent means
"use the factory LAYOUT names".
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from bkspark.errors import BadMetadataError, InvalidOptionError
from bkspark.protocol.bookie_id import java_parse_int, java_split

__all__ = [
    "LAYOUT_FORMAT_VERSION",
    "LAYOUT_MIN_COMPAT_VERSION",
    "FACTORY_CLASSES",
    "LedgerLayout",
    "MetadataServiceUri",
    "parse_metadata_service_uri",
    "scheme_for_factory",
]

#: ``LedgerLayout.LAYOUT_FORMAT_VERSION``.
LAYOUT_FORMAT_VERSION = 2
#: ``LedgerLayout.LAYOUT_MIN_COMPAT_VERSION``.
LAYOUT_MIN_COMPAT_VERSION = 1
#: Every factory's ``CUR_VERSION``.
MANAGER_VERSION = 1

_META = "org.apache.bookkeeper.meta."
#: Our scheme name -> the factory class Java writes into LAYOUT.
FACTORY_CLASSES = {
    "hierarchical": _META + "HierarchicalLedgerManagerFactory",
    "longhierarchical": _META + "LongHierarchicalLedgerManagerFactory",
    "legacyhierarchical": _META + "LegacyHierarchicalLedgerManagerFactory",
    "flat": _META + "FlatLedgerManagerFactory",
    "ms": _META + "MSLedgerManagerFactory",
}
# Simple class names, longest first so "LongHierarchical..." wins over "Hierarchical...".
_BY_SIMPLE_NAME = sorted(
    ((cls.rsplit(".", 1)[1], scheme) for scheme, cls in FACTORY_CLASSES.items()),
    key=lambda item: -len(item[0]),
)
# Layout format 1 stores these type names (FlatLedgerManagerFactory.NAME, HierarchicalLedgerManagerFactory.NAME).
_V1_TYPES = {"flat": "flat", "hierarchical": "hierarchical"}
# metadataServiceUri ledger manager types (ZKMetadataDriverBase.resolveLedgerManagerFactory).
_URI_TYPES = {"flat", "hierarchical", "longhierarchical", "ms"}


def scheme_for_factory(factory_class: str, layout_format_version: int = LAYOUT_FORMAT_VERSION) -> str:
    """Our path scheme for a LAYOUT factory name; shaded prefixes (``x.y.org.apache...``) are fine.

    Raises :class:`BadMetadataError` for a factory bkspark does not know.
    """
    if layout_format_version <= 1:
        scheme = _V1_TYPES.get(factory_class)
        if scheme is None:
            raise BadMetadataError(f"Unknown ledger manager type in a format 1 LAYOUT: {factory_class!r}")
        return scheme
    simple = factory_class.rsplit(".", 1)[-1]
    for name, scheme in _BY_SIMPLE_NAME:
        if simple == name:
            return scheme
    raise BadMetadataError(f"unknown ledger manager factory in LAYOUT: {factory_class!r}")


@dataclass(frozen=True, slots=True)
class LedgerLayout:
    """The content of ``<root>/LAYOUT``."""

    manager_factory_class: str
    manager_version: int = MANAGER_VERSION
    layout_format_version: int = LAYOUT_FORMAT_VERSION

    @classmethod
    def for_scheme(cls, scheme: str) -> "LedgerLayout":
        """The layout a Java client configured with ``scheme`` writes (format 2)."""
        factory = FACTORY_CLASSES.get(scheme)
        if factory is None:
            raise InvalidOptionError(f"no ledger manager factory for scheme {scheme!r}")
        return cls(factory)

    @property
    def scheme(self) -> str:
        """``hierarchical`` / ``longhierarchical`` / ``legacyhierarchical`` / ``flat`` / ``ms``."""
        return scheme_for_factory(self.manager_factory_class, self.layout_format_version)

    def serialize(self) -> bytes:
        """``LedgerLayout.serialize``: ``"<format>\\n<class>:<version>"`` in UTF-8."""
        return f"{self.layout_format_version}\n{self.manager_factory_class}:{self.manager_version}".encode("utf-8")

    @classmethod
    def parse(cls, data: bytes | bytearray | memoryview) -> "LedgerLayout":
        """``LedgerLayout.parseLayout``; raises :class:`BadMetadataError` where Java throws."""
        text = bytes(data).decode("utf-8", errors="replace")
        lines = java_split(text, "\n")
        version = java_parse_int(lines[0]) if lines else None
        if version is None:
            raise BadMetadataError(f"Could not parse layout {text!r}: bad format version line")
        if not LAYOUT_MIN_COMPAT_VERSION <= version <= LAYOUT_FORMAT_VERSION:
            raise BadMetadataError(
                f"Metadata version not compatible. Expected {LAYOUT_FORMAT_VERSION}, but got {version}"
            )
        if len(lines) < 2:
            raise BadMetadataError(f"Ledger manager and its version absent from layout: {text!r}")
        parts = java_split(lines[1], ":")
        if len(parts) != 2:
            raise BadMetadataError(f"Invalid Ledger Manager defined in layout : {text!r}")
        manager_version = java_parse_int(parts[1])
        if manager_version is None:
            raise BadMetadataError(f"Could not parse layout {text!r}: bad manager version {parts[1]!r}")
        return cls(parts[0], manager_version, version)


@dataclass(frozen=True, slots=True)
class MetadataServiceUri:
    """A parsed ``metadataServiceUri``.

    ``scheme`` is ``None`` for ``zk://`` and ``zk+null://``: Java then uses the
    factory recorded in LAYOUT (and HierarchicalLedgerManagerFactory when it
    has to create LAYOUT).  ``connect_string`` is kazoo/ZooKeeper's
    ``host:port,host:port``; ``root`` the ledgers root path.
    """

    scheme: str | None
    connect_string: str
    root: str


_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\[\]/@]+)(?::(?P<port>[0-9]+))?")


def parse_metadata_service_uri(uri: str) -> MetadataServiceUri:
    """Parse ``zk[+type]://h1:p1;h2:p2/root`` as Java's ZK metadata driver does.

    Raises :class:`InvalidOptionError` naming the bad part (scheme, manager
    type, hosts or root).
    """
    if not isinstance(uri, str):
        raise InvalidOptionError("metadataServiceUri must be a string", uri=uri)
    try:
        parts = urllib.parse.urlsplit(uri)
    except ValueError as exc:
        raise InvalidOptionError(f"metadataServiceUri {uri!r} is not a URI: {exc}") from None
    if not parts.scheme:
        raise InvalidOptionError(f"metadataServiceUri {uri!r} has no scheme (expected zk+hierarchical://...)")
    scheme_parts = [p for p in parts.scheme.lower().split("+") if p]
    if not scheme_parts or scheme_parts[0] != "zk":
        raise InvalidOptionError(
            f"Unknown metadata service scheme found : {scheme_parts[0] if scheme_parts else parts.scheme!r} "
            f"in {uri!r} (only 'zk' is supported)"
        )
    scheme: str | None = None
    if len(scheme_parts) > 1:
        lm_type = scheme_parts[1]
        if lm_type != "null":
            if lm_type not in _URI_TYPES:
                raise InvalidOptionError(
                    f"Unknown ledger manager type found {lm_type!r} at uri : {uri!r} "
                    "(expected flat, hierarchical, longhierarchical, ms or null)"
                )
            scheme = lm_type
    authority = parts.netloc
    if not authority:
        raise InvalidOptionError(f"Invalid metadata service URI format: {uri!r} has no ZooKeeper hosts")
    hosts = authority.replace(";", ",").split(",")
    for host in hosts:
        if not _HOST_PORT.fullmatch(host):
            raise InvalidOptionError(f"metadataServiceUri {uri!r}: bad ZooKeeper host {host!r} (expected host:port)")
    root = urllib.parse.unquote(parts.path)
    if root == "/" or root.endswith("/") or (root and "//" in root):
        raise InvalidOptionError(f"metadataServiceUri {uri!r}: bad ledgers root path {root!r}")
    if parts.query or parts.fragment:
        raise InvalidOptionError(f"metadataServiceUri {uri!r}: unexpected query or fragment")
    return MetadataServiceUri(scheme, ",".join(hosts), root)
