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

The per-request metrics (request latencies, bytes added and read, batch read
response sizes) are updated on the event loop for every request, so they are
kept as plain counters of that one thread (:class:`LoopHistogram`,
:class:`LoopCounter`: no lock per increment, which prometheus_client's own
metric objects take) and exported by a collector when scraped.  A scrape from
another thread may see one request counted in ``_count`` and not yet in its
bucket; the next scrape is consistent again.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from typing import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = [
    "BookieMetrics", "LoopCounter", "LoopHistogram", "BATCH_READ_LATENCY_BUCKETS_MS", "BATCH_READ_SIZE_BUCKETS", "now_ms"
]


def now_ms() -> float:
    """A monotonic clock in milliseconds: a request's latency is ``now_ms() - start`` (:meth:`observe_request`)."""
    return time.perf_counter() * 1000.0


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


class LoopHistogram:
    """A histogram one thread (the event loop) updates without a lock; read by :class:`_LoopCollector`."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        #: Upper bounds (``le``) of the finite buckets; the last count is the +Inf bucket's own.
        self.bounds = tuple(b for b in buckets if b != float("inf"))
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float, count: int = 1) -> None:
        """``count`` observations of ``value`` (a group of adds answered together has one latency)."""
        self.counts[bisect_left(self.bounds, value)] += count
        self.total += value * count

    def cumulative(self) -> tuple[list[tuple[str, float]], float]:
        """Prometheus buckets (``le`` -> cumulative count, +Inf last) and the sum."""
        counts = list(self.counts)
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(self.bounds, counts):
            running += count
            out.append((floatToGoString(bound), running))
        out.append(("+Inf", running + counts[-1]))
        return out, self.total


class LoopCounter:
    """A counter one thread (the event loop) increments without a lock."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class _LoopCollector(Collector):
    """Exports the loop-thread metrics of one bookie at scrape time."""

    def __init__(self) -> None:
        #: name -> (help, label name or None, {label value or None: metric})
        self.histograms: dict[str, tuple[str, str | None, dict[str | None, LoopHistogram]]] = {}
        self.counters: dict[str, tuple[str, LoopCounter]] = {}

    def collect(self) -> Iterator[Metric]:
        for name, (doc, label, children) in self.histograms.items():
            family = HistogramMetricFamily(name, doc, labels=[label] if label else None)
            for value, hist in children.items():
                buckets, total = hist.cumulative()
                family.add_metric([value] if label else [], buckets, sum_value=total)
            yield family
        for name, (doc, counter) in self.counters.items():
            yield CounterMetricFamily(name, doc, value=counter.value)


class BookieMetrics:
    """All metrics of one bookie, in its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        loop_metrics = _LoopCollector()
        #: op -> {success: histogram}, updated on the event loop only.
        self.requests: dict[str, dict[bool, LoopHistogram]] = {}
        for op in REQUEST_OPS:
            name = op if op.endswith("_REQUEST") else f"{op}_REQUEST"
            buckets = BATCH_READ_LATENCY_BUCKETS_MS if op == "BATCH_READ_ENTRY" else _LATENCY_BUCKETS_MS
            children = {True: LoopHistogram(buckets), False: LoopHistogram(buckets)}
            self.requests[op] = children
            loop_metrics.histograms[f"bookkeeper_server_{name}"] = (
                f"Latency of {op} requests in milliseconds",
                "success",
                {"true": children[True], "false": children[False]},
            )
        self.batch_read_response_size = LoopHistogram(BATCH_READ_SIZE_BUCKETS)
        loop_metrics.histograms["bookkeeper_server_BATCH_READ_ENTRY_RESPONSE_SIZE"] = (
            "Size in bytes of batch read responses", None, {None: self.batch_read_response_size}
        )
        #: success -> the latency of checkpoints (write cache to entry logs and index, then the journal's roll and
        #: trim), in milliseconds: Apache BookKeeper's DbLedgerStorage calls its own ``flush``.
        self.checkpoints = {True: LoopHistogram(_LATENCY_BUCKETS_MS), False: LoopHistogram(_LATENCY_BUCKETS_MS)}
        loop_metrics.histograms["bookie_flush"] = (
            "Latency of checkpoints (write cache to entry logs and index) in milliseconds",
            "success",
            {"true": self.checkpoints[True], "false": self.checkpoints[False]},
        )
        self.add_bytes = LoopCounter()
        self.read_bytes = LoopCounter()
        loop_metrics.counters["bookkeeper_server_ADD_ENTRY_BYTES"] = ("Bytes of entries added", self.add_bytes)
        loop_metrics.counters["bookkeeper_server_READ_ENTRY_BYTES"] = ("Bytes of entries read", self.read_bytes)
        self.registry.register(loop_metrics)
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
        self.read_cache_bytes = Gauge(
            "bookie_read_cache_size", "Bytes in the read cache (entries and batch-read ranges)", registry=self.registry
        )
        self.ledgers = Gauge("bookie_ledgers_count", "Ledgers stored on this bookie", registry=self.registry)
        self.index_reader_slots = Gauge(
            "bookie_index_reader_slots",
            "Slots of the entry index's LMDB reader table this bookie holds (label: active or idle)",
            ["state"],
            registry=self.registry,
        )
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

        #: (op, success) -> the histogram's observe (loop thread).
        self._observers = {(op, ok): hist.observe for op, children in self.requests.items() for ok, hist in children.items()}

    def observe_request(self, op: str, millis: float, success: bool, count: int = 1) -> None:
        """Record the latency of ``count`` requests answered together (event loop thread)."""
        self._observers[(op, success)](millis, count)

    def observe_checkpoint(self, millis: float, success: bool) -> None:
        """Record one checkpoint's latency and outcome (event loop thread)."""
        self.checkpoints[success].observe(millis, 1)

    def journal_batch(self, records: int, size: int, seconds: float) -> None:
        """Called by the journal thread after each group commit."""
        self.journal_batch_size.observe(records)
        self.journal_sync_latency.observe(seconds * 1000.0)

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry)
