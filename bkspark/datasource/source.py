"""``BookKeeperDataSource``: the ``bookkeeper`` format for ``spark.read`` and ``df.write``.

Options are validated here, at ``load()``/``save()`` time, so a mistake fails
the query before any task runs, with the option's name and the fix.
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

__all__ = ["BookKeeperDataSource"]

#: The PySpark worker module that plans a read with filter pushdown; Spark runs it only when
#: ``spark.sql.python.filterPushdown.enabled`` is true.
PUSHDOWN_PLANNER_MODULE = "pyspark.sql.worker.data_source_pushdown_filters"


def running_in_pushdown_planner() -> bool:
    """Whether this process is PySpark's filter-pushdown planner (then ``reader()`` may define ``pushFilters``).

    Spark starts a planner either as ``python -m <module>`` or by forking its
    daemon, which then imports ``<module>``; nothing else imports the
    pushdown planner.  So the answer is which modules this process loaded,
    not a walk over PySpark's stack frames.  It fails safe both ways: a plain
    reader where pushdown was possible only scans more (Spark filters the
    rows), and the plain planner, which fails a query whose reader defines
    ``pushFilters`` while the conf is off, never gets the pushdown reader.
    tests/integration/test_connector_spark.py pins it on the PySpark version
    installed (the plan must shrink with the conf on).
    """
    if PUSHDOWN_PLANNER_MODULE in sys.modules:
        return True
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == PUSHDOWN_PLANNER_MODULE


class BookKeeperDataSource(DataSource):
    """Apache BookKeeper ledgers as a Spark table.

    Read::

        spark.read.format("bookkeeper")
            .option("metadataServiceUri", "zk+hierarchical://127.0.0.1:2181/ledgers")
            .option("ledgers", "7,9,12")          # or .option("dataset", "events")
            .load()

    Write (one ledger per task; ``append`` or ``overwrite``)::

        df.write.format("bookkeeper").option("metadataServiceUri", uri)
            .option("dataset", "events").mode("append").save()

    The schema is fixed: ``scope_id, ledger_id, entry_id, payload,
    ledger_ctime, custom_metadata`` (the last one left out with
    ``includeCustomMetadata=false``).  See docs/connector.md for every option.
    """

    @classmethod
    def name(cls) -> str:
        return "bookkeeper"

    def schema(self) -> str:
        from bkspark.datasource.pulsar_options import is_pulsar_read

        if is_pulsar_read(self.options):  # a Pulsar topic: docs/pulsar.md
            from bkspark.datasource.pulsar_reader import pulsar_schema

            return pulsar_schema(self.options)
        from bkspark.datasource.options import parse_read_options, without_stream_options
        from bkspark.datasource.schema import schema_ddl

        # Fail at load(), before any task runs (readStream's own options are checked by streamReader()).
        return schema_ddl(parse_read_options(without_stream_options(self.options)).include_custom_metadata)

    def reader(self, schema: Any) -> DataSourceReader:
        from bkspark.datasource.pulsar_options import is_pulsar_read

        if is_pulsar_read(self.options):  # a Pulsar topic: docs/pulsar.md
            from bkspark.datasource.pulsar_reader import pulsar_reader

            return pulsar_reader(self.options, schema, pushdown=running_in_pushdown_planner())
        from bkspark.datasource.options import parse_read_options
        from bkspark.datasource.reader import BookKeeperPushdownReader, BookKeeperReader
        from bkspark.datasource.schema import check_user_schema

        options = parse_read_options(self.options)
        check_user_schema(schema, options.include_custom_metadata)
        # Spark fails a query whose reader defines pushFilters while its pushdown conf is
        # off; only the pushdown planner gets a reader that defines it, so users never see that.
        if running_in_pushdown_planner():
            return BookKeeperPushdownReader(options)
        return BookKeeperReader(options)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        """``spark.readStream.format("bookkeeper")``: see docs/streaming.md."""
        from bkspark.datasource.pulsar_options import is_pulsar_read

        if is_pulsar_read(self.options):  # a Pulsar topic: docs/pulsar.md
            from bkspark.datasource.pulsar_reader import pulsar_stream_reader

            return pulsar_stream_reader(self.options, schema)
        from bkspark.datasource.schema import check_user_schema
        from bkspark.datasource.stream_reader import BookKeeperStreamReader, parse_stream_read_options

        options, stream_options = parse_stream_read_options(self.options)
        check_user_schema(schema, options.include_custom_metadata)
        return BookKeeperStreamReader(options, stream_options)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        from bkspark.datasource.options import parse_write_options
        from bkspark.datasource.writer import BookKeeperWriter

        options = parse_write_options(self.options)
        writer = BookKeeperWriter(options, *_payload_column(schema), overwrite)
        writer.reserve_parent()  # here, on the driver: the tasks get the id with the pickled writer
        return writer

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 - Spark's name
        """``df.writeStream.format("bookkeeper")``: exactly-once micro-batches into a dataset (docs/streaming.md).

        Spark passes ``overwrite=True`` for output mode ``complete`` (it truncates the table): each batch then
        replaces the dataset's rows; ``append`` adds them.
        """
        from bkspark.datasource.stream_writer import BookKeeperStreamWriter, parse_stream_write_options

        options, checkpoint = parse_stream_write_options(self.options)
        return BookKeeperStreamWriter(options, *_payload_column(schema), checkpoint, complete=overwrite)


def _payload_column(schema: Any) -> tuple[int, bool]:
    """The index of the ``payload`` column, and whether it is a string (else binary); a clear error otherwise."""
    from pyspark.sql.types import BinaryType, StringType

    from bkspark.errors import InvalidOptionError

    names = [f.name.lower() for f in schema.fields]
    if "payload" not in names:
        raise InvalidOptionError(
            "[BOOKKEEPER_MISSING_PAYLOAD] the DataFrame needs a 'payload' column (binary or string) whose "
            f"values become entries; it has: {', '.join(schema.fieldNames())}"
        )
    index = names.index("payload")
    field_type = schema.fields[index].dataType
    if not isinstance(field_type, (BinaryType, StringType)):
        raise InvalidOptionError(
            f"[BOOKKEEPER_PAYLOAD_TYPE] column 'payload' must be binary or string, not {field_type.simpleString()}; "
            "cast it, e.g. df.withColumn('payload', col('payload').cast('binary'))"
        )
    return index, isinstance(field_type, StringType)
