"""Pulsar topic names, znode paths, metadata URIs and read options (no broker: a fake ZooKeeper of dicts)."""

from __future__ import annotations

import json

import pytest
from kazoo.exceptions import NoNodeError

from bkspark.datasource.pulsar_options import is_pulsar_read, parse_pulsar_read_options
from bkspark.errors import InvalidOptionError
from bkspark.pulsar.errors import PulsarMetadataError, PulsarTopicNotFoundError
from bkspark.pulsar.proto.MLDataFormats_pb2 import ManagedLedgerInfo
from bkspark.pulsar.topics import (
    TopicName, TopicResolver, bookkeeper_uri_of, encode_local_name, managed_ledger_path, parse_topic_name,
    partitioned_topic_path, pulsar_root_of,
)


@pytest.mark.parametrize("text, want", [
    ("persistent://t/ns/x", TopicName("t", "ns", "x")),
    ("t/ns/x", TopicName("t", "ns", "x")),
    ("x", TopicName("public", "default", "x")),
    ("persistent://t/ns/a/b", TopicName("t", "ns", "a/b")),
])
def test_topic_names(text: str, want: TopicName) -> None:
    assert parse_topic_name(text) == want


@pytest.mark.parametrize("text", ["non-persistent://t/ns/x", "persistent://t/x", "persistent:///ns/x", "a/b"])
def test_bad_topic_names(text: str) -> None:
    with pytest.raises(InvalidOptionError):
        parse_topic_name(text)


def test_encoding_is_javas_url_encoder() -> None:
    # java.net.URLEncoder.encode(s, UTF_8): space as '+', '*' '-' '_' '.' kept, '~' and the rest %-escaped
    assert encode_local_name("a b*c-d_e.f~g/h:é") == "a+b*c-d_e.f%7Eg%2Fh%3A%C3%A9"
    topic = parse_topic_name("persistent://t/ns/a b")
    assert managed_ledger_path("/", topic) == "/managed-ledgers/t/ns/persistent/a+b"
    assert partitioned_topic_path("/", topic) == "/admin/partitioned-topics/t/ns/persistent/a+b"
    assert topic.partition(3).local == "a b-partition-3" and topic.partition(3).partition_index == 3


@pytest.mark.parametrize("uri, want", [
    ("zk+hierarchical://127.0.0.1:2181/ledgers", "zk+hierarchical://127.0.0.1:2181/ledgers"),
    ("metadata-store:zk:127.0.0.1:2181/ledgers", "zk+hierarchical://127.0.0.1:2181/ledgers"),
    ("zk:127.0.0.1:2181", "zk+hierarchical://127.0.0.1:2181/ledgers"),
    ("zk:127.0.0.1:2181/pulsar", "zk+hierarchical://127.0.0.1:2181/pulsar/ledgers"),
])
def test_metadata_uris(uri: str, want: str) -> None:
    assert bookkeeper_uri_of(uri) == want


@pytest.mark.parametrize("uri", ["metadata-store:oxia:127.0.0.1:6648", "etcd:127.0.0.1:2379",
                                 "metadata-store:etcd:h:1", "rocksdb:/data", "memory:local"])
def test_other_metadata_stores_are_refused(uri: str) -> None:
    with pytest.raises(PulsarMetadataError, match="only ZooKeeper"):
        bookkeeper_uri_of(uri)


def test_pulsar_root() -> None:
    assert pulsar_root_of("/ledgers") == "/" and pulsar_root_of("/pulsar/ledgers") == "/pulsar"


class FakeZk:
    """get / get_children / exists over a dict of paths; records every call (a resolver only reads)."""

    def __init__(self, nodes: dict[str, bytes]) -> None:
        self.nodes = nodes
        self.calls: list[str] = []

    def get(self, path: str) -> tuple[bytes, None]:
        self.calls.append("get")
        if path not in self.nodes:
            raise NoNodeError(path)
        return self.nodes[path], None

    def get_children(self, path: str) -> list[str]:
        self.calls.append("get_children")
        prefix = path.rstrip("/") + "/"
        kids = {p[len(prefix):].split("/")[0] for p in self.nodes if p.startswith(prefix)}
        if not kids and path not in self.nodes:
            raise NoNodeError(path)
        return sorted(kids)


def _info(*ledgers: int) -> bytes:
    info = ManagedLedgerInfo()
    for lid in ledgers:
        info.ledgerInfo.add(ledgerId=lid)
    return info.SerializeToString()


def test_resolver_partitions_patterns_and_missing_topics() -> None:
    ml = "/managed-ledgers/public/default/persistent"
    zk = FakeZk({
        f"{ml}/plain": _info(1, 2),
        f"{ml}/parted-partition-0": _info(3),
        f"{ml}/parted-partition-1": _info(4),
        f"{ml}/other%3A1": _info(5),
        "/admin/partitioned-topics/public/default/persistent/parted": json.dumps({"partitions": 2}).encode(),
        "/admin/partitioned-topics/public/default/persistent/bad": b"not json",
    })
    resolver = TopicResolver(zk, "/")
    parts = resolver.resolve(["persistent://public/default/parted", "plain"])
    assert [(str(p.topic), p.partition) for p in parts] == [
        ("persistent://public/default/parted-partition-0", 0), ("persistent://public/default/parted-partition-1", 1),
        ("persistent://public/default/plain", -1)]
    assert [x.ledger_id for x in resolver.ledgers(parts[2])] == [1, 2]
    matched = resolver.resolve([], "persistent://public/default/(parted|other:1)")
    assert [str(p.topic) for p in matched] == [
        "persistent://public/default/other:1", "persistent://public/default/parted-partition-0",
        "persistent://public/default/parted-partition-1"]
    with pytest.raises(PulsarTopicNotFoundError, match="never-written"):
        resolver.resolve(["never-written"])
    with pytest.raises(PulsarMetadataError, match="not Pulsar's JSON"):
        resolver.resolve(["bad"])
    assert set(zk.calls) <= {"get", "get_children"}


def test_read_options() -> None:
    assert is_pulsar_read({"topic": "x"}) and is_pulsar_read({"topicsPattern": "x.*"})
    assert not is_pulsar_read({"ledgers": "1"}) and not is_pulsar_read({"topic": ""})
    opts = parse_pulsar_read_options({"metadataServiceUri": "zk:127.0.0.1:2181", "topics": "a, persistent://t/n/b",
                                      "managedLedgerPassword": "pw", "managedLedgerDigestType": "crc32",
                                      "bookkeeper.readEntryTimeoutSec": "9"})
    assert opts.topics == ("a", "persistent://t/n/b") and opts.password == b"pw" and opts.digest_type == "CRC32"
    assert opts.metadata_service_uri == "zk+hierarchical://127.0.0.1:2181/ledgers"
    assert opts.client_conf == (("readentrytimeoutsec", "9"),) and "pw" not in repr(opts)
    default = parse_pulsar_read_options({"metadataServiceUri": "zk:h:1", "topic": "x"})
    assert (default.digest_type, default.password, default.fail_on_data_loss) == ("CRC32C", b"", True)
    for bad, match in [
        ({"topic": "x"}, "metadataServiceUri"),
        ({"metadataServiceUri": "zk:h:1", "topic": "x", "ledgers": "1"}, "'ledgers'"),
        ({"metadataServiceUri": "zk:h:1", "topic": "x", "topics": "y"}, "CONFLICTING"),
        ({"metadataServiceUri": "zk:h:1", "topic": "x", "managedLedgerDigestType": "md5"}, "managedLedgerDigestType"),
        ({"metadataServiceUri": "zk:h:1", "topic": "x", "maxEntriesPerPartition": "0"}, "maxEntriesPerPartition"),
        ({"metadataServiceUri": "zk:h:1", "topic": "x", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"metadataServiceUri": "zk:h:1", "topic": "x", "minPartitions": "5", "maxPartitions": "2"}, "minPartitions"),
    ]:
        with pytest.raises(InvalidOptionError, match=match):
            parse_pulsar_read_options(bad)


class _Versioned:
    def __init__(self, last_entry_id: int) -> None:
        from types import SimpleNamespace

        self.metadata = SimpleNamespace(state=SimpleNamespace(name="CLOSED"), last_entry_id=last_entry_id,
                                        length=10 * (last_entry_id + 1))


class _FakeClient:
    """What PulsarReader.partitions uses of a client: the store's ZooKeeper, root and multi reads of metadata."""

    def __init__(self, zk: FakeZk, ledgers: dict[int, int]) -> None:
        from types import SimpleNamespace

        self.store = SimpleNamespace(zk=zk, root="/ledgers", read_many_ledger_metadata=self._read)
        self.ledgers = ledgers

    def _read(self, wanted: list[tuple[int, int]]):  # type: ignore[no-untyped-def]
        return [(scope, lid, _Versioned(self.ledgers[lid]) if lid in self.ledgers else None) for scope, lid in wanted]


def test_planning_follows_fail_on_data_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    """At planning: a ledger offloaded and deleted from BookKeeper, or listed but without BookKeeper metadata, is
    data loss (an error naming topic and ledger, or skipped with failOnDataLoss=false); an offloaded ledger still
    on the bookies is read."""
    from bkspark.datasource import pulsar_reader
    from bkspark.datasource.planning import partition_slices
    from bkspark.pulsar.errors import PulsarDataLossError

    info = ManagedLedgerInfo()
    info.ledgerInfo.add(ledgerId=1, entries=5)
    offloaded = info.ledgerInfo.add(ledgerId=2, entries=5)
    offloaded.offloadContext.complete = True
    gone = info.ledgerInfo.add(ledgerId=3, entries=5)
    gone.offloadContext.complete = gone.offloadContext.bookkeeperDeleted = True
    info.ledgerInfo.add(ledgerId=4, entries=5)  # listed, but its metadata is gone
    info.ledgerInfo.add(ledgerId=5, entries=5)
    zk = FakeZk({"/managed-ledgers/public/default/persistent/t": info.SerializeToString()})
    client = _FakeClient(zk, {1: 4, 2: 4, 5: 4})
    monkeypatch.setattr("bkspark.datasource.clients.get_client", lambda uri, conf: client)

    def plan(**options: str) -> list[int]:
        reader = pulsar_reader.PulsarReader(parse_pulsar_read_options(
            {"metadataServiceUri": "zk:127.0.0.1:1", "topic": "t", **options}))
        return [s.ledger_id for p in reader.partitions() for s in partition_slices(p)]

    with pytest.raises(PulsarDataLossError, match="ledger 3 of topic persistent://public/default/t"):
        plan()
    client.ledgers[3] = 4  # still deleted from BookKeeper per the info: the flag decides
    with pytest.raises(PulsarDataLossError, match="ledger 3 "):
        plan()
    info.ledgerInfo[2].offloadContext.bookkeeperDeleted = False
    zk.nodes["/managed-ledgers/public/default/persistent/t"] = info.SerializeToString()
    with pytest.raises(PulsarDataLossError, match="ledger 4 of topic persistent://public/default/t no longer exists"):
        plan()
    assert plan(failOnDataLoss="false") == [1, 2, 3, 5]
    info.ledgerInfo[2].offloadContext.bookkeeperDeleted = True
    zk.nodes["/managed-ledgers/public/default/persistent/t"] = info.SerializeToString()
    assert plan(failOnDataLoss="false") == [1, 2, 5]
    assert set(zk.calls) <= {"get", "get_children"}


def test_offsets_options() -> None:
    base = {"metadataServiceUri": "zk:h:1", "topic": "t"}
    opts = parse_pulsar_read_options({**base, "startingOffsets": '{"t": [8, 7, 16, 4, 32, 2]}',
                                      "endingOffsets": '{"persistent://public/default/t": [8, -1, 1, 16, 0]}'})
    assert opts.starting_offsets == (("persistent://public/default/t", (7, 4, 2)),)
    assert opts.ending_offsets == (("persistent://public/default/t", (255, 0, -1)),)
    assert parse_pulsar_read_options({**base, "startingOffsets": "earliest", "endingOffsets": "latest"}).starting_offsets == ()
    for option, value in [("startingOffsets", "latest"), ("endingOffsets", "earliest"), ("startingOffsets", "[1]"),
                          ("startingOffsets", '{"t": [300]}'), ("startingOffsets", '{"t": [8]}'),
                          ("startingOffsets", "{nope")]:
        with pytest.raises(InvalidOptionError, match=option):
            parse_pulsar_read_options({**base, option: value})
