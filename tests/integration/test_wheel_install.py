"""A real install: the wheel `make dist` builds, installed into a clean venv, used with no checkout on ``sys.path``.

The sdist and the wheel are built as ``make dist`` builds them (``python -m build``: the wheel from the sdist, in
an isolated build env) from a copy of the package's files, then the wheel goes into a venv of its own with the
``spark`` extra.  Every program here runs that venv's interpreter or console scripts from a temp directory, with
``PYTHONPATH`` unset, so nothing of this checkout can be imported: a client round trip against real ZooKeeper
and bookies, ``bookie-server --help``, ``bkspark shell`` against the cluster, and a Spark write and read with no
``register()`` call (the data source found through the installed ``pyspark_bookkeeper``).  The sdist is also
installed with ``CC=/bin/false`` (no working compiler): it installs, and the pure-Python path is chosen.

Kept in ``$BKSPARK_CACHE/wheel-venv``: the venv with its dependencies, keyed by the Python version and
pyproject.toml's dependency lists (built once; the first build needs the package index), and the bkspark
install in it, rebuilt only when the package's files change.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.java_bookkeeper import cache_dir
from tests.harness.python_bookie import PythonBookieCluster
from tests.integration.test_connector_standalone import py_cluster  # noqa: F401 - three Python bookies, own root

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[2]
#: What the sdist is built from (MANIFEST.in says what of it goes in).
PACKAGE_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "CHANGELOG.md", "bkspark",
                 "bookie_server", "pyspark_bookkeeper")


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=1800, **kwargs)  # type: ignore[call-overload]


def _version() -> str:
    from bkspark import __version__

    return __version__


def _files_key() -> str:
    """A hash of every file the package is built from (what decides whether the install is current)."""
    digest = hashlib.sha256()
    for name in PACKAGE_FILES:
        path = REPO / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            if "__pycache__" in f.parts or f.suffix in (".so", ".pyc"):
                continue
            digest.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_dist(out: Path) -> tuple[Path, Path]:
    """``python -m build`` (what ``make dist`` runs) on a copy of the package's files: (sdist, wheel)."""
    source = out / "source"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    for name in PACKAGE_FILES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy2(REPO / name, source / name)
    dist = out / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    done = _run([sys.executable, "-m", "build", "--outdir", str(dist), str(source)], cwd=str(out))
    assert done.returncode == 0, f"python -m build failed: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    shutil.rmtree(source)
    (sdist,) = dist.glob("bkspark-*.tar.gz")
    (wheel,) = dist.glob("bkspark-*.whl")
    return sdist, wheel


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a program of the installed venv: nothing of this checkout's on its path."""
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    environ.update(extra)
    return environ


class Installed:
    """The venv with the built wheel, and the sdist installed without a compiler (``nocc``)."""

    def __init__(self, venv: Path, nocc: Path, wheel_name: str, workdir: Path) -> None:
        self.venv, self.nocc, self.wheel_name, self.workdir = venv, nocc, wheel_name, workdir

    def run(self, program: str, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
        return _run([str(self.venv / "bin" / program), *argv], cwd=str(self.workdir), env=_clean_env(**env))

    def python(self, code: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.run("python", "-c", textwrap.dedent(code), **env)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    with open(REPO / "pyproject.toml", "rb") as handle:
        project = tomllib.load(handle)["project"]
    python = getattr(sys, "_base_executable", sys.executable)
    deps_key = hashlib.sha256(json.dumps(
        ["%d.%d.%d" % sys.version_info[:3], project["dependencies"], project["optional-dependencies"]["spark"]]
    ).encode()).hexdigest()[:16]
    base = cache_dir() / "wheel-venv"
    venv, nocc = base / deps_key, base / f"{deps_key}-nocc"
    base.mkdir(parents=True, exist_ok=True)
    files_key = _files_key()
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".deps-ok").exists():
            shutil.rmtree(venv, ignore_errors=True)
            _run([python, "-m", "venv", str(venv)]).check_returncode()
            (venv / ".deps-ok").unlink(missing_ok=True)
        stamp = venv / ".installed"
        if not stamp.exists() or json.loads(stamp.read_text())["files"] != files_key:
            build = base / "build"
            sdist, wheel = build_dist(build)
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            if not (venv / ".deps-ok").exists():  # the dependencies, once (from pip's cache after `make setup`)
                done = _run([*pip, f"{wheel}[spark]"], cwd=str(build))
                assert done.returncode == 0, f"pip install {wheel.name}[spark]: {done.stderr[-3000:]}"
                (venv / ".deps-ok").write_text(deps_key + "\n")
            done = _run([*pip, "--no-deps", "--force-reinstall", str(wheel)], cwd=str(build))
            assert done.returncode == 0, f"pip install {wheel.name}: {done.stderr[-3000:]}"
            # The sdist where no C compiler works: into a directory of its own, run by the venv's interpreter.
            shutil.rmtree(nocc, ignore_errors=True)
            done = _run([*pip, "--no-deps", "--no-cache-dir", "--target", str(nocc), str(sdist)], cwd=str(build),
                        env=_clean_env(CC="/bin/false", CXX="/bin/false", LDSHARED="/bin/false"))
            assert done.returncode == 0, f"pip install {sdist.name} with CC=/bin/false: {done.stderr[-3000:]}"
            stamp.write_text(json.dumps({"files": files_key, "wheel": wheel.name}) + "\n")
            shutil.rmtree(build / "dist", ignore_errors=True)
        wheel_name = json.loads(stamp.read_text())["wheel"]
    yield Installed(venv, nocc, wheel_name, tmp_path_factory.mktemp("wheel-install-cwd"))


@pytest.fixture(scope="module")
def uri(py_cluster: PythonBookieCluster) -> str:  # noqa: F811
    return py_cluster.metadata_service_uri


def test_the_wheel_is_what_it_says(installed: Installed) -> None:
    """The version from one home, the compiled fast paths inside, the typing markers, nothing from the checkout."""
    assert installed.wheel_name.startswith(f"bkspark-{_version()}-") and "-none-any" not in installed.wheel_name
    seen = installed.python("""
        import importlib.metadata, json, pathlib
        import bkspark, bookie_server, pyspark_bookkeeper
        from bkspark.protocol.speedups import speedups
        import bookie_server._speedups
        from bkspark.pulsar import columns
        print(json.dumps({
            "version": bkspark.__version__, "metadata": importlib.metadata.version("bkspark"),
            "files": [bkspark.__file__, bookie_server.__file__, pyspark_bookkeeper.__file__],
            "compiled": speedups is not None and speedups.__file__.endswith(".so")
                        and columns._batch is not None and columns._batch.__file__.endswith(".so"),
            "typed": [(pathlib.Path(m.__file__).parent / "py.typed").is_file() for m in (bkspark, bookie_server)],
        }))
    """)
    assert seen.returncode == 0, seen.stderr
    info = json.loads(seen.stdout)
    assert info["version"] == info["metadata"] == _version()
    assert all(f.startswith(f"{installed.venv}/lib/") for f in info["files"]), info["files"]  # not the checkout's
    assert info["compiled"] and info["typed"] == [True, True]
    for program in ("bkspark", "bookie-server"):
        shown = installed.run(program, "--version")
        assert shown.returncode == 0 and shown.stdout.strip() == f"{program} {_version()}", shown
    helped = installed.run("bookie-server", "--help")
    assert helped.returncode == 0 and "--metadataServiceUri" in helped.stdout, helped.stderr


def test_the_sdist_installs_without_a_compiler_and_runs_pure_python(installed: Installed) -> None:
    seen = installed.python(
        """
        import json, pathlib
        import bkspark
        from bkspark.protocol import speedups
        from bkspark.protocol.digest import Digester, DigestType
        from bkspark.protocol import v2
        built = sorted(str(p.name) for p in pathlib.Path(bkspark.__file__).parent.rglob("*.so"))
        d = Digester(DigestType.CRC32C, b"")
        entries = [d.package_entry(1, i, i - 1, 3 * (i + 1), b"abc") for i in range(3)]
        frame = v2.encode_batch_read_response(0, 1, 0, 7, entries)
        ok = [d.verify_entry(e, 1, None) for e in v2.decode_batch_read_response_entries(frame[4:])]
        print(json.dumps({"file": bkspark.__file__, "built": built, "compiled": speedups.speedups is not None,
                          "payloads": [bytes(v.payload).decode() for v in ok]}))
        """,
        PYTHONPATH=str(installed.nocc),
    )
    assert seen.returncode == 0, seen.stderr
    info = json.loads(seen.stdout)
    assert info["file"].startswith(str(installed.nocc)) and info["built"] == [] and info["compiled"] is False
    assert info["payloads"] == ["abc"] * 3


def test_a_client_round_trip_and_the_shell_from_the_install(installed: Installed, uri: str) -> None:
    seen = installed.python(f"""
        from bkspark.client import BookKeeper
        with BookKeeper({uri!r}) as bk:
            ledger = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2, password=b"pw")
            for i in range(10):
                ledger.append(b"entry %d" % i)
            ledger.close()
            read = bk.open_ledger(ledger.ledger_id, password=b"pw").read(0, 9)
            print(ledger.ledger_id, [e.payload.decode() for e in read] == ["entry %d" % i for i in range(10)])
    """)
    assert seen.returncode == 0, seen.stderr
    ledger_id, matched = seen.stdout.split()
    assert matched == "True"
    shell = installed.run("bkspark", "shell", "--metadata-service-uri", uri, "simpletest", "-e", "3", "-w", "2",
                          "-a", "2", "-n", "20")
    assert shell.returncode == 0, shell.stderr
    listed = installed.run("bkspark", "shell", "--metadata-service-uri", uri, "listledgers")
    assert listed.returncode == 0 and f"ledgerID: {ledger_id}" in listed.stdout.splitlines(), listed


def test_spark_writes_and_reads_with_no_register_call(installed: Installed, uri: str) -> None:
    python = str(installed.venv / "bin" / "python")
    seen = installed.python(
        f"""
        import json
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[2]").appName("bkspark-wheel")
                 .config("spark.ui.enabled", "false").getOrCreate())
        rows = spark.range(500).selectExpr("CAST(id AS STRING) AS payload")
        rows.write.format("bookkeeper").option("metadataServiceUri", {uri!r}).option("dataset", "wheel") \\
            .mode("append").save()
        back = spark.read.format("bookkeeper").option("metadataServiceUri", {uri!r}).load("wheel")
        payloads = sorted(int(r.payload) for r in back.select("payload").collect())

        def where(_):  # a Python worker's view: which bkspark it runs
            import bkspark, pyspark_bookkeeper
            yield bkspark.__file__ + " " + pyspark_bookkeeper.__file__
        workers = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
        print(json.dumps({{"ok": payloads == list(range(500)), "workers": workers}}))
        spark.stop()
        """,
        PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python,
    )
    assert seen.returncode == 0, seen.stderr[-5000:]
    info = json.loads(seen.stdout.strip().splitlines()[-1])
    assert info["ok"]
    site = f"{installed.venv}/lib/"
    assert all(w.startswith(site) and f" {site}" in w for w in info["workers"]), info["workers"]
