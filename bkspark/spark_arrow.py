"""The Arrow schema of a Spark schema with timestamps in UTC, on every PySpark 4.x: Spark checks the
``pyarrow.RecordBatch`` objects a Python data source yields against it.

``pyspark.sql.pandas.types.to_arrow_schema`` takes ``timezone="UTC"`` since PySpark 4.2 and ``timestamp_utc=True``
before (docs/connector.md, "Spark versions").  Here, below every package that builds record batches (the
connector's readers and the Pulsar decoder), so that neither reaches up to the other for it; the rest of the
release checks live in :mod:`bkspark.datasource.spark_features`.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from pyspark.sql.pandas.types import to_arrow_schema as _to_arrow_schema

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = ["arrow_schema_utc"]

#: ``to_arrow_schema`` takes ``timezone=`` (PySpark 4.2); 4.0's and 4.1's take ``timestamp_utc=``.
_TIMEZONE_KEYWORD: bool = "timezone" in inspect.signature(_to_arrow_schema).parameters


def arrow_schema_utc(schema: Any) -> "pa.Schema":
    """The Arrow schema of a Spark ``StructType`` with timestamps in UTC."""
    if _TIMEZONE_KEYWORD:
        return _to_arrow_schema(schema, timezone="UTC")
    return _to_arrow_schema(schema, timestamp_utc=True)
