"""``bkspark shell listbookies -l``: each bookie's network location, resolved by the configured policy and mapping.

Three real Python bookies on their own cluster root: two with ``127.0.0.1:PORT`` BookieIds and one with a BP-41
name (``bookie-c``). The network topology comes from a real executable script in a temp dir (BookKeeper's
``networkTopologyScriptFileName`` contract: names as arguments, one location per name on stdout) that also logs
every call, so the tests can check what the policy handed it: whole BookieIds with
``networkTopologyResolveByBookieId=true``, otherwise each bookie's registered host (the BP-41 bookie included).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkspark import cli
from tests.harness.python_bookie import REPO_ROOT, PythonBookieCluster
from tests.harness.zookeeper import ZkRoot

pytestmark = pytest.mark.integration

RACKS = ("/rack-1", "/rack-2", "/rack-3")
REGION_RACKS = ("/region-a/rack-1", "/region-a/rack-2", "/region-b/rack-1")
HOST_RACK = "/rack-of-127.0.0.1"
OTHER_RACK = "/rack-unlisted"


def write_script(path: Path, table: dict[str, str], default: str) -> Path:
    """An executable topology script: one location per argument from ``table`` (``default`` otherwise).

    Every call appends its arguments, one line per call, to ``<path>.calls``.
    """
    cases = "".join(f"    '{name}') echo '{loc}' ;;\n" for name, loc in table.items())
    path.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{path}.calls"\n'
        'for name in "$@"; do\n'
        '  case "$name" in\n'
        f"{cases}"
        f"    *) echo '{default}' ;;\n"
        "  esac\n"
        "done\n",
        encoding="utf-8",
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def script_calls(script: Path) -> list[list[str]]:
    """The argument lists the script was run with, in order."""
    calls = Path(f"{script}.calls")
    if not calls.exists():
        return []
    return [line.split() for line in calls.read_text(encoding="utf-8").splitlines()]


def shell(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["shell", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def cluster(module_zk_root: ZkRoot, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonBookieCluster]:
    """Three Python bookies: ``127.0.0.1:P0``, ``127.0.0.1:P1`` and the BP-41 ``bookie-c``."""
    with PythonBookieCluster(
        module_zk_root.metadata_service_uri,
        tmp_path_factory.mktemp("shell-locations-bookies"),
        bookies=3,
        bookie_ids=[None, None, "bookie-c"],
    ) as bookies:
        yield bookies


@pytest.fixture
def by_id_script(tmp_path: Path, cluster: PythonBookieCluster) -> Path:
    """Maps each whole BookieId to its own rack, the host 127.0.0.1 to HOST_RACK, anything else to OTHER_RACK."""
    table = dict(zip(cluster.bookie_ids, RACKS))
    table["127.0.0.1"] = HOST_RACK
    return write_script(tmp_path / "topology.sh", table, OTHER_RACK)


def wait_registered(cluster: PythonBookieCluster, bookie_id: str, readonly: bool, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while bookie_id not in cluster.registered(readonly=readonly):
        assert time.monotonic() < deadline, f"{bookie_id} not registered (readonly={readonly}) after {timeout}s"
        time.sleep(0.1)


def test_locations_by_bookie_id_from_conf_flags(capsys, cluster: PythonBookieCluster, by_id_script: Path) -> None:
    uri = cluster.metadata_service_uri
    conf = [
        "--conf", "ensemblePlacementPolicy=rackaware",
        "--conf", f"networkTopologyScriptFileName={by_id_script}",
        "--conf", "networkTopologyResolveByBookieId=true",
    ]
    expected = dict(zip(cluster.bookie_ids, RACKS))
    code, out, err = shell(capsys, "--metadata-service-uri", uri, "listbookies", "-l", *conf)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "ReadWrite Bookies :",
        *[f"{b}\t{expected[b]}" for b in sorted(expected)],
        "Readonly Bookies :",
        "No bookie exists!",
    ]
    # The script was given the whole BookieIds (the BP-41 name too), in one run.
    assert [sorted(args) for args in script_calls(by_id_script) if "bookie-c" in args] == [sorted(expected)]

    # --json with addresses: the options may also come before the command name (and the two lists add up).
    code, out, err = shell(
        capsys, "--json", *conf[:2], "--metadata-service-uri", uri, "listbookies", "-rw", "-h", "--location", *conf[2:]
    )
    assert (code, err) == (0, "")
    ports = {b.bookie_id: b.port for b in cluster.bookies}
    assert json.loads(out) == {
        "readwrite": [
            {"bookieId": b, "address": f"127.0.0.1:{ports[b]}", "networkLocation": expected[b]} for b in sorted(expected)
        ]
    }

    # Without -l nothing is resolved and the output is what it always was.
    calls_before = len(script_calls(by_id_script))
    code, out, _ = shell(capsys, "--metadata-service-uri", uri, "listbookies", "-rw", *conf)
    assert code == 0 and out.splitlines() == ["ReadWrite Bookies :", *sorted(expected)]
    assert len(script_calls(by_id_script)) == calls_before


def test_locations_by_registered_host_from_a_client_conf_file(
    tmp_path: Path, cluster: PythonBookieCluster, by_id_script: Path
) -> None:
    """A client.conf as Java reads it (the cluster's URI included), run as the console script would be."""
    conf_file = tmp_path / "client.conf"
    conf_file.write_text(
        "# bkspark shell reads BookKeeper's client configuration\n"
        f"metadataServiceUri={cluster.metadata_service_uri}\n"
        "ensemblePlacementPolicy = org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy\n"
        "reppDnsResolverClass: org.apache.bookkeeper.net.ScriptBasedMapping\n"
        f"networkTopologyScriptFileName={by_id_script}\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k != "BKSPARK_METADATA_SERVICE_URI"}
    proc = subprocess.run(
        [sys.executable, "-m", "bkspark.cli", "shell", "listbookies", "-l", "-h", "--client-conf", str(conf_file)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    ports = {b.bookie_id: b.port for b in cluster.bookies}
    # Every bookie, the BP-41 one included, is resolved by the host it registered: all on 127.0.0.1.
    assert proc.stdout.splitlines() == [
        "ReadWrite Bookies :",
        *[f"{b}(127.0.0.1:{ports[b]})\t{HOST_RACK}" for b in sorted(ports)],
        "Readonly Bookies :",
        "No bookie exists!",
    ]
    calls = script_calls(by_id_script)
    assert calls, "the topology script never ran"
    assert all(name == "127.0.0.1" or name.replace(".", "").isdigit() for args in calls for name in args), calls


def test_region_locations_and_a_read_only_bookie(capsys, tmp_path: Path, cluster: PythonBookieCluster) -> None:
    script = write_script(tmp_path / "regions.sh", dict(zip(cluster.bookie_ids, REGION_RACKS)), "/region-z/rack-9")
    conf = [
        "--conf", "ensemblePlacementPolicy=org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy",
        "--conf", f"networkTopologyScriptFileName={script}",
        "--conf", "networkTopologyResolveByBookieId=true",
    ]
    uri = cluster.metadata_service_uri
    readonly_bookie = cluster.bookie_ids[1]
    assert cluster.http(1, "PUT", "/api/v1/bookie/state/readonly", {"readOnly": True}) == {"readOnly": True}
    try:
        wait_registered(cluster, readonly_bookie, readonly=True)
        code, out, err = shell(capsys, "--metadata-service-uri", uri, "--json", "listbookies", "-l", *conf)
        assert (code, err) == (0, "")
        expected = dict(zip(cluster.bookie_ids, REGION_RACKS))
        writable = sorted(set(expected) - {readonly_bookie})
        assert json.loads(out) == {
            "readwrite": [{"bookieId": b, "networkLocation": expected[b]} for b in writable],
            "readonly": [{"bookieId": readonly_bookie, "networkLocation": expected[readonly_bookie]}],
        }
        code, out, err = shell(capsys, "--metadata-service-uri", uri, "listbookies", "-ro", "--location", *conf)
        assert (code, err) == (0, "")
        assert out.splitlines() == ["Readonly Bookies :", f"{readonly_bookie}\t{expected[readonly_bookie]}"]
    finally:
        cluster.http(1, "PUT", "/api/v1/bookie/state/readonly", {"readOnly": False})
        wait_registered(cluster, readonly_bookie, readonly=False)


def test_unresolvable_bookies_land_in_the_policys_default_rack(
    capsys, tmp_path: Path, cluster: PythonBookieCluster
) -> None:
    uri = cluster.metadata_service_uri
    failing = tmp_path / "failing.sh"
    failing.write_text("#!/bin/sh\necho /rack-1\nexit 1\n", encoding="utf-8")
    failing.chmod(0o755)
    bookies = sorted(cluster.bookie_ids)

    # The default (random) policy has no topology: locations are resolved as the rack-aware policy would.
    for policy, default in (([], "/default-rack"), (["--conf", "ensemblePlacementPolicy=regionaware"],
                                                     "/default-region/default-rack")):
        code, out, err = shell(
            capsys, "--metadata-service-uri", uri, "--json", "listbookies", "-rw", "-l", *policy,
            "--conf", f"networkTopologyScriptFileName={failing}", "--conf", "networkTopologyResolveByBookieId=true",
        )
        assert (code, err) == (0, "")
        assert json.loads(out) == {"readwrite": [{"bookieId": b, "networkLocation": default} for b in bookies]}

    # No script and no mapping at all: one default rack, as in Java.
    code, out, err = shell(capsys, "--metadata-service-uri", uri, "listbookies", "-rw", "-l")
    assert (code, err) == (0, "")
    assert out.splitlines() == ["ReadWrite Bookies :", *[f"{b}\t/default-rack" for b in bookies]]

    # A static table (reppDnsResolverClass=static) keyed by BookieId; the BP-41 bookie is not in it.
    table = ",".join(f"{b}=/static-{i}" for i, b in enumerate(cluster.bookie_ids[:2]))
    code, out, err = shell(
        capsys, "--metadata-service-uri", uri, "--json", "listbookies", "-rw", "-l",
        "--conf", "ensemblePlacementPolicy=rackaware", "--conf", "reppDnsResolverClass=static",
        "--conf", f"networkTopologyStaticMapping={table}", "--conf", "networkTopologyResolveByBookieId=true",
    )
    assert (code, err) == (0, "")
    static = {cluster.bookie_ids[0]: "/static-0", cluster.bookie_ids[1]: "/static-1", "bookie-c": "/default-rack"}
    assert json.loads(out) == {"readwrite": [{"bookieId": b, "networkLocation": static[b]} for b in bookies]}


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--conf", "ensemblePlacementPolicy=no.such.Policy"], "unknown ensemble placement policy"),
        (["--conf", "reppDnsResolverClass=no.such.Mapping"], "unknown DNS-to-switch mapping"),
        (["--conf", "networkTopologyResolveByBookieId=maybe"], "expected true or false"),
        (["--conf", "justakey"], "expected KEY=VALUE"),
        (["--client-conf", "/no/such/client.conf"], "cannot read client configuration"),
    ],
)
def test_bad_location_configuration_is_one_line_and_exit_2(
    capsys, cluster: PythonBookieCluster, extra: list[str], fragment: str
) -> None:
    code, out, err = shell(capsys, "--metadata-service-uri", cluster.metadata_service_uri, "listbookies", "-l", *extra)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and fragment in err and "Traceback" not in err


def test_client_placement_resolves_bp41_bookie_ids_to_their_registered_host(
    cluster: PythonBookieCluster, module_zk_root: ZkRoot, tmp_path: Path
) -> None:
    """The client hands the policy's mapping each bookie's host, as Java's resolver does, not a BP-41 name."""
    from bkspark.client import BookKeeper

    script = write_script(tmp_path / "topology.sh", {"127.0.0.1": HOST_RACK}, OTHER_RACK)
    with BookKeeper(
        metadata_service_uri=module_zk_root.metadata_service_uri,
        ensemblePlacementPolicy="rackaware",
        networkTopologyScriptFileName=str(script),
    ) as bk:
        handle = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2, password=b"pw")
        handle.append(b"placed")
        handle.close()
        assert "bookie-c" in handle.metadata.ensembles[0]
        bk.delete_ledger(handle.ledger_id)
    names = {name for call in script_calls(script) for name in call}
    assert names == {"127.0.0.1"}, names
