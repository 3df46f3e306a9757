"""bkspark: Apache BookKeeper ledgers from Python and PySpark.

A pure-Python BookKeeper client (wire protocol v2 and v3, ZooKeeper metadata),
a standalone Python bookie, ensemble placement, and a PySpark data source
(``spark.read.format("bookkeeper")``).
"""

#: The one home of the version: pyproject.toml reads it from here (``[tool.setuptools.dynamic]``), ``bkspark
#: --version`` and ``bookie-server --version`` print it, CHANGELOG.md says what each version holds.
__version__ = "0.1.0"
