"""The examples run, so they cannot rot: the quickstart notebook (through nbclient) and ``make demo``'s script.

The notebook takes its cluster from ``BKSPARK_METADATA_SERVICE_URI`` (here: ZooKeeper and three Python bookies
from the harness); the demo starts its own, as ``make demo`` does (``bkspark.devcluster.LocalCluster``). Both
take a small row count from an environment variable. ``examples/quickstart.ipynb`` must hold
exactly the cells of ``examples/quickstart.py``; regenerate it after editing the script with

    .venv/bin/python tests/integration/test_examples.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "quickstart.py"
NOTEBOOK = REPO / "examples" / "quickstart.ipynb"
DEMO = REPO / "examples" / "demo.py"

_MARKER = re.compile(r"^# %%(?: \[(markdown)\])?\s*$")


def script_cells(text: str) -> list[tuple[str, str]]:
    """``(cell_type, source)`` for every ``# %%`` cell of a percent-format script."""
    cells: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        match = _MARKER.match(line)
        if match:
            cells.append(("markdown" if match.group(1) else "code", []))
        elif cells:
            kind, lines = cells[-1]
            if kind == "markdown":
                line = line[2:] if line.startswith("# ") else line.lstrip("#")
            lines.append(line)
    return [(kind, "\n".join(lines).strip("\n")) for kind, lines in cells]


def build_notebook(text: str):  # type: ignore[no-untyped-def]
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for number, (kind, source) in enumerate(script_cells(text)):
        new = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        nb.cells.append(new(source, id=f"cell-{number}"))  # stable ids: regenerating changes nothing
    return nb


def notebook_cells(nb) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(cell.cell_type, cell.source) for cell in nb.cells]


def test_the_notebook_holds_the_cells_of_the_script() -> None:
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert notebook_cells(nb) == script_cells(SCRIPT.read_text()), (
        "examples/quickstart.ipynb differs from examples/quickstart.py: run "
        ".venv/bin/python tests/integration/test_examples.py"
    )
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code")


@pytest.fixture(scope="module")
def cluster_uri(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.harness.python_bookie import PythonBookieCluster
    from tests.harness.zookeeper import init_new_cluster

    zk = zookeeper.client()
    try:
        init_new_cluster(zk, "/bk-examples")
    finally:
        zk.stop()
        zk.close()
    uri = f"zk+hierarchical://{zookeeper.connect_string}/bk-examples"
    with PythonBookieCluster(uri, tmp_path_factory.mktemp("example-bookies"), bookies=3):
        yield uri


@pytest.mark.integration
def test_quickstart_notebook_runs_top_to_bottom(cluster_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("BKSPARK_METADATA_SERVICE_URI", cluster_uri)
    monkeypatch.setenv("BKSPARK_QUICKSTART_ROWS", "2000")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel runs from the repository root: a development install (pip install -e) is invisible to
    # Spark's lookup of pyspark_* modules, which then finds pyspark_bookkeeper through the workers' working
    # directory (test_connector_autoregister.py covers a real install).
    client = NotebookClient(nb, kernel_name="python3", timeout=480, resources={"metadata": {"path": str(REPO)}})
    client.execute()
    outputs = "\n".join(
        out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
    )
    assert "2000 entries in 4 ledgers" in outputs
    assert "40 entries: the first 10 of each ledger" in outputs
    assert "bkspark.dataset" in outputs


@pytest.mark.integration
def test_demo_script_starts_a_cluster_writes_reads_back_and_stops_it() -> None:
    """What ``make demo`` runs (with 3,000 rows): its own ZooKeeper and three bookies (LocalCluster)."""
    env = {k: v for k, v in os.environ.items() if k != "BKSPARK_METADATA_SERVICE_URI"}
    env.update(BKSPARK_DEMO_ROWS="3000", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, str(DEMO)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=480)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "starting ZooKeeper and 3 bookies" in proc.stdout
    # Twice: one row per entry, then rows packed into entries (docs/connector.md, "Rows per entry").
    assert proc.stdout.count("OK: 3,000 rows read back, payload checksum") == 2
    assert "-- one row per entry" in proc.stdout and "-- rows packed into entries of up to 16 KiB" in proc.stdout
    assert len(re.findall(r"wrote 3,000 rows of 100 bytes in [\d.]+ s: [\d,]+ rows/s into 4 ledgers", proc.stdout)) == 2
    assert len(re.findall(r"read  3,000 rows in [\d.]+ s: [\d,]+ rows/s", proc.stdout)) == 2


if __name__ == "__main__":
    import nbformat

    nbformat.write(build_notebook(SCRIPT.read_text()), NOTEBOOK)
    print(f"wrote {NOTEBOOK.relative_to(REPO)} from {SCRIPT.relative_to(REPO)}")
