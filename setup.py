"""Only the compiled fast path lives here; every other setting is in pyproject.toml.

``optional=True``: a machine without a C compiler still installs bkspark, which then runs its pure-Python
path (bkspark/protocol/speedups.py, docs/architecture.md "Compiled fast path").
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("bkspark.protocol._speedups", ["bkspark/protocol/_speedups.c"], optional=True),
    ],
)
