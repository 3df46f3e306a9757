"""Auto-registration of the ``bookkeeper`` Spark data source.

PySpark 4 imports every top-level ``pyspark_*`` module it finds and registers
its ``DefaultSource``.  One module that fails to import disables that lookup
for every data source, so this one never raises: if bkspark cannot be
imported, it logs why and exposes no ``DefaultSource``.
"""

import logging as _logging

__all__ = ["BookKeeperDataSource", "DefaultSource"]

try:
    from bkspark.datasource.source import BookKeeperDataSource

    DefaultSource = BookKeeperDataSource
except Exception as _error:  # noqa: BLE001 - must never break Spark's lookup of all sources
    __all__ = []
    _logging.getLogger(__name__).warning(
        "bkspark's Spark data source is unavailable (%s); register it by hand with "
        "spark.dataSource.register(bkspark.datasource.BookKeeperDataSource) once the import works",
        _error,
    )
