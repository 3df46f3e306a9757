"""What the installed PySpark's Python Data Source API offers: one home for every check by release.

Python data sources exist since PySpark 4.0; later releases added to the API, and the connector uses each
addition where it exists and degrades where it does not (docs/connector.md, "Spark versions"):

* ``DataSourceReader.pushFilters`` (4.1): without it no filter is pushed down; Spark still filters every row
  after the scan, so the results are the same and only the scan is larger.
* ``DataSourceStreamArrowWriter`` (4.1): before it, PySpark 4.0's executors hand Arrow batches to any writer
  that is a ``DataSourceArrowWriter``, streaming or not, so the stream writer is made one of those.
* ``to_arrow_schema(schema, timezone=...)`` (4.2; 4.0 and 4.1 have ``timestamp_utc``): the Arrow schema Spark checks
  a reader's record batches against, with UTC timestamps either way (:func:`bkspark.spark_arrow.arrow_schema_utc`,
  below the Pulsar decoder that uses it too).
* ``pyspark.sql.streaming.datasource`` (4.2): admission control (``getDefaultReadLimit``,
  ``latestOffset(start, limit)``), ``SupportsTriggerAvailableNow`` and ``reportLatestOffset`` (the lag in a
  query's progress).  Before it, Spark asks a stream for its
  latest offset with no start and no limit: every micro-batch reads all that is available, so the per-trigger
  limits are refused with :func:`require`'s error, and ``Trigger.AvailableNow`` runs as one batch to the
  offset Spark reads when the query starts.

Checked by capability (``hasattr``, an import), never by parsing the version, so a back-port is used too.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pyspark
from pyspark.sql import datasource as _datasource

__all__ = [
    "PYSPARK_VERSION", "FILTER_PUSHDOWN", "STREAM_ARROW_WRITER", "ADMISSION_CONTROL", "StreamArrowWriterBase",
    "require",
]

#: The installed PySpark release.
PYSPARK_VERSION: str = pyspark.__version__
#: ``DataSourceReader.pushFilters`` and ``spark.sql.python.filterPushdown.enabled`` exist (PySpark 4.1).
FILTER_PUSHDOWN: bool = hasattr(_datasource.DataSourceReader, "pushFilters")
#: ``DataSourceStreamArrowWriter`` exists (PySpark 4.1).
STREAM_ARROW_WRITER: bool = hasattr(_datasource, "DataSourceStreamArrowWriter")
#: Read limits, ``latestOffset(start, limit)`` and ``SupportsTriggerAvailableNow`` exist (PySpark 4.2).
ADMISSION_CONTROL: bool = importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None


if STREAM_ARROW_WRITER:
    StreamArrowWriterBase: type = _datasource.DataSourceStreamArrowWriter
else:

    class StreamArrowWriterBase(_datasource.DataSourceStreamWriter, _datasource.DataSourceArrowWriter):  # type: ignore[no-redef]
        """PySpark 4.0's stand-in for ``DataSourceStreamArrowWriter``: its executors give Arrow batches to a writer
        that is a ``DataSourceArrowWriter`` (pyspark/sql/worker/write_into_data_source.py), streaming or not, and
        its driver commits a ``DataSourceStreamWriter`` with ``commit(messages, batchId)``."""


def require(available: bool, what: str, since: str, instead: str) -> None:
    """A clear error when ``what`` needs a PySpark feature this release lacks: which release has it, and what
    to do on this one."""
    if available:
        return
    from bkspark.errors import InvalidOptionError

    raise InvalidOptionError(
        f"[BOOKKEEPER_SPARK_VERSION] {what} needs PySpark {since} or newer; this is PySpark {PYSPARK_VERSION}: "
        f"{instead} (docs/connector.md, \"Spark versions\")"
    )
