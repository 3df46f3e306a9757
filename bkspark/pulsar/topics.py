"""Topic names to managed ledgers, over ZooKeeper, reading only (docs/pulsar.md, "What is read").

Pulsar keeps, under its metadata root (the parent of the ``/ledgers`` root of BookKeeper):

* ``/managed-ledgers/<tenant>/<namespace>/persistent/<encoded topic>``: each persistent topic (each partition of
  a partitioned one) as a managed ledger (:mod:`bkspark.pulsar.managed_ledger`);
* ``/admin/partitioned-topics/<tenant>/<namespace>/persistent/<encoded topic>``: a partitioned topic's JSON
  (``{"partitions": N, ...}``); partition ``i`` is the topic ``<topic>-partition-<i>``.

The encoding is Pulsar's ``Codec.encode`` (Java's ``URLEncoder`` with UTF-8).  Nothing here writes: only ``get``
and ``get_children`` are called.
"""

from __future__ import annotations

import json
import posixpath
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from bkspark.pulsar.errors import PulsarMetadataError, PulsarTopicNotFoundError
from bkspark.pulsar.managed_ledger import TopicLedger, parse_managed_ledger_info, topic_ledgers

__all__ = [
    "TopicName",
    "znode_data",
    "TopicPartition",
    "parse_topic_name",
    "encode_local_name",
    "decode_local_name",
    "managed_ledger_path",
    "partitioned_topic_path",
    "pulsar_root_of",
    "bookkeeper_uri_of",
    "TopicResolver",
    "PARTITION_SUFFIX",
]

PARTITION_SUFFIX = "-partition-"
_PARTITION = re.compile(r"^(.*)-partition-(\d+)$")
_NAME_PART = re.compile(r"^[^/]+$")


@dataclass(frozen=True, order=True)
class TopicName:
    """A persistent topic: ``persistent://<tenant>/<namespace>/<local>``."""

    tenant: str
    namespace: str
    local: str

    def __str__(self) -> str:
        return f"persistent://{self.tenant}/{self.namespace}/{self.local}"

    def partition(self, index: int) -> "TopicName":
        return TopicName(self.tenant, self.namespace, f"{self.local}{PARTITION_SUFFIX}{index}")

    @property
    def partition_index(self) -> int:
        """N for ``<topic>-partition-N``, else -1 (as Pulsar's ``TopicName.getPartitionIndex``)."""
        match = _PARTITION.match(self.local)
        return int(match.group(2)) if match else -1

    @property
    def partitioned_topic(self) -> "TopicName":
        """The partitioned topic a ``<topic>-partition-N`` belongs to, else this topic (Pulsar's
        ``TopicName.getPartitionedTopicName``): the one whose schema registry its messages' versions refer to."""
        match = _PARTITION.match(self.local)
        return TopicName(self.tenant, self.namespace, match.group(1)) if match else self


@dataclass(frozen=True)
class TopicPartition:
    """One managed ledger to read: a topic, or one partition of a partitioned topic."""

    #: The name rows carry in ``__topic`` (a partition's own name, as Pulsar's consumer reports it).
    topic: TopicName
    #: The partition index (``__partition``), -1 for a topic that is not partitioned.
    partition: int


def parse_topic_name(text: str) -> TopicName:
    """``persistent://tenant/ns/name``, ``tenant/ns/name`` or ``name`` (in ``public/default``), as Pulsar's
    ``TopicName.get`` reads them; a non-persistent topic (nothing stored) or any other form is an error."""
    from bkspark.errors import InvalidOptionError

    raw = text.strip()
    domain, sep, rest = raw.partition("://")
    if not sep:
        domain, rest = "persistent", raw
        if "/" not in rest:
            rest = f"public/default/{rest}"
    if domain != "persistent":
        raise InvalidOptionError(
            f"[BOOKKEEPER_INVALID_OPTION] topic {text!r}: only persistent topics are stored in BookKeeper "
            "(a non-persistent topic has no ledgers)"
        )
    parts = rest.split("/", 2)
    if len(parts) != 3 or not all(parts) or not _NAME_PART.match(parts[0]) or not _NAME_PART.match(parts[1]):
        raise InvalidOptionError(
            f"[BOOKKEEPER_INVALID_OPTION] topic {text!r} is not a Pulsar topic name; expected "
            "persistent://<tenant>/<namespace>/<topic>"
        )
    return TopicName(parts[0], parts[1], parts[2])


def encode_local_name(local: str) -> str:
    """Pulsar's ``Codec.encode``: Java's ``URLEncoder.encode(name, UTF-8)`` (space as ``+``; ``*`` kept)."""
    return urllib.parse.quote_plus(local, safe="*").replace("~", "%7E")


def decode_local_name(encoded: str) -> str:
    return urllib.parse.unquote_plus(encoded)


def managed_ledger_path(root: str, topic: TopicName) -> str:
    return posixpath.join(
        root, "managed-ledgers", topic.tenant, topic.namespace, "persistent", encode_local_name(topic.local)
    )


def partitioned_topic_path(root: str, topic: TopicName) -> str:
    return posixpath.join(
        root, "admin", "partitioned-topics", topic.tenant, topic.namespace, "persistent",
        encode_local_name(topic.local),
    )


def pulsar_root_of(ledgers_root: str) -> str:
    """Pulsar's metadata root: the parent of BookKeeper's ledgers root (``/ledgers`` -> ``/``)."""
    return posixpath.dirname(ledgers_root.rstrip("/")) or "/"


_UNSUPPORTED_STORES = ("etcd:", "oxia:", "rocksdb:", "memory:", "metadata-store:etcd", "metadata-store:oxia",
                       "metadata-store:rocksdb", "metadata-store:memory")


def bookkeeper_uri_of(uri: str) -> str:
    """The BookKeeper metadata service URI of what a Pulsar user would give: a BookKeeper URI
    (``zk+hierarchical://host:port/ledgers``), Pulsar's ``bookkeeperMetadataServiceUri``
    (``metadata-store:zk:host:port/ledgers``) or its ``metadataStoreUrl`` (``zk:host:port[/chroot]``, whose
    ledgers are under ``<chroot>/ledgers``).  Another metadata store (etcd, Oxia, RocksDB, memory) is a
    :class:`PulsarMetadataError`: only ZooKeeper is read."""
    text = uri.strip()
    lowered = text.lower()
    if lowered.startswith(_UNSUPPORTED_STORES):
        raise PulsarMetadataError(
            f"[BOOKKEEPER_PULSAR_METADATA_STORE] metadataServiceUri {text!r} names a metadata store bkspark cannot "
            "read: only ZooKeeper is supported (zk:host:port, metadata-store:zk:host:port/ledgers or "
            "zk+hierarchical://host:port/ledgers)"
        )
    if lowered.startswith("metadata-store:"):
        text = text[len("metadata-store:"):]
        lowered = text.lower()
        if not lowered.startswith("zk:"):
            raise PulsarMetadataError(f"[BOOKKEEPER_PULSAR_METADATA_STORE] unsupported metadata store in {uri!r}")
        hosts, slash, path = text[3:].partition("/")
        return f"zk+hierarchical://{hosts}/{path if slash else 'ledgers'}"
    if lowered.startswith("zk:") and not lowered.startswith("zk://"):
        hosts, slash, chroot = text[3:].partition("/")
        root = "/" + chroot.strip("/") if slash and chroot.strip("/") else ""
        return f"zk+hierarchical://{hosts}{root}/ledgers"
    return text


def znode_data(zk: Any, path: str) -> bytes | None:
    """The data of the znode ``path`` of Pulsar's ZooKeeper (a plain ``get``: nothing written, no watch), None
    when it does not exist: the one place the Pulsar package meets kazoo's errors."""
    from kazoo.exceptions import NoNodeError

    try:
        data, _ = zk.get(path)
    except NoNodeError:
        return None
    return bytes(data)


class TopicResolver:
    """Resolves topics to their managed ledgers with an already started kazoo client (``get``/``get_children``
    only), under Pulsar's metadata ``root``."""

    def __init__(self, zk: Any, root: str = "/") -> None:
        self.zk = zk
        self.root = root

    def _get(self, path: str) -> bytes | None:
        return znode_data(self.zk, path)

    def _children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            return list(self.zk.get_children(path))
        except NoNodeError:
            return []

    def partition_count(self, topic: TopicName) -> int:
        """Partitions of a partitioned topic; 0 for a topic that is not partitioned."""
        path = partitioned_topic_path(self.root, topic)
        data = self._get(path)
        if data is None:
            return 0
        try:
            count = json.loads(data)["partitions"]
        except (ValueError, KeyError, TypeError):
            raise PulsarMetadataError("partitioned-topic metadata is not Pulsar's JSON", path=path) from None
        if not isinstance(count, int) or count < 0:
            raise PulsarMetadataError("partitioned-topic metadata has no valid partition count", path=path)
        return count

    def partitions(self, topic: TopicName) -> list[TopicPartition]:
        """The managed ledgers of a topic: its partitions when it is partitioned, else itself."""
        count = self.partition_count(topic)
        if count:
            return [TopicPartition(topic.partition(i), i) for i in range(count)]
        return [TopicPartition(topic, topic.partition_index)]

    def ledgers(self, part: TopicPartition) -> list[TopicLedger] | None:
        """The ledgers of one managed ledger, in order; None when it does not exist (a partition never written
        to has no managed ledger until a broker loads it)."""
        path = managed_ledger_path(self.root, part.topic)
        data = self._get(path)
        if data is None:
            return None
        return topic_ledgers(parse_managed_ledger_info(data, path=path))

    def managed_ledger_version(self, part: TopicPartition) -> int | None:
        """The znode version of a managed ledger (it changes whenever the broker rolls or trims a ledger)."""
        from kazoo.exceptions import NoNodeError

        try:
            return self.zk.exists(managed_ledger_path(self.root, part.topic)).version
        except (NoNodeError, AttributeError):
            return None

    def resolve(self, topics: list[str], pattern: str | None = None) -> list[TopicPartition]:
        """The managed ledgers of the named topics and of every topic ``pattern`` fully matches (Pulsar's
        pattern consumers match a partition by its topic's name), sorted by name, each once; a named topic that
        is neither partitioned nor has a managed ledger is a :class:`PulsarTopicNotFoundError`."""
        found: dict[str, TopicPartition] = {}
        for text in topics:
            topic = parse_topic_name(text)
            parts = self.partitions(topic)
            if len(parts) == 1 and parts[0].topic == topic and self._get(managed_ledger_path(self.root, topic)) is None:
                raise PulsarTopicNotFoundError(
                    f"[BOOKKEEPER_PULSAR_TOPIC_NOT_FOUND] topic {topic} has no managed ledger under "
                    f"{managed_ledger_path(self.root, topic)} (never written to, deleted, or another metadata root)"
                )
            for part in parts:
                found.setdefault(str(part.topic), part)
        if pattern is not None:
            for part in self._matching(pattern):
                found.setdefault(str(part.topic), part)
        return [found[name] for name in sorted(found, key=_natural)]

    def _matching(self, pattern: str) -> list[TopicPartition]:
        from bkspark.errors import InvalidOptionError

        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise InvalidOptionError(f"[BOOKKEEPER_INVALID_OPTION] option 'topicsPattern'={pattern!r}: {exc}") from None
        # The namespace comes from the pattern itself, as for Pulsar's pattern consumers.
        base = parse_topic_name(pattern if "://" in pattern else pattern)
        namespace = posixpath.join(self.root, "managed-ledgers", base.tenant, base.namespace, "persistent")
        out = []
        for encoded in sorted(self._children(namespace)):
            topic = TopicName(base.tenant, base.namespace, decode_local_name(encoded))
            index = topic.partition_index
            owner = topic
            if index >= 0:
                owner = TopicName(topic.tenant, topic.namespace, _PARTITION.match(topic.local).group(1))  # type: ignore[union-attr]
            if regex.fullmatch(str(owner)) or regex.fullmatch(str(topic)):
                out.append(TopicPartition(topic, index))
        return out


def _natural(name: str) -> tuple[str, int]:
    match = _PARTITION.match(name)
    return (match.group(1), int(match.group(2))) if match else (name, -1)
