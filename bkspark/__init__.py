"""bkspark: Apache BookKeeper ledgers from Python and PySpark.

A pure-Python BookKeeper client (wire protocol v2 and v3, ZooKeeper metadata),
a standalone Python bookie, ensemble placement, and a PySpark data source
(``spark.read.format("bookkeeper")``).
"""

__version__ = "0.1.0"
