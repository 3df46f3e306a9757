"""A user's Spark pipeline on BookKeeper: order events in, revenue per store out (examples/user_project).

It is what a team would test with bkspark.testing's fixture in its own CI (docs/testing.md).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ORDER_SCHEMA = "order_id BIGINT, store STRING, amount_cents BIGINT"


def publish_orders(orders: DataFrame, metadata_service_uri: str, dataset: str) -> None:
    """Write order rows as JSON entries of the BookKeeper dataset ``dataset`` (replacing it)."""
    (orders.select(F.to_json(F.struct(*orders.columns)).alias("payload"))
     .write.format("bookkeeper")
     .option("metadataServiceUri", metadata_service_uri)
     .option("dataset", dataset)
     .option("ensembleSize", "3").option("writeQuorumSize", "2").option("ackQuorumSize", "2")
     .mode("overwrite")
     .save())


def revenue_per_store(spark: SparkSession, metadata_service_uri: str, dataset: str) -> dict[str, int]:
    """Read the dataset back and sum ``amount_cents`` per store."""
    orders = (spark.read.format("bookkeeper")
              .option("metadataServiceUri", metadata_service_uri)
              .option("dataset", dataset)
              .load()
              .select(F.from_json(F.col("payload").cast("string"), ORDER_SCHEMA).alias("o"))
              .select("o.*"))
    totals = orders.groupBy("store").agg(F.sum("amount_cents").alias("cents")).collect()
    return {row.store: row.cents for row in totals}
