"""BookKeeper's ZooKeeper metadata through kazoo: ledger znodes, ids, bookie registry, BookieId resolution."""

from bkspark.metadata.registry import BookieRegistry
from bkspark.metadata.retry import ZkRetry
from bkspark.metadata.store import Versioned, ZkMetadataStore

__all__ = ["BookieRegistry", "ZkRetry", "Versioned", "ZkMetadataStore"]
