"""The PySpark data source (``spark.read.format("bookkeeper")``); see :mod:`bkspark.datasource.source`.

PySpark is an extra (``pip install bkspark[spark]``): importing this package
never fails without it, and ``BookKeeperDataSource`` is loaded on first use,
with an ImportError that names the extra when PySpark is missing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BookKeeperDataSource"]

#: What a user without the connector's dependencies is told.
MISSING_SPARK_HINT = "the Spark connector needs PySpark and pyarrow: pip install 'bkspark[spark]'"


def __getattr__(name: str) -> Any:
    if name != "BookKeeperDataSource":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from bkspark.datasource.source import BookKeeperDataSource
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("pyspark", "pyarrow", "py4j", "pandas", "numpy"):
            raise ImportError(f"{MISSING_SPARK_HINT} ({exc})", name=exc.name) from exc
        raise
    return BookKeeperDataSource
