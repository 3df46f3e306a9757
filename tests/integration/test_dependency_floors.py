"""The oldest dependency set pyproject.toml promises, tested: ``pip install bkspark`` without PySpark.

A virtual env with the lowest Python the package allows and every base
dependency at its floor (``name>=X`` installed as ``name==X``), plus the
package itself from this checkout.  Without the ``spark`` extra nothing pulls
PySpark in; the client, the bookie and the shell work (unit tests of the
codecs, storage and bookie, and a real ZooKeeper + Python bookie test);
the connector's modules import without PySpark and say which extra is
missing.  The env is built once per set of floors and kept in
``$BKSPARK_CACHE/floor-venv`` (the first build needs the package index);
later runs only run the tests.  The connector's floor of pyarrow runs the
connector's unit tests.  PySpark's floor is the oldest release ``make
spark-matrix`` runs the connector's fast subset on (Makefile ``SPARK_MATRIX``,
one release per minor line below the newest; docs/connector.md, "Spark
versions"): checked here to stay so.  The newest set is what ``make venv``
resolves, and the whole suite runs on it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from tests.harness.java_bookkeeper import cache_dir

pytestmark = [pytest.mark.integration, pytest.mark.floors]

REPO = Path(__file__).resolve().parents[2]
#: Unit tests that exercise each floor: protobuf (v3, Java vectors), crc32c (digests), lmdb (storage),
#: prometheus_client (the bookie app), and the shell's parsing.
FLOOR_UNIT_TESTS = [
    "tests/unit/test_v3.py",
    "tests/unit/test_java_vectors.py",
    "tests/unit/test_digest.py",
    "tests/unit/test_bookie_storage.py",
    "tests/unit/test_bookie_app.py",
]
#: A real ZooKeeper, a real Python bookie and the client, with kazoo at its floor.
FLOOR_INTEGRATION_TESTS = [
    "tests/integration/test_shell_cluster_admin.py::test_init_format_and_nuke_a_cluster_and_format_its_bookie"
]
#: What `pip install` needs of the checkout to build the package.
PACKAGE_FILES = ("pyproject.toml", "README.md", "bkspark", "bookie_server", "pyspark_bookkeeper")
#: Test tools at their floors too (the ``test`` extra's own pins, without the Spark ones).
TEST_TOOLS = ("pytest", "pytest-timeout", "pytest-rerunfailures", "hypothesis")


def _pyproject() -> dict:  # type: ignore[type-arg]
    with open(REPO / "pyproject.toml", "rb") as handle:
        return tomllib.load(handle)


def floor_pins(project: dict) -> list[str]:  # type: ignore[type-arg]
    """``name==X`` for every base dependency and test tool declared ``name>=X``."""
    test_extra = project["optional-dependencies"]["test"]
    wanted = list(project["dependencies"]) + [r for r in test_extra if re.split(r"[<>=\[]", r)[0] in TEST_TOOLS]
    pins = []
    for requirement in wanted:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)\s*(,.*)?", requirement)
        assert match, f"pyproject.toml: {requirement!r} has no '>=' floor to test"
        pins.append(f"{match.group(1)}=={match.group(2)}")
    return pins


def floor_python(project: dict) -> str:  # type: ignore[type-arg]
    """An interpreter of the lowest Python version the package allows."""
    lowest = re.fullmatch(r">=\s*(\d+)\.(\d+)", project["requires-python"])
    assert lowest, f"requires-python {project['requires-python']!r} is not '>=X.Y'"
    major, minor = int(lowest.group(1)), int(lowest.group(2))
    if sys.version_info[:2] == (major, minor):
        return getattr(sys, "_base_executable", sys.executable)
    found = shutil.which(f"python{major}.{minor}")
    if found is None:
        pytest.fail(f"no python{major}.{minor} on PATH to test the declared floor requires-python >= {major}.{minor}")
    return found


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, **kwargs)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def floor_env() -> Path:
    """The floor venv (built on first use, under a lock: sessions share the cache)."""
    project = _pyproject()["project"]
    python = floor_python(project)
    pins = floor_pins(project)
    version = _run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"]).stdout.strip()
    key = hashlib.sha256(json.dumps([version, pins, project["dependencies"]]).encode()).hexdigest()[:16]
    base = cache_dir() / "floor-venv"
    env = base / key
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (env / ".ok").exists():
            shutil.rmtree(env, ignore_errors=True)
            _run([python, "-m", "venv", str(env)]).check_returncode()
            pip = [str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            done = _run([*pip, *pins])
            assert done.returncode == 0, f"cannot install the floors {pins}: {done.stderr[-3000:]}"
            # The package itself, its dependencies resolved by pip: the floors satisfy them, nothing else comes.
            # Built from a copy: setuptools writes build/ and *.egg-info next to the sources it builds.
            source = env / "source"
            source.mkdir()
            for name in PACKAGE_FILES:
                if (REPO / name).is_dir():
                    shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy2(REPO / name, source / name)
            done = _run([*pip, str(source)], cwd=str(env))
            assert done.returncode == 0, f"pip install bkspark failed: {done.stderr[-3000:]}"
            shutil.rmtree(source)
            (env / ".ok").write_text("\n".join(pins) + "\n")
    return env


def _floor(env: Path, *argv: str, program: str = "python") -> subprocess.CompletedProcess[str]:
    """Run a program of the floor venv on this checkout's code (the installed copy is from the env's build)."""
    environ = {**os.environ, "PYTHONPATH": str(REPO), "BKSPARK_CACHE": str(cache_dir())}
    environ.pop("VIRTUAL_ENV", None)
    return _run([str(env / "bin" / program), *argv], cwd=str(REPO), env=environ)


def test_the_base_install_has_no_pyspark_and_the_connector_says_which_extra(floor_env: Path) -> None:
    check = """
import importlib.util, json
import bkspark.client, bkspark.shell.commands, bookie_server.app, bkspark.datasource, pyspark_bookkeeper
out = {"pyspark": importlib.util.find_spec("pyspark") is not None,
       "pyarrow": importlib.util.find_spec("pyarrow") is not None,
       "default_source": hasattr(pyspark_bookkeeper, "DefaultSource")}
try:
    from bkspark.datasource import BookKeeperDataSource
except ImportError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""
    result = _floor(floor_env, "-c", check)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["pyspark"] is False and seen["pyarrow"] is False and seen["default_source"] is False
    assert "pip install 'bkspark[spark]'" in seen["error"]
    script = _floor(floor_env, "shell", "--help", program="bkspark")  # the console script pip installed
    assert script.returncode == 0 and "initnewcluster" in script.stdout, script.stderr


#: The connector's unit tests (Arrow batches, options, clients), run with pyarrow at its floor.
CONNECTOR_UNIT_TESTS = [
    "tests/unit/test_connector_runtime.py",
    "tests/unit/test_connector_options.py",
    "tests/unit/test_connector_clients.py",
    "tests/unit/test_connector_arrow.py",
]


def spark_floor(project: dict, name: str) -> str:  # type: ignore[type-arg]
    """The floor version of ``name`` in the ``spark`` extra."""
    for requirement in project["optional-dependencies"]["spark"]:
        match = re.fullmatch(rf"\s*{re.escape(name)}\s*>=\s*([0-9][0-9A-Za-z.]*)\s*(,.*)?", requirement)
        if match:
            return match.group(1)
    raise AssertionError(f"pyproject.toml: no '{name}>=' floor in the spark extra")


def spark_matrix() -> list[str]:
    """The PySpark releases of the Makefile's ``SPARK_MATRIX`` (``make spark-matrix``), in its order."""
    match = re.search(r"^SPARK_MATRIX \?= *(.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert match, "Makefile: no 'SPARK_MATRIX ?=' line"
    return match.group(1).split()


def test_pyspark_floor_is_the_oldest_release_the_spark_matrix_runs_and_every_older_minor_line_is_in_it() -> None:
    from importlib.metadata import version

    floor = spark_floor(_pyproject()["project"], "pyspark")
    matrix = spark_matrix()
    assert matrix and matrix[0] == floor, f"pyproject.toml's pyspark>={floor}, but `make spark-matrix` runs {matrix}"
    newest = tuple(int(p) for p in version("pyspark").split(".")[:2])  # the whole suite runs on it (`make venv`)
    minors = [tuple(int(p) for p in release.split(".")[:2]) for release in matrix]
    assert minors == [(newest[0], m) for m in range(minors[0][1], newest[1])], (
        f"`make spark-matrix` runs {matrix}: one release of each minor line from {floor} up to, not including, the "
        f"newest ({version('pyspark')}, `make test`'s own)"
    )


def test_make_spark_matrix_collects_every_file_with_a_spark_matrix_test() -> None:
    """The Makefile's ``SPARK_MATRIX_TESTS`` (every older release) and ``SPARK_MATRIX_FLOOR_TESTS`` (the floor
    release only) name the files it collects (others may import what an older PySpark lacks): a test marked
    ``spark_matrix`` in any other file would never run on the older releases."""
    makefile = (REPO / "Makefile").read_text()
    match = re.search(r"^SPARK_MATRIX_TESTS := *(.+)$", makefile, re.MULTILINE)
    assert match, "Makefile: no 'SPARK_MATRIX_TESTS :=' line"
    floor_only = re.search(r"^SPARK_MATRIX_FLOOR_TESTS := *(.+)$", makefile, re.MULTILINE)
    listed = match.group(1).split() + (floor_only.group(1).split() if floor_only else [])
    marked = sorted(
        str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("test_*.py")
        if "mark.spark_matrix" in path.read_text() and path.name != Path(__file__).name
    )
    assert marked and sorted(listed) == marked


def test_the_connector_passes_with_pyarrow_at_its_floor() -> None:
    """pyarrow at the spark extra's floor, over this env's PySpark."""
    floor = spark_floor(_pyproject()["project"], "pyarrow")
    base = cache_dir() / "floor-venv"
    target = base / f"pyarrow-{floor}"
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".ok").exists():
            shutil.rmtree(target, ignore_errors=True)
            done = _run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                         "--target", str(target), f"pyarrow=={floor}"])
            assert done.returncode == 0, f"cannot install pyarrow=={floor}: {done.stderr[-3000:]}"
            (target / ".ok").write_text(floor + "\n")
    environ = {**os.environ, "PYTHONPATH": f"{target}{os.pathsep}{REPO}", "BKSPARK_CACHE": str(cache_dir())}
    seen = _run([sys.executable, "-c", "import pyarrow; print(pyarrow.__version__)"], env=environ)
    assert seen.stdout.strip().split(".")[: len(floor.split("."))] == floor.split("."), seen.stderr
    result = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *CONNECTOR_UNIT_TESTS],
                  cwd=str(REPO), env=environ)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def test_client_bookie_and_shell_tests_pass_on_the_floors(floor_env: Path) -> None:
    result = _floor(
        floor_env, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *FLOOR_UNIT_TESTS, *FLOOR_INTEGRATION_TESTS
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert re.search(r"\d+ passed", result.stdout), result.stdout[-2000:]
