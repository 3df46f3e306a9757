"""A user's test of their pipeline against a BookKeeper cluster in containers."""

from pipeline import publish_orders, revenue_per_store


def test_revenue_per_store_from_orders_stored_in_bookkeeper(spark, bookkeeper_cluster):
    orders = spark.createDataFrame(
        [(i, ["north", "south", "east"][i % 3], 100 + i) for i in range(300)],
        "order_id BIGINT, store STRING, amount_cents BIGINT",
    )
    publish_orders(orders, bookkeeper_cluster.metadata_service_uri, "orders")
    assert revenue_per_store(spark, bookkeeper_cluster.metadata_service_uri, "orders") == {
        store: sum(100 + i for i in range(300) if ["north", "south", "east"][i % 3] == store)
        for store in ("north", "south", "east")
    }
