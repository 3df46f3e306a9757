"""docs/shell.md, "Datasets": dataset discovery needs neither PySpark nor pyarrow (a client-only install has it)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_dataset_discovery_imports_neither_pyspark_nor_pyarrow() -> None:
    code = (
        "import json, sys\n"
        "import bkspark.shell.datasets, bkspark.shell.dataset_commands\n"
        "print(json.dumps([m in sys.modules for m in ('pyspark', 'pyarrow', 'numpy')]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == [False, False, False]
