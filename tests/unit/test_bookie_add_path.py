"""The bookie's add path helpers: the one-copy journal ADD_ENTRY record and the lock-free request metrics."""

from __future__ import annotations

import os

from bookie_server.journal import _ADD_PREFIX, RecordType, encode_add, encode_record
from bookie_server.metrics import BookieMetrics, LoopHistogram


def test_encode_add_is_the_generic_record_byte_for_byte() -> None:
    for scope_id, size in ((0, 0), (0, 1), (5, 1024), (2**62, 70_000)):
        entry = os.urandom(size)
        expected = encode_record(RecordType.ADD_ENTRY, scope_id, 7, _ADD_PREFIX.pack(9, 8) + entry)
        assert encode_add(scope_id, 7, 9, 8, entry) == expected
        assert encode_add(scope_id, 7, 9, 8, memoryview(entry)) == expected


def test_loop_histogram_buckets_are_prometheus_cumulative_le() -> None:
    hist = LoopHistogram((1.0, 5.0, float("inf")))
    for value in (0.5, 1.0, 1.5, 5.0, 9.0):
        hist.observe(value)
    buckets, total = hist.cumulative()
    assert buckets == [("1.0", 2), ("5.0", 4), ("+Inf", 5)] and total == 17.0


def test_request_metrics_render_with_their_bookkeeper_names() -> None:
    metrics = BookieMetrics()
    metrics.observe_request("ADD_ENTRY", 0.3, True)
    metrics.observe_request("ADD_ENTRY", 4000.0, False)
    metrics.add_bytes.inc(1024)
    metrics.read_bytes.inc(10)
    metrics.batch_read_response_size.observe(2000)
    text = metrics.render().decode()
    assert 'bookkeeper_server_ADD_ENTRY_REQUEST_count{success="true"} 1.0' in text
    assert 'bookkeeper_server_ADD_ENTRY_REQUEST_bucket{le="+Inf",success="false"} 1.0' in text
    assert 'bookkeeper_server_ADD_ENTRY_REQUEST_bucket{le="0.5",success="true"} 1.0' in text
    assert "bookkeeper_server_ADD_ENTRY_BYTES_total 1024.0" in text
    assert "bookkeeper_server_READ_ENTRY_BYTES_total 10.0" in text
    assert 'bookkeeper_server_BATCH_READ_ENTRY_RESPONSE_SIZE_bucket{le="2048.0"} 1.0' in text
