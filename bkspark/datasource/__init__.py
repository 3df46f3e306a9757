"""The PySpark data source (``spark.read.format("bookkeeper")``); see :mod:`bkspark.datasource.source`."""

from bkspark.datasource.source import BookKeeperDataSource

__all__ = ["BookKeeperDataSource"]
