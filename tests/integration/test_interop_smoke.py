"""Interop smoke test: bkspark.protocol alone (plus kazoo and plain sockets) against Java 4.17.3 bookies and tools.

No bkspark client code is used: everything a client does is done here by hand with the sans-IO protocol
package, so that a failure points at the protocol layer.

Forward: we take a ledger id the way Java's ZkLedgerIdGenerator does, write V3 metadata at the hierarchical
path, add 100 entries to all three bookies over v2 (one ledger) and v3 (another), read them back with single
reads and BATCH_READ_ENTRY, close the ledgers with a compare-and-set of CLOSED metadata, and then Java's own
shell (`ledgermetadata`, `readledger`) must show exactly that.

Reverse: Java writes ledgers (the shell's `simpletest`, and tools/java JavaClient) and our
ledger_metadata.parse must read every field of their znodes as Java itself reads them (JavaClient `metadata`).
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kazoo.client import KazooClient

from bkspark.protocol import digest, framing, ledger_metadata, v2, v3, zk_paths
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb

pytestmark = [pytest.mark.integration, pytest.mark.compat]

VERSION = "4.17.3"
ENTRIES = 100
PASSWORD = b"interop-pw"


class Connection:
    """One TCP connection to a bookie: send frames, collect whole frame bodies."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=30)
        self.splitter = framing.FrameSplitter()
        self.pending: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frames(self, count: int) -> list[bytes]:
        while len(self.pending) < count:
            data = self.sock.recv(1 << 16)
            assert data, "bookie closed the connection"
            self.pending.extend(bytes(body) for body in self.splitter.feed(data))
        out, self.pending = self.pending[:count], self.pending[count:]
        return out

    def close(self) -> None:
        self.sock.close()


@contextmanager
def connections(addresses: list[tuple[str, int]]) -> Iterator[list[Connection]]:
    conns = [Connection(a) for a in addresses]
    try:
        yield conns
    finally:
        for c in conns:
            c.close()


def new_ledger_id(zk: KazooClient, root: str) -> int:
    """ZkLedgerIdGenerator: an EPHEMERAL_SEQUENTIAL <root>/idgen/ID-, its number is the id, then delete it."""
    prefix = zk_paths.idgen_prefix(root)
    created = zk.create(prefix, b"", ephemeral=True, sequence=True, makepath=True)
    ledger_id = zk_paths.sequential_id(created, prefix)
    zk.delete(created)
    assert not zk_paths.is_short_id_overflow(ledger_id)
    return ledger_id


def create_metadata(zk: KazooClient, root: str, ledger_id: int, bookies: list[str]) -> ledger_metadata.LedgerMetadata:
    md = ledger_metadata.LedgerMetadata(
        ensemble_size=3,
        write_quorum_size=3,
        ack_quorum_size=3,
        digest_type=digest.DigestType.CRC32C,
        password=PASSWORD,
        ensembles={0: tuple(bookies)},
        custom_metadata={"writer": b"bkspark-interop"},
        ctoken=0x1234_5678_9ABC,
    )
    zk.create(zk_paths.ledger_path(root, ledger_id), ledger_metadata.serialize(md, 3), makepath=True)
    return md


def payload(tag: str, i: int) -> bytes:
    return f"bkspark-{tag}-entry-{i:03d}".encode()


def packaged_entries(d: digest.Digester, ledger_id: int, tag: str) -> tuple[list[bytes], int]:
    """Entries 0..99 as a Java writer would package them: LAC = previous entry, cumulative length."""
    out, length = [], 0
    for i in range(ENTRIES):
        data = payload(tag, i)
        length += len(data)
        out.append(d.package_entry(ledger_id, i, i - 1, length, data))
    return out, length


def close_ledger(zk: KazooClient, root: str, ledger_id: int, md: ledger_metadata.LedgerMetadata, length: int) -> int:
    """CLOSED metadata with lastEntryId and length, written with compare-and-set on the znode version."""
    path = zk_paths.ledger_path(root, ledger_id)
    data, stat = zk.get(path)
    assert ledger_metadata.parse(data) == md
    closed = md.close(ENTRIES - 1, length)
    new_stat = zk.set(path, ledger_metadata.serialize(closed), version=stat.version)
    assert new_stat.version == stat.version + 1
    return new_stat.version


def check_shell_sees(java_tools, uri: str, ledger_id: int, bookies: list[str], tag: str, length: int) -> None:
    """Java's `ledgermetadata` and `readledger` show exactly what we wrote."""
    proc = java_tools.shell(VERSION, uri, "ledgermetadata", "-ledgerid", str(ledger_id))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"ledgerID: {ledger_id}" in out
    m = re.search(r"LedgerMetadata\{(.*)\}", out)
    assert m, out
    text = m.group(1)
    for expected in (
        "formatVersion=3",
        "ensembleSize=3",
        "writeQuorumSize=3",
        "ackQuorumSize=3",
        "state=CLOSED",
        f"length={length}",
        f"lastEntryId={ENTRIES - 1}",
        "digestType=CRC32C",
        f"ensembles={{0=[{', '.join(bookies)}]}}",
    ):
        assert expected in text, (expected, text)

    proc = java_tools.shell(
        VERSION, uri, "readledger", "-ledgerid", str(ledger_id), "-firstentryid", "0",
        "-lastentryid", str(ENTRIES - 1), "-msg",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    seen = []
    for n, line in enumerate(lines):
        hm = re.search(r"--------- Lid=(\d+), Eid=(\d+), EntrySize=(\d+) ---------", line)
        if hm:
            lid, eid, size = (int(x) for x in hm.groups())
            assert lid == ledger_id
            body = lines[n + 1]  # StringEntryFormatter prints the payload as text on the next line
            assert body == payload(tag, eid).decode()
            # LedgerEntry.getLength() is the entry header's length field: the ledger's cumulative length.
            assert size == sum(len(payload(tag, k)) for k in range(eid + 1))
            seen.append(eid)
    assert seen == list(range(ENTRIES)), proc.stdout[-3000:]


def test_bkspark_protocol_writes_ledgers_java_reads(java_cluster_factory, java_tools, zk_root) -> None:
    cluster = java_cluster_factory(VERSION, bookies=3)
    zk, root, uri = zk_root.zk_client, zk_root.path, cluster.metadata_service_uri
    bookies = list(cluster.bookie_ids)
    addresses = list(cluster.addresses)
    d = digest.Digester(digest.DigestType.CRC32C, PASSWORD)
    mk = digest.master_key(PASSWORD)

    # -- ledger A over v2 ---------------------------------------------------------------------------------------
    lid_a = new_ledger_id(zk, root)
    md_a = create_metadata(zk, root, lid_a, bookies)
    entries_a, length_a = packaged_entries(d, lid_a, "v2")
    with connections(addresses) as conns:
        for c in conns:  # pipelined: every add goes out before the first answer is read
            c.send(b"".join(v2.encode_request(v2.AddRequest(0, mk, e)) for e in entries_a))
        for c in conns:
            acks = [v2.decode_response(f) for f in c.frames(ENTRIES)]
            assert all(isinstance(a, v2.AddResponse) and a.rc == v2.EOK and a.ledger_id == lid_a for a in acks)
            assert sorted(a.entry_id for a in acks) == list(range(ENTRIES))

        for c in conns:  # single reads, from every bookie
            c.send(b"".join(v2.encode_request(v2.ReadRequest(0, lid_a, i)) for i in range(ENTRIES)))
            got = {}
            for f in c.frames(ENTRIES):
                r = v2.decode_response(f)
                assert isinstance(r, v2.ReadResponse) and r.rc == v2.EOK
                got[r.entry_id] = bytes(d.verify_entry(r.entry, lid_a, r.entry_id).payload)
            assert got == {i: payload("v2", i) for i in range(ENTRIES)}

        # BATCH_READ_ENTRY (4.17+): everything at once, then a bounded batch.
        c = conns[0]
        c.send(v2.encode_request(v2.BatchReadRequest(0, lid_a, 0, 7, ENTRIES, 5 * 1024 * 1024)))
        c.send(v2.encode_request(v2.BatchReadRequest(0, lid_a, 50, 8, 10, 5 * 1024 * 1024)))
        batches = {}
        for f in c.frames(2):
            r = v2.decode_response(f)
            assert isinstance(r, v2.BatchReadResponse) and r.rc == v2.EOK
            batches[r.request_id] = [
                bytes(d.verify_entry(e, lid_a, r.start_entry_id + k).payload) for k, e in enumerate(r.entries)
            ]
        assert batches[7] == [payload("v2", i) for i in range(ENTRIES)]
        assert batches[8] == [payload("v2", i) for i in range(50, 60)]

        # The last entry (entry id -1) carries LAC 98 in its header: that is what recovery reads.
        c.send(v2.encode_request(v2.ReadRequest(0, lid_a, -1)))
        r = v2.decode_response(c.frames(1)[0])
        last = d.verify_entry(r.entry, lid_a, None)
        assert (r.entry_id, last.entry_id, last.last_add_confirmed, last.length) == (-1, 99, 98, length_a)
    close_ledger(zk, root, lid_a, md_a, length_a)

    # -- ledger B over v3 ---------------------------------------------------------------------------------------
    lid_b = new_ledger_id(zk, root)
    assert lid_b > lid_a
    md_b = create_metadata(zk, root, lid_b, bookies)
    entries_b, length_b = packaged_entries(d, lid_b, "v3")
    with connections(addresses) as conns:
        for c in conns:
            c.send(b"".join(v3.encode_request(v3.add_request(i + 1, lid_b, i, mk, e)) for i, e in enumerate(entries_b)))
        for c in conns:
            acks = [v3.decode_response(f) for f in c.frames(ENTRIES)]
            assert all(v3.response_status(a) == pb.EOK and a.header.operation == pb.ADD_ENTRY for a in acks)
            assert sorted(a.addResponse.entryId for a in acks) == list(range(ENTRIES))
            assert sorted(a.header.txnId for a in acks) == list(range(1, ENTRIES + 1))
        for c in conns:
            c.send(b"".join(v3.encode_request(v3.read_request(1000 + i, lid_b, i)) for i in range(ENTRIES)))
            got = {}
            for f in c.frames(ENTRIES):
                r = v3.decode_response(f)
                assert v3.response_status(r) == pb.EOK
                assert r.header.txnId == 1000 + r.readResponse.entryId
                rr = r.readResponse
                got[rr.entryId] = bytes(d.verify_entry(rr.body, lid_b, rr.entryId).payload)
            assert got == {i: payload("v3", i) for i in range(ENTRIES)}
        # READ_LAC: the bookie's view of the last entry (no explicit LAC was written).
        conns[0].send(v3.encode_request(v3.read_lac_request(5000, lid_b)))
        r = v3.decode_response(conns[0].frames(1)[0])
        assert v3.response_status(r) == pb.EOK
        last = d.verify_entry(r.readLacResponse.lastEntryBody, lid_b, None)
        assert (last.entry_id, last.last_add_confirmed) == (99, 98)
    close_ledger(zk, root, lid_b, md_b, length_b)

    # -- what Java sees -----------------------------------------------------------------------------------------
    check_shell_sees(java_tools, uri, lid_a, bookies, "v2", length_a)
    check_shell_sees(java_tools, uri, lid_b, bookies, "v3", length_b)


def _java_metadata(java_tools, uri: str, ledger_id: int) -> dict[str, Any]:
    proc = java_tools.run(VERSION, "bkspark.tools.JavaClient", "metadata", "--ledger", str(ledger_id),
                          metadata_service_uri=uri)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in proc.stdout.splitlines():
        if line.startswith('{"event":"metadata"'):
            return json.loads(line)
    raise AssertionError(proc.stdout)


def _our_view(md: ledger_metadata.LedgerMetadata) -> dict[str, Any]:
    """Our parse, in the field names JavaClient prints (VectorGen.describeMetadata)."""
    return {
        "ensemble_size": md.ensemble_size,
        "write_quorum_size": md.write_quorum_size,
        "ack_quorum_size": md.ack_quorum_size,
        "state": md.state.name,
        "last_entry_id": md.last_entry_id,
        "length": md.length,
        "has_password": md.password is not None,
        "password": None if md.password is None else md.password.hex(),
        "digest_type": None if md.password is None else md.digest_type.name,
        "ensembles": {str(k): list(v) for k, v in md.ensembles.items()},
        "ctime": md.ctime,
        "custom_metadata": {k: bytes(v).hex() for k, v in md.custom_metadata.items()},
        "ctoken": md.ctoken,
        "format_version": md.format_version,
    }


def test_java_written_ledgers_parse_with_bkspark(java_cluster_factory, java_tools, zk_root) -> None:
    cluster = java_cluster_factory(VERSION, bookies=3)
    zk, root, uri = zk_root.zk_client, zk_root.path, cluster.metadata_service_uri

    # The shell's simpletest creates a ledger, writes, reads and then deletes it: a watch on the hierarchical
    # parent of small ids catches the metadata znode while it exists.
    parent = root + "/00/0000"
    zk.ensure_path(parent)
    captured: dict[str, tuple[bytes, Any]] = {}

    def on_children(children: list[str]) -> None:
        for child in children:
            if child not in captured:
                try:
                    captured[child] = zk.get(f"{parent}/{child}")
                except Exception:  # deleted already: the test below reports that nothing was captured
                    pass

    zk.ChildrenWatch(parent, on_children)
    proc = java_tools.shell(VERSION, uri, "simpletest", "-ensemble", "3", "-writeQuorum", "3",
                            "-ackQuorum", "2", "-numEntries", "10")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"Ledger ID: (\d+)", proc.stdout)
    assert m, proc.stdout
    simple_id = int(m.group(1))
    node = zk_paths.ledger_path(root, simple_id).rsplit("/", 1)[1]
    assert node in captured, (node, captured.keys())
    data, stat = captured[node]
    ours = ledger_metadata.parse(data, znode_ctime=stat.ctime)
    # SimpleTestCommand: E/W/A from the flags, CRC32C, empty password, custom metadata Bookie=simpletest.
    assert (ours.ensemble_size, ours.write_quorum_size, ours.ack_quorum_size) == (3, 3, 2)
    assert (ours.state, ours.last_entry_id, ours.length) == (ledger_metadata.LedgerState.OPEN, -1, 0)
    assert (ours.digest_type, ours.password) == (digest.DigestType.CRC32C, b"")
    assert dict(ours.custom_metadata) == {"Bookie": b"simpletest"}
    assert sorted(ours.ensembles[0]) == sorted(cluster.bookie_ids) and list(ours.ensembles) == [0]
    assert ours.format_version == 3 and ours.ctoken > 0  # LedgerCreateOp's random non-negative cToken
    assert ours.ctime == stat.ctime  # no ctime stored: Java falls back to the znode's ctime
    assert ledger_metadata.serialize(ours) == data
    ledger_ids: list[int] = []

    # JavaClient: an open ledger with custom metadata, and a closed MAC one.
    for extra in (
        ["--digest", "CRC32", "--password", "sécret", "--close", "false", "--custom", "app=spark",
         "--custom", "part=7"],
        ["--digest", "MAC", "--password", "", "--close", "true"],
    ):
        proc = java_tools.run(VERSION, "bkspark.tools.JavaClient", "create-and-write", "--ensemble", "3", "--write",
                              "2", "--ack", "2", "--entries", "5", "--size", "64", *extra, metadata_service_uri=uri)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        created = next(json.loads(x) for x in proc.stdout.splitlines() if x.startswith('{"event":"created"'))
        ledger_ids.append(created["ledger_id"])

    for ledger_id in ledger_ids:
        data, stat = zk.get(zk_paths.ledger_path(root, ledger_id))
        ours = ledger_metadata.parse(data, znode_ctime=stat.ctime)
        java = _java_metadata(java_tools, uri, ledger_id)
        assert java["znode_version"] == stat.version
        expected = {k: v for k, v in java.items() if k not in ("event", "ledger_id", "znode_version")}
        assert _our_view(ours) == expected, ledger_id
        # And our serializer writes those bytes back unchanged (Java keeps cToken only at creation).
        assert ledger_metadata.serialize(ours) == data
        if ledger_id == ledger_ids[0]:
            assert (java["state"], java["custom_metadata"]) == ("OPEN", {"app": b"spark".hex(), "part": b"7".hex()})
            assert java["ctoken"] > 0
        else:
            assert (java["state"], java["last_entry_id"], java["length"], java["digest_type"]) == (
                "CLOSED", 4, 320, "HMAC",
            )
            assert java["ctoken"] == 0  # the close rewrote the metadata without the creation token
