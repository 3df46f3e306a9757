"""The data source's Arrow conversion (``schema.entry_batch``) against the row-by-row conversion it replaced.

``reference_batch`` is the reader's conversion before it was built from buffers (one ``pa.array`` of a Python
list per column); every batch ``entry_batch`` builds must be equal to it, value for value and type for type.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from bkspark.datasource.schema import arrow_schema, entry_batch


def reference_batch(scope_id: int, ledger_id: int, first: int, payloads: list[bytes], ctime_ms: int | None,
                    custom: tuple[tuple[str, bytes], ...]) -> pa.RecordBatch:
    """The old reader's conversion: Python lists turned into Arrow arrays, one value at a time."""
    schema = arrow_schema(True)
    n = len(payloads)
    ctime = pa.scalar(ctime_ms * 1000 if ctime_ms else None, type=schema.field("ledger_ctime").type)
    custom_scalar = pa.scalar(list(custom), type=schema.field("custom_metadata").type)
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(scope_id, pa.int64()), n),
            pa.repeat(pa.scalar(ledger_id, pa.int64()), n),
            pa.array(list(range(first, first + n)), pa.int64()),
            pa.array(payloads, pa.binary()),
            pa.repeat(ctime, n),
            pa.nulls(n, pa.binary()),  # key: none in entries of one row each
            pa.repeat(custom_scalar, n),
        ],
        schema=schema,
    )


@pytest.mark.parametrize("seed", range(5))
def test_entry_batch_equals_the_row_by_row_conversion(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([1, 2, 17, 1000, 10_000])
    payloads = [rng.randbytes(rng.choice([0, 1, 100, 1024, 5000])) for _ in range(n)]
    custom = tuple(sorted({f"k{i}": rng.randbytes(i) for i in range(rng.randint(0, 3))}.items()))
    ctime = rng.choice([None, 1_700_000_000_123])
    args = (rng.randint(0, 5), rng.randint(0, 1 << 40), rng.randint(0, 1 << 30), payloads, ctime, custom)
    got = entry_batch(*args, include_custom_metadata=True)
    want = reference_batch(*args)
    assert got.schema == want.schema == arrow_schema(True)
    assert got.equals(want)
    assert got.column("payload").to_pylist() == payloads
    got.validate(full=True)


@pytest.mark.parametrize("n", [0, 1, 1000])
def test_without_custom_metadata_the_batch_is_the_same_less_the_last_column(n: int) -> None:
    """``includeCustomMetadata=false`` (docs/connector.md, "Schema"): the same columns but the last."""
    payloads = [bytes([i % 251]) * (i % 300) for i in range(n)]
    args = (3, 77, 10, payloads, 1_700_000_000_123, (("k", b"v"),))
    lean = entry_batch(*args)
    full = entry_batch(*args, include_custom_metadata=True)
    assert lean.schema == arrow_schema(False) and arrow_schema(False).names == arrow_schema(True).names[:-1]
    assert lean.equals(pa.RecordBatch.from_arrays(full.columns[:-1], schema=arrow_schema(False)))
    lean.validate(full=True)


def test_empty_and_zero_length_payloads() -> None:
    assert entry_batch(0, 7, 0, []).num_rows == 0
    batch = entry_batch(0, 7, 3, [b"", b"x", b""])
    assert batch.column("payload").to_pylist() == [b"", b"x", b""]
    assert batch.column("entry_id").to_pylist() == [3, 4, 5]
    assert batch.column("payload").null_count == 0
    assert entry_batch(0, 7, 3, [b"", b"x", b""], include_custom_metadata=True).equals(
        reference_batch(0, 7, 3, [b"", b"x", b""], None, ()))


def test_memoryview_payloads_are_gathered_too() -> None:
    """A payload may be a view into a response buffer (zero-copy decoding): the bytes, not the object, count."""
    raw = bytes(range(256)) * 4
    views = [memoryview(raw)[i * 10:(i + 1) * 10] for i in range(50)]
    batch = entry_batch(1, 2, 0, views)
    assert batch.column("payload").to_pylist() == [bytes(v) for v in views]


def test_custom_metadata_with_many_pairs_and_non_ascii_keys() -> None:
    """The map column is built from tiled key and value buffers: every row holds the whole map, in order."""
    custom = tuple(sorted({"bookkeeper.dataset": b"events", "ключ": b"\x00\xff", "empty": b"", "z" * 300: b"v" * 1000}.items()))
    payloads = [b"p%d" % i for i in range(777)]
    got = entry_batch(2, 9, 40, payloads, 1_700_000_000_123, custom, include_custom_metadata=True)
    assert got.equals(reference_batch(2, 9, 40, payloads, 1_700_000_000_123, custom))
    assert got.column("custom_metadata")[776].as_py() == list(custom)
    got.validate(full=True)
