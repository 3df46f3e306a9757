"""bkspark.testing.BookKeeperCluster against real containers: Java interop (bkspark's client writes to Java
bookies in containers, Apache BookKeeper's shell in a bookie's container reads it back), servers on loopback
only, bookie stop/kill/start keeping its data, and teardown that leaves no container behind, also when a start
fails half-way (docs/testing.md)."""

from __future__ import annotations

import os
import re
import socket

import pytest

from bkspark.client import BookKeeper
from bkspark.errors import LocalClusterError
from bkspark.testing import BookKeeperCluster
from bkspark.testing.cluster import CLUSTER_LABEL, OWNER_LABEL, reap_orphans
from bkspark.testing.images import docker_client, python_bookie_image
from bkspark.testing.pytest_plugin import engine_or_skip

pytestmark = [pytest.mark.containers, pytest.mark.integration, pytest.mark.compat]


def write_ledger(uri: str, payloads: list[bytes], **quorums: int) -> int:
    with BookKeeper(uri) as bk:
        lh = bk.create_ledger(**quorums)
        for future in [lh.append_async(p) for p in payloads]:
            future.result()
        lh.close()
        return lh.ledger_id


def read_ledger(uri: str, ledger_id: int) -> list[bytes]:
    with BookKeeper(uri) as bk:
        lh = bk.open_ledger(ledger_id)
        try:
            return [e.payload for e in lh.read(0, lh.last_add_confirmed)]
        finally:
            lh.close()


def labelled(cluster_id: str) -> list[str]:
    client = docker_client()
    try:
        return [c.name for c in client.containers.list(all=True, filters={"label": f"{CLUSTER_LABEL}={cluster_id}"})]
    finally:
        client.close()


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets listening on ``port`` in this network namespace (the containers share it)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                if width == 8:
                    found.add(socket.inet_ntop(socket.AF_INET, bytes.fromhex(address)[::-1]))
                else:
                    found.add(socket.inet_ntop(socket.AF_INET6, b"".join(
                        bytes.fromhex(address[i:i + 8])[::-1] for i in range(0, 32, 8))))
    return found


def test_every_server_listens_on_loopback_only(bookkeeper_cluster) -> None:
    cluster = bookkeeper_cluster
    for port in [cluster.zookeeper.port, *(b.port for b in cluster.bookies)]:
        assert listening_addresses(port) == {"127.0.0.1"}, port


def test_java_shell_in_a_container_reads_what_bkspark_wrote_to_java_bookies(bookkeeper_cluster) -> None:
    cluster = bookkeeper_cluster
    assert cluster.registered() == sorted(cluster.bookie_ids)
    code, out = cluster.shell("listbookies", "-rw")
    assert code == 0, out
    assert set(re.findall(r"BookieID:([^,\s]+),", out)) == set(cluster.bookie_ids), out

    payloads = [f"container-{i}".encode() for i in range(40)]
    lid = write_ledger(cluster.metadata_service_uri, payloads, ensemble_size=3, write_quorum_size=2,
                       ack_quorum_size=2)
    code, out = cluster.shell("readledger", "-ledgerid", str(lid), "-firstentryid", "0", "-lastentryid", "39",
                              "-msg")
    assert code == 0, out
    lines = out.splitlines()
    seen = {}
    for n, line in enumerate(lines):
        header = re.search(r"--------- Lid=(\d+), Eid=(\d+), EntrySize=\d+ ---------", line)
        if header:
            assert int(header.group(1)) == lid
            seen[int(header.group(2))] = lines[n + 1].strip()
    assert seen == {i: p.decode() for i, p in enumerate(payloads)}, out[-3000:]

    code, out = cluster.shell("ledgermetadata", "-ledgerid", str(lid), bookie=2)
    assert code == 0, out
    assert "state=CLOSED" in out and "lastEntryId=39" in out and "ensembleSize=3" in out, out[-3000:]
    ensemble = re.search(r"ensembles=\{0=\[([^\]]*)\]\}", out)
    assert ensemble and set(ensemble.group(1).split(", ")) == set(cluster.bookie_ids), out[-3000:]


def test_a_stopped_python_bookie_comes_back_with_its_port_id_and_entries(bookkeeper_cluster_factory) -> None:
    cluster = bookkeeper_cluster_factory(3, bookie="python")
    uri = cluster.metadata_service_uri
    assert all(listening_addresses(b.port) == {"127.0.0.1"} for b in cluster.bookies)
    payloads = [f"kept-{i}".encode() for i in range(30)]
    lid = write_ledger(uri, payloads, ensemble_size=3, write_quorum_size=3, ack_quorum_size=3)
    first = cluster.bookie_ids[0]

    cluster.stop_bookie(0)
    assert not cluster.is_running(0)
    assert first not in cluster.registered()
    assert read_ledger(uri, lid) == payloads  # the two others serve every entry

    cluster.start_bookie(0)
    assert cluster.is_running(0) and cluster.registered() == sorted(cluster.bookie_ids)
    with BookKeeper(uri) as bk:
        assert bk.list_entries_on_bookie(first, lid) == list(range(30))

    cluster.kill_bookie(0)
    assert not cluster.is_running(0)
    cluster.start_bookie(0)  # waits for a registration newer than the killed bookie's
    with BookKeeper(uri) as bk:
        assert bk.list_entries_on_bookie(first, lid) == list(range(30))


def test_close_removes_every_container_and_a_failed_start_leaves_none() -> None:
    engine_or_skip()
    with BookKeeperCluster(1, bookie="python") as cluster:
        assert len(labelled(cluster.cluster_id)) == 2
    assert labelled(cluster.cluster_id) == []

    broken = BookKeeperCluster(2, bookie="python", conf_overrides={"bookiePort": "not-a-port"}, start_timeout=60)
    with pytest.raises(LocalClusterError) as info:
        broken.start()
    assert "bookie-0" in str(info.value)  # the error carries the containers' logs
    assert labelled(broken.cluster_id) == []


def test_containers_of_an_exited_owner_are_reaped_and_a_live_owners_stay() -> None:
    engine_or_skip()
    client = docker_client()
    host = socket.gethostname()
    try:
        dead = client.containers.create(python_bookie_image(), command=["true"], labels={
            CLUSTER_LABEL: "reap-dead", OWNER_LABEL: f"{host}:99999999"})  # above any pid_max: never a live pid
        live = client.containers.create(python_bookie_image(), command=["true"], labels={
            CLUSTER_LABEL: "reap-live", OWNER_LABEL: f"{host}:{os.getpid()}"})
        try:
            assert dead.name in reap_orphans(client)
            assert labelled("reap-dead") == [] and labelled("reap-live") == [live.name]
        finally:
            live.remove(force=True)
    finally:
        client.close()
