"""Free ports split between test runs that share the machine (bkspark.devcluster.ports, docs/contracts.md
"Test harness"): with BKSPARK_PORT_SHARD=i/n a process and its children hand out only ports that are i modulo n,
and every port handed out is claimed machine-wide, so that two runs at once do not hand out one port."""

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


# -- reservations across processes (two runs on one machine) --------------------------------------------------------

DRAW = (
    "import sys, time\n"
    "from bkspark.devcluster.ports import free_port\n"
    "start = float(sys.argv[1])\n"
    "time.sleep(max(0.0, start - time.time()))\n"
    "print(*(free_port() for _ in range(400)))\n"
)


def test_two_processes_drawing_at_once_never_hand_out_one_port(tmp_path: Path) -> None:
    """Two runs at once (no shard, or shards of one index): a port one process handed out is not handed out by the
    other while it is claimed.  400 draws each from 12,768 ports: without claims about 12 ports are shared."""
    env = dict(os.environ, **{ports.RESERVATION_DIR_ENV: str(tmp_path / "claims")})
    env.pop(PORT_SHARD_ENV, None)
    start = f"{__import__('time').time() + 1.5:.3f}"
    procs = [subprocess.Popen([sys.executable, "-c", DRAW, start], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    drawn = [set(map(int, p.communicate(timeout=120)[0].split())) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(drawn[0]) == len(drawn[1]) == 400 and not drawn[0] & drawn[1]


@pytest.fixture
def claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A reservation directory of this test's own, claiming on."""
    monkeypatch.setenv(ports.RESERVATION_DIR_ENV, str(tmp_path / "claims"))
    monkeypatch.setattr(ports, "_reservations_off", False)
    return tmp_path / "claims"


def _claimed_by(claims: Path, port: int, pid: int, age: float = 0.0) -> None:
    claims.mkdir(exist_ok=True)
    (claims / str(port)).write_text(f"{pid} 0\n")
    if age:
        then = __import__("time").time() - age
        os.utime(claims / str(port), (then, then))


def test_a_live_claim_is_respected_and_an_expired_or_orphaned_one_taken_over(claims: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _claimed_by(claims, 25000, other.pid)
        assert not ports._claim(25000) and (claims / "25000").exists()  # a live process claimed it a moment ago
        _claimed_by(claims, 25001, other.pid, age=ports.RESERVATION_SECONDS + 5)
        assert not ports._claim(25001)  # expired (its server has long bound it or given up): removed, skipped
    finally:
        other.kill()
        other.wait()
    _claimed_by(claims, 25002, other.pid)
    assert not ports._claim(25002)  # its claimer has exited: removed, skipped
    (claims / "25003").write_text("garbage")  # not a claim this module wrote
    assert not ports._claim(25003)
    for port in (25001, 25002, 25003):  # the next draw of each takes it
        assert ports._claim(port) and (claims / str(port)).read_text().split()[0] == str(os.getpid())
    assert not [name for name in os.listdir(claims) if name.startswith(".")]  # no draft left behind


def test_a_reservation_directory_that_cannot_be_used_falls_back_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(ports.RESERVATION_DIR_ENV, str(blocker / "claims"))
    monkeypatch.setattr(ports, "_reservations_off", False)
    with caplog.at_level("WARNING", logger=ports.__name__):
        handed = [free_port() for _ in range(5)]
    assert len(set(handed)) == 5
    assert [r.getMessage() for r in caplog.records if "cannot claim ports" in r.getMessage()] != []
    assert len(caplog.records) == 1


def test_the_default_reservation_directory_is_the_users_own_under_the_temporary_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tempfile

    monkeypatch.delenv(ports.RESERVATION_DIR_ENV, raising=False)
    assert ports.reservation_dir() == Path(tempfile.gettempdir()) / f"bkspark-ports-{os.getuid()}"
