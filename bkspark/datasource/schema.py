"""The fixed schema of the ``bookkeeper`` data source, in Spark and Arrow form.

Like Kafka's ``topic/partition/offset/timestamp/value``, a BookKeeper entry is
opaque bytes with a position: (scope id, ledger id, entry id), plus the
ledger-level facts a user filters or groups by.  Arrow batches must match the
Arrow form of this schema exactly (types, order, nullability), so both forms
are defined here once.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, Sequence

from bkspark.client.arrow import DEFAULT_BYTES_PER_BATCH

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = [
    "SCHEMA_DDL", "schema_ddl", "spark_schema", "arrow_schema", "check_user_schema", "COLUMNS", "entry_batch",
    "MAX_BATCH_PAYLOAD_BYTES",
]

#: Payload bytes one Arrow batch may hold (the client's default, whose comment says why).
MAX_BATCH_PAYLOAD_BYTES = DEFAULT_BYTES_PER_BATCH

#: Column names, in order (``headers`` only with ``includeHeaders``, ``custom_metadata`` only with
#: ``includeCustomMetadata``).
COLUMNS = ("scope_id", "ledger_id", "entry_id", "payload", "ledger_ctime", "key", "headers", "custom_metadata")

_DDL_BASE = (
    "scope_id BIGINT NOT NULL, ledger_id BIGINT NOT NULL, entry_id BIGINT NOT NULL, "
    "payload BINARY, ledger_ctime TIMESTAMP, key BINARY"
)
_DDL_HEADERS = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
_DDL_CUSTOM_METADATA = "custom_metadata MAP<STRING, BINARY>"
#: The schema with every column.
SCHEMA_DDL = f"{_DDL_BASE}, {_DDL_HEADERS}, {_DDL_CUSTOM_METADATA}"


def schema_ddl(include_custom_metadata: bool = False, include_headers: bool = False) -> str:
    """The DDL of the rows read: ``headers`` only with the ``includeHeaders`` read option and
    ``custom_metadata`` only with ``includeCustomMetadata`` (docs/connector.md, "Schema"), as Kafka's source
    has ``headers`` only with ``includeHeaders``."""
    parts = [_DDL_BASE]
    if include_headers:
        parts.append(_DDL_HEADERS)
    if include_custom_metadata:
        parts.append(_DDL_CUSTOM_METADATA)
    return ", ".join(parts)


def spark_schema(include_custom_metadata: bool = False, include_headers: bool = False) -> "StructType":
    """The Spark ``StructType`` of every row this source reads (:func:`schema_ddl`)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("scope_id", LongType(), nullable=False),
        StructField("ledger_id", LongType(), nullable=False),
        StructField("entry_id", LongType(), nullable=False),
        StructField("payload", BinaryType(), nullable=True),
        StructField("ledger_ctime", TimestampType(), nullable=True),
        StructField("key", BinaryType(), nullable=True),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)])
        fields.append(StructField("headers", ArrayType(header, containsNull=True), nullable=True))
    if include_custom_metadata:
        fields.append(
            StructField("custom_metadata", MapType(StringType(), BinaryType(), valueContainsNull=True), nullable=True)
        )
    return StructType(fields)


@lru_cache(maxsize=4)
def arrow_schema(include_custom_metadata: bool = False, include_headers: bool = False) -> "pa.Schema":
    """The Arrow schema Spark checks yielded record batches against (``bkspark.spark_arrow.arrow_schema_utc``)."""
    from bkspark.spark_arrow import arrow_schema_utc

    return arrow_schema_utc(spark_schema(include_custom_metadata, include_headers))


def entry_batch(
    scope_id: int,
    ledger_id: int,
    first_entry_id: int,
    payloads: "Sequence[bytes] | pa.BinaryArray",
    ctime_ms: int | None = None,
    custom_metadata: Sequence[tuple[str, bytes]] = (),
    entry_ids: Any = None,
    include_custom_metadata: bool = False,
    *,
    include_headers: bool = False,
    keys: "pa.Array | None" = None,
    headers: "pa.Array | None" = None,
) -> "pa.RecordBatch":
    """Consecutive entries ``first_entry_id ..`` of one ledger as one Arrow batch of :func:`arrow_schema`
    (or rows with the given ``entry_ids``, a numpy int64 array: the rows of packed entries,
    :mod:`bkspark.datasource.packing`).

    Built column-wise from buffers, with no Python object per row: ``payloads`` is either the ``payload``
    column of the client's ``ReadHandle.read_batches`` (used as it is) or a list gathered into one buffer by
    :func:`bkspark.client.arrow.binary_array`; entry ids are a numpy ``arange``, and the ledger-level
    columns are repeated scalars.  ``keys`` and ``headers`` are the rows' own (entries of the ``rows-v2``
    format); without them every row's are null.  Shared by every reader of the data source (batch and
    streaming), so all of them yield the same rows.
    """
    import numpy as np
    import pyarrow as pa

    from bkspark.client.arrow import binary_array

    schema = arrow_schema(include_custom_metadata, include_headers)
    n = len(payloads)
    if n == 0:  # pa.repeat of a map scalar cannot make an empty array
        return pa.RecordBatch.from_pylist([], schema=schema)
    payload_col = payloads if isinstance(payloads, pa.Array) else binary_array(payloads)
    columns = [
        pa.repeat(pa.scalar(scope_id, pa.int64()), n),
        pa.repeat(pa.scalar(ledger_id, pa.int64()), n),
        pa.array(np.arange(first_entry_id, first_entry_id + n, dtype=np.int64) if entry_ids is None else entry_ids),
        payload_col,
        _repeated_ctime(schema.field("ledger_ctime").type, ctime_ms, n),
        pa.nulls(n, pa.binary()) if keys is None else keys,
    ]
    if include_headers:
        header_type = schema.field("headers").type
        columns.append(pa.nulls(n, header_type) if headers is None else headers.cast(header_type))
    if include_custom_metadata:
        columns.append(_repeated_map(schema.field("custom_metadata").type, custom_metadata, n))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _repeated_ctime(ts_type: "pa.DataType", ctime_ms: int | None, n: int) -> "pa.Array":
    """``n`` copies of one timestamp (or nulls), from a numpy buffer (``pa.repeat`` of the scalar is slower)."""
    import numpy as np
    import pyarrow as pa

    if not ctime_ms:
        return pa.nulls(n, ts_type)
    return pa.Array.from_buffers(ts_type, n, [None, pa.py_buffer(np.full(n, ctime_ms * 1000, dtype=np.int64))])


def _repeated_map(map_type: "pa.MapType", pairs: Sequence[tuple[str, bytes]], n: int) -> "pa.Array":
    """``n`` copies of one map, from offsets and tiled key and value buffers: ``pa.repeat`` of a map scalar
    costs about 0.4 µs a row (4 ms per 10,000-row batch, the largest part of the batch's build before)."""
    import numpy as np
    import pyarrow as pa

    k = len(pairs)
    offsets = np.arange(0, (n + 1) * k, k, dtype=np.int32) if k else np.zeros(n + 1, dtype=np.int32)
    keys = _tiled(map_type.key_type, [key.encode("utf-8") for key, _ in pairs], n)
    items = _tiled(map_type.item_type, [bytes(value) for _, value in pairs], n)
    return pa.MapArray.from_arrays(pa.array(offsets), keys, items, type=map_type)


def _tiled(value_type: "pa.DataType", values: list[bytes], n: int) -> "pa.Array":
    """``values`` repeated ``n`` times as one string or binary array, built from one tiled buffer."""
    import numpy as np
    import pyarrow as pa

    lengths = np.array([len(v) for v in values], dtype=np.int64)
    offsets = np.zeros(len(values) * n + 1, dtype=np.int64)
    np.cumsum(np.tile(lengths, n), out=offsets[1:])
    data = pa.py_buffer(b"".join(values) * n)
    return pa.Array.from_buffers(value_type, len(values) * n, [None, pa.py_buffer(offsets.astype(np.int32)), data])


def check_user_schema(schema: "StructType", include_custom_metadata: bool = False, include_headers: bool = False) -> None:
    """Reject a user-specified schema that is not ours, as Kafka does (the schema is fixed by the options)."""
    from bkspark.errors import InvalidOptionError

    expected = spark_schema(include_custom_metadata, include_headers)
    if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in expected.fields]:
        raise InvalidOptionError(
            "[BOOKKEEPER_FIXED_SCHEMA] the bookkeeper source has a fixed schema and cannot be read with a custom one; "
            f"drop .schema(...) (with these options the schema is: {schema_ddl(include_custom_metadata, include_headers)}; "
            "options includeHeaders and includeCustomMetadata add the headers and custom_metadata columns)"
        )
