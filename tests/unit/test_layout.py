"""LAYOUT znode and metadataServiceUri, checked against Java 4.17.3's LedgerLayout.parseLayout."""

from __future__ import annotations

import pytest

from bkspark.errors import BadMetadataError, InvalidOptionError
from bkspark.protocol.layout import (
    FACTORY_CLASSES,
    LedgerLayout,
    MetadataServiceUri,
    parse_metadata_service_uri,
    scheme_for_factory,
)


@pytest.mark.parametrize(
    "scheme, data",
    [
        ("hierarchical", b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"),
        ("longhierarchical", b"2\norg.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory:1"),
        ("legacyhierarchical", b"2\norg.apache.bookkeeper.meta.LegacyHierarchicalLedgerManagerFactory:1"),
        ("flat", b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1"),
    ],
)
def test_layout_bytes_per_scheme(scheme: str, data: bytes) -> None:
    layout = LedgerLayout.for_scheme(scheme)
    assert layout.serialize() == data  # no trailing newline
    assert LedgerLayout.parse(data) == layout and layout.scheme == scheme


# (bytes, what Java's parseLayout returned: (format, class, version) or None for IOException)
JAVA_LAYOUT_CASES = [
    (b"1\nflat:1", (1, "flat", 1)),
    (b"3\nX:1", None),
    (b"0\nX:1", None),
    (b"2", None),
    (b"2\nX:1:2", None),
    (b"2\nX:1:", (2, "X", 1)),
    (b"2\nX:+1", (2, "X", 1)),
    (b"+2\nX:1", (2, "X", 1)),
    (b"2\nX:1\n", (2, "X", 1)),
    (b"2\n\nX:1", None),
    (b" 2\nX:1", None),
    (b"2\nX::1", None),
    (b"", None),
    (b"2\nX:one", None),
]


@pytest.mark.parametrize("data, expected", JAVA_LAYOUT_CASES)
def test_parse_layout_like_java(data: bytes, expected: tuple[int, str, int] | None) -> None:
    if expected is None:
        with pytest.raises(BadMetadataError):
            LedgerLayout.parse(data)
    else:
        layout = LedgerLayout.parse(data)
        assert (layout.layout_format_version, layout.manager_factory_class, layout.manager_version) == expected


def test_scheme_from_factory_names() -> None:
    assert scheme_for_factory("org.apache.pulsar.shade.org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory") == (
        "longhierarchical"
    )
    assert scheme_for_factory("HierarchicalLedgerManagerFactory") == "hierarchical"
    assert scheme_for_factory(FACTORY_CLASSES["ms"]) == "ms"
    assert scheme_for_factory("hierarchical", 1) == "hierarchical"
    assert LedgerLayout.parse(b"1\nflat:1").scheme == "flat"
    with pytest.raises(BadMetadataError, match="unknown ledger manager factory"):
        scheme_for_factory("com.example.MyLedgerManagerFactory")
    with pytest.raises(BadMetadataError, match="format 1"):
        scheme_for_factory("longhierarchical", 1)
    with pytest.raises(InvalidOptionError):
        LedgerLayout.for_scheme("etcd")


@pytest.mark.parametrize(
    "uri, expected",
    [
        ("zk+hierarchical://127.0.0.1:2181/ledgers", MetadataServiceUri("hierarchical", "127.0.0.1:2181", "/ledgers")),
        ("zk+longhierarchical://a:1;b:2;c:3/bk/ledgers", MetadataServiceUri("longhierarchical", "a:1,b:2,c:3", "/bk/ledgers")),
        ("ZK+Hierarchical://zk1:2181/ledgers", MetadataServiceUri("hierarchical", "zk1:2181", "/ledgers")),
        ("zk+null://zk1:2181/ledgers", MetadataServiceUri(None, "zk1:2181", "/ledgers")),
        ("zk://zk1:2181/ledgers", MetadataServiceUri(None, "zk1:2181", "/ledgers")),
        ("zk+flat://zk1/ledgers", MetadataServiceUri("flat", "zk1", "/ledgers")),
        ("zk+hierarchical://zk1:2181", MetadataServiceUri("hierarchical", "zk1:2181", "")),
        ("zk+hierarchical://a:1,b:2/l", MetadataServiceUri("hierarchical", "a:1,b:2", "/l")),
        ("zk+hierarchical://[::1]:2181/l", MetadataServiceUri("hierarchical", "[::1]:2181", "/l")),
    ],
)
def test_metadata_service_uri(uri: str, expected: MetadataServiceUri) -> None:
    assert parse_metadata_service_uri(uri) == expected


@pytest.mark.parametrize(
    "uri, part",
    [
        ("etcd://h:1/l", "Unknown metadata service scheme"),
        ("zk+etcd://h:1/l", "Unknown ledger manager type found 'etcd'"),
        ("zk+hierarchical:///ledgers", "no ZooKeeper hosts"),
        ("zk+hierarchical://h:port/l", "bad ZooKeeper host 'h:port'"),
        ("zk+hierarchical://a:1;;b:2/l", "bad ZooKeeper host ''"),
        ("zk+hierarchical://h:1/", "bad ledgers root path '/'"),
        ("zk+hierarchical://h:1/l/", "bad ledgers root path"),
        ("zk+hierarchical://h:1/l?x=1", "query"),
        ("//h:1/ledgers", "no scheme"),
        ("h:1/ledgers", "Unknown metadata service scheme found : .h."),
    ],
)
def test_metadata_service_uri_errors_name_the_bad_part(uri: str, part: str) -> None:
    with pytest.raises(InvalidOptionError, match=part.replace("?", r"\?")):
        parse_metadata_service_uri(uri)
