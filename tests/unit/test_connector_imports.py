"""What a planner process imports for ``load()``: ``schema()`` needs the option parser and the schema, not the
client (docs/connector.md, "Process model").  Each check runs in a fresh interpreter, since this test session has
long imported everything."""

from __future__ import annotations

import subprocess
import sys

#: The client's modules that a ``schema()`` call must not pull in.
CLIENT_MODULES = ("bkspark.client.aio", "bkspark.client.bookkeeper", "bkspark.client.connection", "kazoo")


def imported_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout
    return set(out.split())


def test_schema_at_load_imports_no_client() -> None:
    modules = imported_after(
        "from bkspark.datasource.source import BookKeeperDataSource\n"
        "ddl = BookKeeperDataSource({'metadataServiceUri': 'zk+hierarchical://127.0.0.1:1/ledgers',"
        " 'dataset': 'd', 'includeCustomMetadata': 'false'}).schema()\n"
        "assert 'custom_metadata' not in ddl and 'payload' in ddl, ddl"
    )
    assert "bkspark.datasource.options" in modules and "bkspark.datasource.schema" in modules
    assert not [m for m in CLIENT_MODULES if m in modules]


def test_the_client_package_still_gives_its_names() -> None:
    """``from bkspark.client import BookKeeper`` (and the rest of ``__all__``) imports what it names on first use."""
    modules = imported_after(
        "import bkspark.client as c\n"
        "assert 'bkspark.client.bookkeeper' not in __import__('sys').modules\n"
        "from bkspark.client import *\n"
        "assert [getattr(c, n).__name__ for n in c.__all__] == c.__all__\n"
        "try:\n    c.NoSuchName\nexcept AttributeError:\n    pass\nelse:\n    raise AssertionError('no error')"
    )
    assert "bkspark.client.bookkeeper" in modules and "bkspark.client.aio" in modules


def test_the_auto_registration_module_imports_nothing_heavy() -> None:
    """docs/connector.md: PySpark imports every ``pyspark_*`` module on the workers' path; ours pulls in no client."""
    modules = imported_after("import pyspark_bookkeeper\nassert pyspark_bookkeeper.DefaultSource.name() == 'bookkeeper'")
    assert "bkspark.datasource.source" in modules
    assert not [m for m in CLIENT_MODULES if m in modules]


def test_the_auto_registration_module_never_raises() -> None:
    """One ``pyspark_*`` module that fails to import disables Spark's lookup of every source: when bkspark cannot be
    imported, ours logs why and exposes no ``DefaultSource`` instead of raising."""
    result = subprocess.run(
        [sys.executable, "-c",
         "import sys\nsys.modules['bkspark.datasource.source'] = None  # the import of bkspark fails\n"
         "import pyspark_bookkeeper\nassert not hasattr(pyspark_bookkeeper, 'DefaultSource')\n"
         "assert pyspark_bookkeeper.__all__ == []\nprint('imported')"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0 and result.stdout.strip() == "imported", result.stderr
    assert "register it by hand" in result.stderr  # the warning says what to do
