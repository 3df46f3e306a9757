"""The real-server harness itself: ZooKeeper, formatted roots, Java bookies of every version, the Java shell."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.harness.java_bookkeeper import JavaBookieCluster, JavaClusterFactory, JavaTools
from tests.harness.ports import free_port, port_is_open
from tests.harness.process import HarnessError, ManagedProcess, live_processes
from tests.harness.zookeeper import HIERARCHICAL_LAYOUT, ZkRoot, ZooKeeperServer, four_letter_word, init_new_cluster

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is not running.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _java_pids_mentioning(marker: str) -> list[int]:
    """Pids of live java processes whose command line contains `marker`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if "java" in cmdline and marker in cmdline and _pid_running(int(entry.name)):
            pids.append(int(entry.name))
    return pids


# -- processes and ports -------------------------------------------------------------------------------------------


def test_free_ports_are_never_handed_out_twice() -> None:
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert not any(port_is_open(p) for p in ports[:5])


def test_managed_process_waits_for_port_and_terminates(tmp_path: Path) -> None:
    port = free_port()
    server = (
        "import socket, time\n"
        f"s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {port}))\n"
        "time.sleep(0.5); s.listen(); print('listening', flush=True); time.sleep(300)\n"
    )
    proc = ManagedProcess("pyserver", [sys.executable, "-c", server], log_dir=tmp_path).start()
    proc.wait_for_port(port, timeout=20)
    assert proc.is_alive and proc in live_processes()
    assert proc.terminate(timeout=5) is not None
    assert not proc.is_alive and proc.pid is not None and not _pid_running(proc.pid)
    assert "listening" in proc.stdout_path.read_text()


def test_managed_process_failure_carries_log_tail(tmp_path: Path) -> None:
    script = "import sys; print('about to fail'); sys.stderr.write('boom: no such config\\n'); sys.exit(3)"
    proc = ManagedProcess("failing", [sys.executable, "-c", script], log_dir=tmp_path).start()
    with pytest.raises(HarnessError) as info:
        proc.wait_for_port(free_port(), timeout=20)
    message = str(info.value)
    assert "exited with status 3" in message
    assert "boom: no such config" in message and "about to fail" in message


def test_processes_are_killed_when_the_interpreter_exits(tmp_path: Path) -> None:
    # A child interpreter starts a sleeper and exits without stopping it: the atexit safety net must kill it.
    script = (
        "import sys\n"
        "from tests.harness.process import ManagedProcess\n"
        f"p = ManagedProcess('sleeper', [sys.executable, '-c', 'import time; time.sleep(300)'], log_dir={str(tmp_path)!r})\n"
        "p.start(); print(p.pid, flush=True)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=repo)
    assert child.returncode == 0, child.stderr
    pid = int(child.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _pid_running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _pid_running(pid)


def test_kill_all_kills_what_is_left(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from tests.harness.process import ManagedProcess, kill_all, live_processes\n"
        "ps = [ManagedProcess(f's{i}', [sys.executable, '-c', 'import time; time.sleep(300)'],"
        f" log_dir={str(tmp_path)!r}).start() for i in range(2)]\n"
        "killed = kill_all()\n"
        "assert sorted(map(id, killed)) == sorted(map(id, ps)), killed\n"
        "assert live_processes() == []\n"
        "print(*[p.pid for p in ps], flush=True)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=repo)
    assert child.returncode == 0, child.stderr
    assert not any(_pid_running(int(pid)) for pid in child.stdout.split())


# -- ZooKeeper and roots -------------------------------------------------------------------------------------------


def test_zookeeper_answers_four_letter_words(zookeeper: ZooKeeperServer) -> None:
    assert four_letter_word(zookeeper.port, "ruok") == "imok"
    assert "Zookeeper version" in four_letter_word(zookeeper.port, "srvr")
    assert zookeeper.connect_string == f"127.0.0.1:{zookeeper.port}"


def test_zk_root_is_formatted(zk_root: ZkRoot) -> None:
    zk = zk_root.zk_client
    assert zk_root.path.startswith("/bk-test_zk_root_is_formatted-")
    assert zk_root.metadata_service_uri == f"zk+hierarchical://127.0.0.1:{zk_root.server.port}{zk_root.path}"
    assert sorted(zk.get_children(zk_root.path)) == ["INSTANCEID", "LAYOUT", "available"]
    assert zk.get_children(f"{zk_root.path}/available") == ["readonly"]
    assert zk.get(f"{zk_root.path}/LAYOUT")[0] == HIERARCHICAL_LAYOUT
    assert str(uuid.UUID(zk.get(f"{zk_root.path}/INSTANCEID")[0].decode())) == zk_root.instance_id


def test_zk_roots_are_unique(zk_root: ZkRoot) -> None:
    # A second root in the same test (as `java_cluster_factory(root=...)` callers do) gets its own path.
    other_path = zk_root.path + "-other"
    init_new_cluster(zk_root.zk_client, other_path)
    assert zk_root.zk_client.get(f"{other_path}/INSTANCEID")[0].decode() != zk_root.instance_id


def test_missing_zookeeper_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bkspark.devcluster import zookeeper as zk_module

    monkeypatch.delenv("ZOOKEEPER_HOME", raising=False)
    monkeypatch.setattr(zk_module, "DEBIAN_JAVA_DIR", tmp_path)
    with pytest.raises(HarnessError, match="make zookeeper"):
        zk_module.zookeeper_classpath()
    monkeypatch.setenv("ZOOKEEPER_HOME", str(tmp_path))
    with pytest.raises(HarnessError, match="no zookeeper jar"):
        ZooKeeperServer(tmp_path / "zk").start()


def test_zookeeper_restarts_with_its_data(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk").start()
    try:
        client = server.client()
        client.create("/kept", b"data")
        client.stop()
        client.close()
        server.kill()
        assert not server.is_alive
        server.start()
        client = server.client()
        assert client.get("/kept")[0] == b"data"
        client.stop()
        client.close()
    finally:
        server.stop()
    assert not server.is_alive


def _znode_tree(zk_root: ZkRoot, path: str) -> dict[str, tuple[bytes, bool]]:
    """{relative path: (data, is_ephemeral)} of everything under `path`."""
    zk = zk_root.zk_client
    tree: dict[str, tuple[bytes, bool]] = {}
    todo = [path]
    while todo:
        node = todo.pop()
        data, stat = zk.get(node)
        tree[node[len(path):] or "/"] = (data, stat.ephemeralOwner != 0)
        todo.extend(f"{node}/{child}" for child in zk.get_children(node))
    return tree


def test_zk_root_matches_java_initnewcluster(zk_root: ZkRoot, java_tools: JavaTools) -> None:
    java_path = zk_root.path + "-java"
    java_uri = f"zk+hierarchical://{zk_root.connect_string}{java_path}"
    result = java_tools.shell("4.17.3", java_uri, "initnewcluster")
    assert result.returncode == 0, result.stdout + result.stderr
    ours, theirs = _znode_tree(zk_root, zk_root.path), _znode_tree(zk_root, java_path)
    assert sorted(ours) == sorted(theirs) == ["/", "/INSTANCEID", "/LAYOUT", "/available", "/available/readonly"]
    for node in ("/", "/LAYOUT", "/available", "/available/readonly"):
        assert ours[node] == theirs[node], node
    uuid.UUID(theirs["/INSTANCEID"][0].decode())
    acl_ours = zk_root.zk_client.get_acls(zk_root.path)[0]
    acl_theirs = zk_root.zk_client.get_acls(java_path)[0]
    assert acl_ours == acl_theirs


# -- Java bookies and the Java shell -------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _listbookies_rw(java_tools: JavaTools, version: str, uri: str) -> set[str]:
    result = java_tools.shell(version, uri, "listbookies", "-rw")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ReadWrite Bookies" in result.stdout
    return set(re.findall(r"BookieID:(\S+?),", result.stdout))


def test_java_cluster_simpletest_listbookies_and_kill(
    java_cluster_factory: JavaClusterFactory, java_tools: JavaTools, zk_root: ZkRoot
) -> None:
    started = time.monotonic()
    # A short ZooKeeper session, so that a killed bookie leaves `available/` quickly.
    cluster: JavaBookieCluster = java_cluster_factory("4.17.3", bookies=3, conf_overrides={"zkTimeout": 4000})
    startup = time.monotonic() - started
    assert startup < 120
    assert cluster.version == "4.17.3"
    assert cluster.metadata_service_uri == zk_root.metadata_service_uri
    assert cluster.bookie_ids == [f"127.0.0.1:{port}" for _, port in cluster.addresses]
    assert sorted(zk_root.zk_client.get_children(f"{zk_root.path}/available")) == sorted(
        [*cluster.bookie_ids, "readonly"]
    )
    assert all(port_is_open(port, host) for host, port in cluster.addresses)

    result = java_tools.shell("4.17.3", cluster.metadata_service_uri, "simpletest", "-e", "3", "-w", "2", "-a", "2", "-n", "100")
    assert result.returncode == 0, result.stdout + result.stderr
    written = re.search(r"100 entries written to ledger (\d+)", result.stdout)
    assert written, result.stdout
    ledger_id = int(written.group(1))

    assert _listbookies_rw(java_tools, "4.17.3", cluster.metadata_service_uri) == set(cluster.bookie_ids)

    # simpletest deletes its ledger at the end; the ledger's metadata znode went through our root.
    listed = java_tools.shell("4.17.3", cluster.metadata_service_uri, "listledgers")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert f"ledgerID: {ledger_id}" not in listed.stdout
    assert zk_root.zk_client.exists(f"{zk_root.path}/idgen") is not None

    # SIGKILL bookie 1: its ephemeral registration goes with its ZooKeeper session.
    killed_id = cluster.bookie_ids[1]
    cluster.kill(1)
    assert not cluster.is_alive(1)
    cluster.wait_unregistered(1, timeout=60)
    assert killed_id not in cluster.registered()
    assert _listbookies_rw(java_tools, "4.17.3", cluster.metadata_service_uri) == set(cluster.bookie_ids) - {killed_id}

    # Restart on the same port and directories (the cookie must still match), then stop gracefully.
    cluster.start(1)
    assert cluster.bookie_ids[1] == killed_id and killed_id in cluster.registered()
    # Kill and restart at once: start() must wait for the new registration, not accept the stale one.
    old_czxid = zk_root.zk_client.exists(f"{zk_root.path}/available/{killed_id}").czxid
    cluster.kill(1)
    cluster.start(1)
    assert zk_root.zk_client.exists(f"{zk_root.path}/available/{killed_id}").czxid != old_czxid
    cluster.stop(2)
    cluster.wait_unregistered(2, timeout=30)
    assert cluster.registered() == sorted(cluster.bookie_ids[:2])


@pytest.mark.parametrize("version", ["4.16.6", "4.18.2"])
def test_other_versions_start(java_cluster_factory: JavaClusterFactory, java_tools: JavaTools, version: str) -> None:
    cluster = java_cluster_factory(version, bookies=1)
    assert cluster.version == version
    assert cluster.registered() == cluster.bookie_ids
    assert _listbookies_rw(java_tools, version, cluster.metadata_service_uri) == set(cluster.bookie_ids)


def test_custom_bookie_id(java_cluster_factory: JavaClusterFactory, java_tools: JavaTools, zk_root: ZkRoot) -> None:
    cluster = java_cluster_factory("4.17.3", bookies=1, bookie_ids=["bookie-alpha"])
    assert cluster.bookie_ids == ["bookie-alpha"]
    assert zk_root.zk_client.exists(f"{zk_root.path}/available/bookie-alpha") is not None
    # The registration carries the real endpoint (BookieServiceInfo), so clients can resolve the id.
    data, _ = zk_root.zk_client.get(f"{zk_root.path}/available/bookie-alpha")
    # BookieServiceInfoFormat: endpoint {id "bookie", port (field 2, varint), host (field 3) "127.0.0.1", protocol}.
    assert b"\x10" + _varint(cluster.addresses[0][1]) + b"\x1a\x09127.0.0.1" in data
    assert zk_root.zk_client.exists(f"{zk_root.path}/cookies/bookie-alpha") is not None


def test_harness_leaves_no_process_behind(tmp_path: Path, java_tools: JavaTools) -> None:
    server = ZooKeeperServer(tmp_path / "zk").start()
    client = server.client()
    try:
        init_new_cluster(client, "/ledgers")
    finally:
        client.stop()
        client.close()
    uri = f"zk+hierarchical://{server.connect_string}/ledgers"
    cluster = JavaBookieCluster(version="4.17.3", metadata_service_uri=uri, base_dir=tmp_path / "bookies", bookies=2)
    with cluster:
        pids = [b.process.pid for b in cluster.bookies if b.process is not None and b.process.pid is not None]
        assert len(pids) == 2 and all(_pid_running(p) for p in pids)
        assert _java_pids_mentioning(str(tmp_path))
        cluster.kill(0)
    server.stop()
    assert not any(_pid_running(p) for p in pids)
    assert _java_pids_mentioning(str(tmp_path)) == []
    assert not server.is_alive and not any(b.is_alive for b in cluster.bookies)
    leftovers = {id(p) for p in live_processes()}
    assert id(server.process) not in leftovers
    assert not any(id(b.process) in leftovers for b in cluster.bookies)


def test_java_tools_run_uses_the_bookkeeper_classpath(zk_root: ZkRoot, java_tools: JavaTools) -> None:
    # ZooKeeper's own CLI ships in BookKeeper's lib/: run it as a "program" and read its stdout.
    result = java_tools.run(
        "4.17.3",
        "org.apache.zookeeper.ZooKeeperMain",
        "-server",
        zk_root.connect_string,
        "ls",
        f"{zk_root.path}/available",
        metadata_service_uri=zk_root.metadata_service_uri,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[readonly]" in result.stdout


def test_children_die_with_a_killed_parent(tmp_path: Path) -> None:
    # The parent interpreter is SIGKILLed (no atexit): PR_SET_PDEATHSIG still takes its children down.
    script = (
        "import sys, time\n"
        "from tests.harness.process import ManagedProcess\n"
        f"p = ManagedProcess('orphan', [sys.executable, '-c', 'import time; time.sleep(300)'], log_dir={str(tmp_path)!r})\n"
        "p.start(); print(p.pid, flush=True); time.sleep(300)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=repo)
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    assert _pid_running(child_pid)
    parent.kill()
    parent.wait(10)
    deadline = time.monotonic() + 10
    while _pid_running(child_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _pid_running(child_pid)


def test_sigterm_tears_a_pytest_session_down(tmp_path: Path) -> None:
    # `timeout pytest ...` sends SIGTERM: the session must stop its servers (fixture teardown), not orphan them.
    test_file = tmp_path / "test_victim.py"
    test_file.write_text(
        "import time\n"
        "def test_hang(zookeeper):\n"
        "    print('ZKPID', zookeeper.process.pid, flush=True)\n"
        "    time.sleep(300)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
         f"--basetemp={tmp_path / 'basetemp'}", str(test_file)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    assert proc.stdout is not None
    zk_pid = 0
    for line in proc.stdout:
        if line.startswith("ZKPID"):
            zk_pid = int(line.split()[1])
            break
    assert zk_pid and _pid_running(zk_pid)
    proc.terminate()
    out, _ = proc.communicate(timeout=60)
    # Exit status 2 = pytest's "interrupted": the session ended through its teardown, not by dying of SIGTERM.
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert not _pid_running(zk_pid)


@pytest.fixture(scope="module")
def _module_cluster(module_java_cluster_factory: JavaClusterFactory) -> JavaBookieCluster:
    return module_java_cluster_factory("4.17.3", bookies=1)


@pytest.mark.parametrize("attempt", [1, 2])
def test_module_cluster_is_shared(_module_cluster: JavaBookieCluster, module_zk_root: ZkRoot, attempt: int) -> None:
    # Both parametrized runs see the same bookie process, on the module's root.
    assert _module_cluster.metadata_service_uri == module_zk_root.metadata_service_uri
    assert module_zk_root.path.startswith("/bk-test_harness-")
    assert _module_cluster.is_alive(0)
    process = _module_cluster.bookies[0].process
    assert process is not None and process.pid is not None
    pid = process.pid
    seen = _SEEN_MODULE_PIDS.setdefault("pid", pid)
    assert seen == pid
    assert _module_cluster.registered() == _module_cluster.bookie_ids


_SEEN_MODULE_PIDS: dict[str, int] = {}


def test_unknown_bookkeeper_version_is_refused(java_cluster_factory: JavaClusterFactory) -> None:
    from tests.harness.java_bookkeeper import ensure_jars

    with pytest.raises(HarnessError, match="4.16.6, 4.17.3, 4.18.2"):
        ensure_jars("4.99.0")
    with pytest.raises(ValueError, match="unknown BookKeeper version"):
        java_cluster_factory("4.99.0", bookies=1)


def test_java_tools_start_runs_in_the_background(zk_root: ZkRoot, java_tools: JavaTools) -> None:
    proc = java_tools.start(
        "4.17.3",
        "org.apache.zookeeper.ZooKeeperMain",
        "-server",
        zk_root.connect_string,
        "get",
        f"{zk_root.path}/INSTANCEID",
        metadata_service_uri=zk_root.metadata_service_uri,
    )
    try:
        assert proc.wait_exit(timeout=120) == 0, proc.log_tail()
    finally:
        proc.terminate()
    assert zk_root.instance_id in proc.stdout_path.read_text()
