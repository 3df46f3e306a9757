"""Only the compiled fast paths live here (the protocol's, the Pulsar batch split's and the bookie's); every other setting is in pyproject.toml.

``optional=True``: a machine without a C compiler still installs bkspark, which then runs its pure-Python
path (bkspark/protocol/speedups.py, bookie_server/storage.py; docs/architecture.md "Compiled fast path").
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "bkspark.protocol._speedups",
            ["bkspark/protocol/_speedups.c"],
            depends=["bkspark/protocol/_bytes.h"],
            optional=True,
        ),
        Extension("bkspark.pulsar._batch", ["bkspark/pulsar/_batch.c"], optional=True),
        Extension(
            "bookie_server._speedups",
            ["bookie_server/_speedups.c"],
            include_dirs=["bkspark/protocol"],  # _bytes.h, the CRC32C and byte helpers both modules share
            depends=["bkspark/protocol/_bytes.h"],
            optional=True,
        ),
    ],
)
