"""The fixed schema of the ``bookkeeper`` data source, in Spark and Arrow form.

Like Kafka's ``topic/partition/offset/timestamp/value``, a BookKeeper entry is
opaque bytes with a position: (scope id, ledger id, entry id), plus the
ledger-level facts a user filters or groups by.  Arrow batches must match the
Arrow form of this schema exactly (types, order, nullability), so both forms
are defined here once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["SCHEMA_DDL", "spark_schema", "arrow_schema", "check_user_schema", "COLUMNS"]

#: Column names, in order.
COLUMNS = ("scope_id", "ledger_id", "entry_id", "payload", "ledger_ctime", "custom_metadata")

#: The schema as DDL (what ``DataSource.schema()`` returns).
SCHEMA_DDL = (
    "scope_id BIGINT NOT NULL, ledger_id BIGINT NOT NULL, entry_id BIGINT NOT NULL, "
    "payload BINARY, ledger_ctime TIMESTAMP, custom_metadata MAP<STRING, BINARY>"
)


def spark_schema() -> "StructType":
    """The Spark ``StructType`` of every row this source reads."""
    from pyspark.sql.types import (
        BinaryType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("scope_id", LongType(), nullable=False),
            StructField("ledger_id", LongType(), nullable=False),
            StructField("entry_id", LongType(), nullable=False),
            StructField("payload", BinaryType(), nullable=True),
            StructField("ledger_ctime", TimestampType(), nullable=True),
            StructField("custom_metadata", MapType(StringType(), BinaryType(), valueContainsNull=True), nullable=True),
        ]
    )


def arrow_schema() -> "pa.Schema":
    """The Arrow schema Spark checks yielded record batches against (``to_arrow_schema(..., "UTC")``)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(), timezone="UTC")


def check_user_schema(schema: "StructType") -> None:
    """Reject a user-specified schema that is not ours, as Kafka does (the schema is fixed)."""
    from bkspark.errors import InvalidOptionError

    expected = spark_schema()
    if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in expected.fields]:
        raise InvalidOptionError(
            "[BOOKKEEPER_FIXED_SCHEMA] the bookkeeper source has a fixed schema and cannot be read with a custom one; "
            f"drop .schema(...) (the schema is: {SCHEMA_DDL})"
        )
