"""Prometheus metrics of the bookie, named as Apache BookKeeper's bookie names them.

BookKeeper's Prometheus provider exports each request OpStatsLogger as
``bookkeeper_server_<OP>_REQUEST`` (latency in milliseconds) with a
``success`` label; we do the same with histograms.  BP-62 asks for two
histograms with fixed buckets, reproduced exactly:

* ``bookkeeper_server_BATCH_READ_ENTRY_REQUEST``: latency, buckets
  0-5, 5-10, 10-20, 20-50, 50-100, 100-200, 200-500, 500-1000, 1000-3000, >3000 ms;
* ``bookkeeper_server_BATCH_READ_ENTRY_RESPONSE_SIZE``: bytes, buckets
  0-128, 128-512, 512-1k, 1k-2k, 2k-4k, 4k-16k, 16k-128k, 128k-1MB, >1MB.

Each bookie gets its own registry so several bookies can live in one
process (tests) without clashing.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["BookieMetrics", "BATCH_READ_LATENCY_BUCKETS_MS", "BATCH_READ_SIZE_BUCKETS"]

BATCH_READ_LATENCY_BUCKETS_MS = (5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 3000.0, float("inf"))
BATCH_READ_SIZE_BUCKETS = (
    128.0,
    512.0,
    1024.0,
    2048.0,
    4096.0,
    16 * 1024.0,
    128 * 1024.0,
    1024 * 1024.0,
    float("inf"),
)
_LATENCY_BUCKETS_MS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 3000.0, float("inf"))

#: Request kinds with a ``bookkeeper_server_<name>_REQUEST`` histogram.
REQUEST_OPS = (
    "ADD_ENTRY",
    "READ_ENTRY",
    "BATCH_READ_ENTRY",
    "READ_LAC",
    "WRITE_LAC",
    "FORCE_LEDGER",
    "GET_BOOKIE_INFO",
    "GET_LIST_OF_ENTRIES_OF_LEDGER",
    "READ_ENTRY_FENCE_REQUEST",
    "READ_ENTRY_LONG_POLL_REQUEST",
)


class BookieMetrics:
    """All metrics of one bookie, in its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests: dict[str, Histogram] = {}
        for op in REQUEST_OPS:
            name = op if op.endswith("_REQUEST") else f"{op}_REQUEST"
            buckets = BATCH_READ_LATENCY_BUCKETS_MS if op == "BATCH_READ_ENTRY" else _LATENCY_BUCKETS_MS
            self.requests[op] = Histogram(
                f"bookkeeper_server_{name}",
                f"Latency of {op} requests in milliseconds",
                ["success"],
                buckets=buckets,
                registry=self.registry,
            )
        self.batch_read_response_size = Histogram(
            "bookkeeper_server_BATCH_READ_ENTRY_RESPONSE_SIZE",
            "Size in bytes of batch read responses",
            buckets=BATCH_READ_SIZE_BUCKETS,
            registry=self.registry,
        )
        self.add_bytes = Counter(
            "bookkeeper_server_ADD_ENTRY_BYTES", "Bytes of entries added", registry=self.registry
        )
        self.read_bytes = Counter(
            "bookkeeper_server_READ_ENTRY_BYTES", "Bytes of entries read", registry=self.registry
        )
        self.journal_batch_size = Histogram(
            "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_ENTRIES",
            "Records per journal group commit",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, float("inf")),
            registry=self.registry,
        )
        self.journal_sync_latency = Histogram(
            "bookie_journal_JOURNAL_SYNC",
            "Latency of one journal write + fdatasync in milliseconds",
            buckets=_LATENCY_BUCKETS_MS,
            registry=self.registry,
        )
        self.connections = Gauge(
            "bookkeeper_server_CHANNEL_CONNECTIONS", "Open client connections", registry=self.registry
        )
        self.protocol_errors = Counter(
            "bookkeeper_server_PROTOCOL_ERRORS", "Connections closed for protocol errors", registry=self.registry
        )
        self.readonly = Gauge(
            "bookie_SERVER_STATUS", "1 when the bookie is writable, 0 when read-only", registry=self.registry
        )
        self.readonly.set(1)
        self.write_cache_bytes = Gauge(
            "bookie_write_cache_size", "Bytes in the write cache", registry=self.registry
        )
        self.ledgers = Gauge("bookie_ledgers_count", "Ledgers stored on this bookie", registry=self.registry)
        # Back-pressure (docs/bookie.md, "Limits"); BookKeeper's names for the first two.
        self.adds_in_progress = Gauge(
            "bookkeeper_server_ADD_ENTRY_IN_PROGRESS", "Adds accepted and not yet acknowledged", registry=self.registry
        )
        self.reads_in_progress = Gauge(
            "bookkeeper_server_READ_ENTRY_IN_PROGRESS", "Reads accepted and not yet answered", registry=self.registry
        )
        self.limit_hits = Counter(
            "bookkeeper_server_LIMIT_HITS",
            "Times a client ran into a limit (label: its configuration key)",
            ["limit"],
            registry=self.registry,
        )

        # Labelled children resolved once: ``labels()`` is too slow for the request path.
        self._observers = {
            (op, ok): hist.labels(success="true" if ok else "false").observe
            for op, hist in self.requests.items()
            for ok in (True, False)
        }

    def observe_request(self, op: str, millis: float, success: bool) -> None:
        """Record one request's latency."""
        self._observers[(op, success)](millis)

    def journal_batch(self, records: int, size: int, seconds: float) -> None:
        """Called by the journal thread after each group commit."""
        self.journal_batch_size.observe(records)
        self.journal_sync_latency.observe(seconds * 1000.0)

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry)
