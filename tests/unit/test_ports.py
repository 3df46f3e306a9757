"""Free ports split between test runs that share the machine (bkspark.devcluster.ports, docs/contracts.md
"Test harness"): with BKSPARK_PORT_SHARD=i/n a process and its children hand out only ports that are i modulo n."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bkspark.devcluster import ports
from bkspark.devcluster.ports import PORT_SHARD_ENV, free_port, port_shard

REPO = Path(__file__).resolve().parents[2]


def test_without_a_shard_every_port_may_be_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORT_SHARD_ENV, raising=False)
    assert port_shard() == (0, 1)
    assert len({free_port() % 2 for _ in range(40)}) == 2  # both residues: 2**-39 odds of a false failure


@pytest.mark.parametrize("shard", ["0/2", "1/2", "2/3"])
def test_a_shard_hands_out_only_its_own_ports_and_never_one_twice(monkeypatch: pytest.MonkeyPatch, shard: str) -> None:
    monkeypatch.setenv(PORT_SHARD_ENV, shard)
    index, count = map(int, shard.split("/"))
    handed = [free_port() for _ in range(30)]
    assert all(port % count == index for port in handed) and len(set(handed)) == len(handed)


def test_a_subprocess_inherits_the_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_SHARD_ENV, "1/2")
    code = "from bkspark.devcluster.ports import free_port; print(*(free_port() for _ in range(20)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert all(int(port) % 2 == 1 for port in out.split())


@pytest.mark.parametrize("value", ["1", "2/2", "-1/2", "a/b", "0/0", "1/"])
def test_a_malformed_shard_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(PORT_SHARD_ENV, value)
    with pytest.raises(ValueError, match=PORT_SHARD_ENV):
        ports.free_port()


def test_pytest_xdist_workers_get_a_shard_each(tmp_path: Path) -> None:
    """tests/conftest.py gives each worker of `make test` (pytest-xdist) its shard: worker gw<i> of n gets i/n."""
    seen = tmp_path / "seen"
    (tmp_path / "test_shards.py").write_text(
        "import os, pytest\n"
        "@pytest.mark.parametrize('n', range(8))\n"
        "def test_record(n):\n"
        f"    with open({str(seen)!r}, 'a') as f:\n"
        f"        f.write(os.environ['PYTEST_XDIST_WORKER'] + ' ' + os.environ[{PORT_SHARD_ENV!r}] + '\\n')\n"
    )
    # As inherited from a worker of the outer run (PYTEST_XDIST_WORKER=gw<i> and its shard): the inner run's
    # controller is no worker, and its workers get shards of their own.
    env = dict(os.environ, PYTEST_XDIST_WORKER="gw1", PYTEST_XDIST_WORKER_COUNT="2", **{PORT_SHARD_ENV: "1/2"})
    env.pop("PYTEST_ADDOPTS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_shards.py")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    pairs = {tuple(line.split()) for line in seen.read_text().splitlines()}
    assert pairs <= {("gw0", "0/2"), ("gw1", "1/2")} and len(pairs) == 2, pairs
