"""Zero-config registration: after a real (non-editable) ``pip install``, ``format("bookkeeper")`` just works.

PySpark registers the ``DefaultSource`` of every top-level ``pyspark_*`` module that ``pkgutil.iter_modules()``
finds on its Python workers' ``sys.path``. A development install (``pip install -e``) is served by an import
hook that ``iter_modules`` does not see, so this test builds bkspark as a wheel into a fresh virtual
environment (which borrows pyspark, pyarrow and kazoo from this one through a path entry), starts a fresh
SparkSession there, from a directory that holds no bkspark source, and reads a ledger without any
``spark.dataSource.register`` call. The other side: after a default editable install the lookup finds
nothing, and registering by hand reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from bkspark.client import BookKeeper
from tests.harness.python_bookie import PythonBookieCluster
from tests.harness.zookeeper import ZkRoot

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import bkspark, pyspark_bookkeeper
    from pyspark.sql import SparkSession

    uri, ledger = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rows = (spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("ledgers", ledger)
                .load().orderBy("entry_id").collect())
        try:
            spark.read.format("bookkeeper").load()
            missing = None
        except Exception as exc:
            missing = str(exc)
        print("RESULT " + json.dumps({
            "bkspark": bkspark.__file__,
            "pyspark_bookkeeper": pyspark_bookkeeper.__file__,
            "payloads": [bytes(r.payload).decode() for r in rows],
            "missing_option_error": missing,
        }))
    finally:
        spark.stop()
    """
)


def _fresh_venv(base: Path) -> tuple[Path, Path, Path]:
    """A copy of bkspark's sources and an empty venv that borrows pyspark, pyarrow and kazoo from this one:
    ``(source, python, site-packages)``."""
    source = base / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in ("bkspark", "bookie_server", "pyspark_bookkeeper"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, source / name)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip())
    # Third-party packages (pyspark, pyarrow, kazoo, pip, setuptools...) come from this venv; a path entry in a
    # .pth file does not run that directory's own .pth files, so this venv's editable-install entry stays out.
    (site / "zz-borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return source, python, site


def _pip_install(python: Path, *args: str, cwd: Path) -> None:
    """``pip install`` offline with no dependencies and no build isolation (the build tools are borrowed)."""
    build = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", *args],
        capture_output=True, text=True, timeout=600, cwd=cwd,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]


def _install_into_fresh_venv(base: Path) -> Path:
    """A venv with bkspark installed from a wheel, other packages borrowed from this venv; its python."""
    source, python, site = _fresh_venv(base)
    _pip_install(Path(sys.executable), "--target", str(site), str(source), cwd=base)
    assert (site / "pyspark_bookkeeper" / "__init__.py").is_file()
    return python


def _ledger_of_five(cluster: PythonBookieCluster) -> int:
    """A closed ledger of the entries ``auto-0`` .. ``auto-4`` on ``cluster``; its id."""
    with BookKeeper(cluster.metadata_service_uri) as bk:
        lh = bk.create_ledger(ensemble_size=1, write_quorum_size=1, ack_quorum_size=1)
        for i in range(5):
            lh.append(f"auto-{i}".encode())
        lh.close()
        return lh.ledger_id


def _run_elsewhere(python: Path, script: str, base: Path, *args: str) -> dict:  # type: ignore[type-arg]
    """Run ``script`` with ``python`` (also Spark's workers' interpreter) from a directory that holds no bkspark
    source and with no PYTHONPATH; its ``RESULT`` line as JSON."""
    workdir = base / "elsewhere"
    workdir.mkdir()
    (workdir / "check.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python))
    proc = subprocess.run(
        [str(python), "check.py", *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=480
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(lines[0][len("RESULT "):])  # type: ignore[no-any-return]


@pytest.mark.spark_matrix
def test_a_fresh_session_finds_format_bookkeeper_without_register(zk_root: ZkRoot, tmp_path: Path) -> None:
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path / "bookies", bookies=1) as cluster:
        ledger_id = _ledger_of_five(cluster)
        python = _install_into_fresh_venv(tmp_path / "install")
        result = _run_elsewhere(python, SCRIPT, tmp_path, cluster.metadata_service_uri, str(ledger_id))
    site = str(python.parent.parent)
    assert result["bkspark"].startswith(site) and result["pyspark_bookkeeper"].startswith(site)
    assert result["payloads"] == [f"auto-{i}" for i in range(5)]
    assert "[BOOKKEEPER_MISSING_OPTION] option 'metadataServiceUri' is required" in result["missing_option_error"]


#: Run in a session where Spark's lookup cannot see bkspark: ``format("bookkeeper")`` fails, then the same read
#: succeeds once the source is registered by hand (docs/connector.md, the first section).
SCRIPT_BY_HAND = textwrap.dedent(
    """
    import json, sys
    import bkspark
    from pyspark.sql import SparkSession

    uri, ledger = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    def read():
        return (spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("ledgers", ledger)
                .load().orderBy("entry_id").collect())

    try:
        try:
            read()
            lookup = None
        except Exception as exc:
            lookup = str(exc)
        from bkspark.datasource import BookKeeperDataSource
        spark.dataSource.register(BookKeeperDataSource)
        print("RESULT " + json.dumps({
            "bkspark": bkspark.__file__,
            "lookup_error": lookup,
            "payloads": [bytes(r.payload).decode() for r in read()],
        }))
    finally:
        spark.stop()
    """
)


def test_a_default_editable_install_is_not_found_by_the_lookup_and_register_by_hand_reads(
    zk_root: ZkRoot, tmp_path: Path
) -> None:
    """docs/connector.md: setuptools' default editable mode serves ``pyspark_bookkeeper`` through an import hook
    that Spark's lookup (``pkgutil.iter_modules``) does not see, so ``format("bookkeeper")`` is not found; the
    documented ``spark.dataSource.register(BookKeeperDataSource)`` then reads (the workers import it through the
    same hook)."""
    with PythonBookieCluster(zk_root.metadata_service_uri, tmp_path / "bookies", bookies=1) as cluster:
        ledger_id = _ledger_of_five(cluster)
        source, python, site = _fresh_venv(tmp_path / "install")
        _pip_install(python, "-e", str(source), cwd=tmp_path / "install")
        assert not (site / "pyspark_bookkeeper").exists()
        assert list(site.glob("__editable__*finder.py")), sorted(p.name for p in site.iterdir())  # the import hook
        result = _run_elsewhere(python, SCRIPT_BY_HAND, tmp_path, cluster.metadata_service_uri, str(ledger_id))
    assert result["bkspark"].startswith(str(source))
    assert result["lookup_error"] is not None and "DATA_SOURCE_NOT_FOUND" in result["lookup_error"]
    assert result["payloads"] == [f"auto-{i}" for i in range(5)]
