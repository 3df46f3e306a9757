"""``BookKeeperDataSource``: the ``bookkeeper`` format for ``spark.read`` and ``df.write``.

Options are validated here, at ``load()``/``save()`` time, so a mistake fails
the query before any task runs, with the option's name and the fix.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

__all__ = ["BookKeeperDataSource", "WRITE_COLUMNS", "row_columns"]

if TYPE_CHECKING:  # pragma: no cover
    from bkspark.datasource.writer import RowColumnIndexes

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
    installed (the plan must shrink with the conf on).  PySpark 4.0 has no
    pushdown planner (``spark_features.FILTER_PUSHDOWN``), so there the answer
    is always no.
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
    ledger_ctime, key``, then ``headers`` with ``includeHeaders`` and
    ``custom_metadata`` with ``includeCustomMetadata``.  A write keeps
    ``payload``, ``key`` and ``headers`` and refuses any other column.  See
    docs/connector.md for every option.
    """

    @classmethod
    def name(cls) -> str:
        return "bookkeeper"

    def schema(self) -> str:
        from bkspark.datasource.pulsar_options import is_pulsar_read

        if is_pulsar_read(self.options):  # a Pulsar topic: docs/pulsar.md
            from bkspark.datasource.pulsar_stream_offsets import pulsar_schema_of_any

            return pulsar_schema_of_any(self.options)
        from bkspark.datasource.options import parse_read_options
        from bkspark.datasource.schema import schema_ddl
        from bkspark.datasource.stream_reader import parse_stream_options

        # Fail at load(), before any task runs: every value is checked here.  PySpark runs this step alike for
        # spark.read and spark.readStream (it is not told which), so an option of the other kind is refused
        # when the query is planned or started (reader() / streamReader()), docs/connector.md "Read options".
        options = parse_read_options(self.options, stream=None)
        parse_stream_options(self.options, options.scope_id)
        return schema_ddl(options.include_custom_metadata, options.include_headers)

    def reader(self, schema: Any) -> DataSourceReader:
        from bkspark.datasource.pulsar_options import is_pulsar_read

        if is_pulsar_read(self.options):  # a Pulsar topic: docs/pulsar.md
            from bkspark.datasource.pulsar_reader import pulsar_reader

            return pulsar_reader(self.options, schema, pushdown=running_in_pushdown_planner())
        from bkspark.datasource.options import parse_read_options
        from bkspark.datasource.reader import BookKeeperPushdownReader, BookKeeperReader
        from bkspark.datasource.schema import check_user_schema

        options = parse_read_options(self.options)
        check_user_schema(schema, options.include_custom_metadata, options.include_headers)
        # Spark fails a query whose reader defines pushFilters while its pushdown conf is
        # off; only the pushdown planner gets a reader that defines it, so users never see that.
        if running_in_pushdown_planner():
            return BookKeeperPushdownReader(options)
        return BookKeeperReader(options)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        """``spark.readStream.format("bookkeeper")``: see docs/streaming.md."""
        from bkspark.datasource.pulsar_options import is_pulsar_read

        if is_pulsar_read(self.options):  # a Pulsar topic: docs/pulsar.md
            from bkspark.datasource.spark_features import ADMISSION_CONTROL, require

            require(ADMISSION_CONTROL, "readStream on a Pulsar topic", "4.2",
                    "read the topic with spark.read, or run the stream on a newer Spark")
            from bkspark.datasource.pulsar_stream import pulsar_stream_reader

            return pulsar_stream_reader(self.options, schema)
        from bkspark.datasource.schema import check_user_schema
        from bkspark.datasource.stream_reader import BookKeeperStreamReader, parse_stream_read_options

        options, stream_options = parse_stream_read_options(self.options)
        check_user_schema(schema, options.include_custom_metadata, options.include_headers)
        return BookKeeperStreamReader(options, stream_options)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        from bkspark.datasource.options import parse_write_options
        from bkspark.datasource.writer import BookKeeperWriter

        # Before any ledger id is reserved: a missing payload column, then a column the writer would not keep,
        # fails the save() here.
        payload = _payload_column(schema)
        columns = row_columns(schema)
        # A dataset column routes the rows only without the dataset option, which wins as Kafka's topic option does.
        options = parse_write_options(self.options, routed=columns.dataset_index is not None)
        writer = BookKeeperWriter(options, *payload, overwrite, row_columns=columns)
        writer.reserve_parent()  # here, on the driver: the tasks get the id with the pickled writer
        return writer

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 - Spark's name
        """``df.writeStream.format("bookkeeper")``: exactly-once micro-batches into a dataset (docs/streaming.md).

        Spark passes ``overwrite=True`` for output mode ``complete`` (it truncates the table): each batch then
        replaces the dataset's rows; ``append`` adds them.
        """
        from bkspark.datasource.stream_writer import BookKeeperStreamWriter, parse_stream_write_options

        payload = _payload_column(schema)  # the missing payload first, as for df.write
        columns = row_columns(schema)
        options, checkpoint = parse_stream_write_options(self.options, routed=columns.dataset_index is not None)
        return BookKeeperStreamWriter(options, *payload, checkpoint, complete=overwrite, row_columns=columns)


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


#: The columns a write keeps or routes by, and what each must be (docs/connector.md, "Write").
WRITE_COLUMNS = ("payload", "key", "headers", "dataset")


def row_columns(schema: Any) -> "RowColumnIndexes":
    """Where the ``key``, ``headers`` and ``dataset`` columns of a DataFrame to write are (each optional),
    checked; any column the writer would not keep is an error naming it (nothing is dropped silently)."""
    from pyspark.sql.types import ArrayType, BinaryType, StringType, StructType

    from bkspark.datasource.writer import DATASET_COLUMN, RowColumnIndexes
    from bkspark.errors import InvalidOptionError

    names = [f.name.lower() for f in schema.fields]
    unknown = [f.name for f in schema.fields if f.name.lower() not in WRITE_COLUMNS]
    if unknown:
        raise InvalidOptionError(
            "[BOOKKEEPER_UNKNOWN_COLUMNS] the bookkeeper writer keeps only the columns payload, key and headers, "
            "and routes rows by a 'dataset' column; "
            f"the DataFrame also has {', '.join(repr(n) for n in unknown)}, which would be lost: drop them, or fold "
            "them into payload (e.g. to_json(struct(...))), key or headers (docs/connector.md, \"Write\")"
        )
    dataset_index = names.index(DATASET_COLUMN) if DATASET_COLUMN in names else None
    if dataset_index is not None and not isinstance(schema.fields[dataset_index].dataType, StringType):
        raise InvalidOptionError(
            f"[BOOKKEEPER_COLUMN_TYPE] column 'dataset' must be a string naming the dataset each row goes to, not "
            f"{schema.fields[dataset_index].dataType.simpleString()}; cast it, e.g. col('dataset').cast('string')"
        )
    key_index = names.index("key") if "key" in names else None
    key_is_string = False
    if key_index is not None:
        key_type = schema.fields[key_index].dataType
        if not isinstance(key_type, (BinaryType, StringType)):
            raise InvalidOptionError(
                f"[BOOKKEEPER_COLUMN_TYPE] column 'key' must be binary or string, not {key_type.simpleString()}"
            )
        key_is_string = isinstance(key_type, StringType)
    headers_index = names.index("headers") if "headers" in names else None
    if headers_index is not None:
        headers_type = schema.fields[headers_index].dataType
        element = headers_type.elementType if isinstance(headers_type, ArrayType) else None
        fields = (
            [(f.name.lower(), f.dataType) for f in element.fields] if isinstance(element, StructType) else []
        )
        if (
            len(fields) != 2 or fields[0][0] != "key" or not isinstance(fields[0][1], StringType)
            or fields[1][0] != "value" or not isinstance(fields[1][1], (BinaryType, StringType))
        ):
            raise InvalidOptionError(
                f"[BOOKKEEPER_COLUMN_TYPE] column 'headers' must be Kafka's array<struct<key: string, value: binary>> "
                f"(value may be a string), not {headers_type.simpleString()}; a map becomes one with map_entries(...)"
            )
    return RowColumnIndexes(key_index, key_is_string, headers_index, dataset_index)
