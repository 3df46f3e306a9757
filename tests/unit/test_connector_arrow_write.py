"""The Spark writer's Arrow batch -> entries step: the same bytes as ``to_pylist`` gave, from the buffers."""

from __future__ import annotations

import pyarrow as pa
import pytest

from bkspark.client.payloads import PackedPayloads
from bkspark.datasource.writer import _payloads


def _old_way(batch: pa.RecordBatch, is_string: bool) -> list[bytes]:
    """The reference: one Python value per row (what the writer did before issue 14)."""
    values = batch.column(0).to_pylist()
    return [b"" if v is None else (v.encode() if is_string else v) for v in values]


@pytest.mark.parametrize("arrow_type", [pa.binary(), pa.large_binary(), pa.string(), pa.large_string()])
def test_payloads_match_the_row_by_row_conversion(arrow_type: pa.DataType) -> None:
    is_string = pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    raw = [b"abc", None, b"", b"\x00\xff" * 40, "é✓".encode(), None, b"z"]
    values = [None if v is None else (v.decode("utf-8", "surrogateescape") if is_string else v) for v in raw]
    if is_string:
        values[3] = "ÿ" * 40
    batch = pa.record_batch([pa.array(values, type=arrow_type)], names=["payload"])
    packed, size = _payloads(batch, 0, is_string)
    assert type(packed) is PackedPayloads  # no bytes object per row: the client frames them from the buffer
    got = list(packed)
    expected = _old_way(batch, is_string)
    assert got == expected and size == sum(map(len, expected))
    assert all(type(p) is bytes for p in got)
    assert packed.sizes() == list(map(len, expected)) and packed.max_size == max(map(len, expected))
    # A slice (non-zero array offset) of the same batch, as Arrow hands out for split batches.
    sliced = batch.slice(2, 4)
    packed, size = _payloads(sliced, 0, is_string)
    got = list(packed)
    assert got == _old_way(sliced, is_string) and size == sum(map(len, got))


def test_payloads_of_an_empty_and_an_all_null_column() -> None:
    empty = pa.record_batch([pa.array([], type=pa.binary())], names=["payload"])
    packed, size = _payloads(empty, 0, False)
    assert (list(packed), size) == ([], 0)
    nulls = pa.record_batch([pa.array([None, None], type=pa.binary())], names=["payload"])
    packed, size = _payloads(nulls, 0, False)
    assert (list(packed), size) == ([b"", b""], 0)


def test_payloads_of_a_binary_view_column() -> None:
    """A layout other than offsets + data (binary_view) is cast first and gives the same entries."""
    batch = pa.record_batch([pa.array([b"x" * 20, None, b"y"], type=pa.binary_view())], names=["payload"])
    packed, size = _payloads(batch, 0, False)
    assert (list(packed), size) == ([b"x" * 20, b"", b"y"], 21)
