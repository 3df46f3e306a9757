"""Malformed frames thrown at a running Python bookie: it never dies and stored entries never change."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bkspark.protocol import v2, v3
from bkspark.protocol.digest import Digester, master_key
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
from tests.harness.python_bookie import PythonBookieCluster, RawBookieConnection

pytestmark = [pytest.mark.integration, pytest.mark.fault]

KEY = master_key(b"fuzz")
DIGEST = Digester("CRC32C", b"fuzz")
STORED = {(7, i): DIGEST.package_entry(7, i, i - 1, 0, b"fuzz-stored-%d" % i) for i in range(5)}


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def valid_requests() -> list[bytes]:
    """Well-formed requests to mutate (against the stored ledger, with a wrong key)."""
    wrong = master_key(b"attacker")
    return [
        v2.encode_add_request(0, wrong, DIGEST.package_entry(7, 0, -1, 0, b"overwrite")),
        v2.encode_read_request(7, 1),
        v2.encode_read_request(7, -1, v2.FLAG_DO_FENCING, wrong),
        v2.encode_batch_read_request(7, 0, 1, 10, 1 << 20),
        v2.encode_auth_request("AuthDisabledPlugin", b""),
        v3.encode_request(v3.add_request(1, 7, 0, wrong, DIGEST.package_entry(7, 0, -1, 0, b"overwrite"))),
        v3.encode_request(v3.read_request(2, 7, -1, previous_lac=1, timeout_ms=50, piggyback=True)),
        v3.encode_request(v3.write_lac_request(3, 7, 4, wrong, DIGEST.package_lac(7, 4))),
        v3.encode_request(v3.batch_read_request(4, 7, 0, 5, 1000)),
        v3.encode_request(v3.get_list_of_entries_request(5, 7)),
    ]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(valid_requests())))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "truncate", "extend", "length"]))
        if kind == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= draw(st.integers(1, 255))
        elif kind == "truncate" and len(data) > 1:
            del data[draw(st.integers(1, len(data) - 1)) :]
        elif kind == "extend":
            data += draw(st.binary(max_size=64))
        elif kind == "length" and len(data) >= 4:
            data[0:4] = struct.pack(">I", draw(st.integers(0, 0xFFFFFFFF)))
    return bytes(data)


v2_headers = st.builds(
    lambda version, opcode, flags, tail: frame(struct.pack(">I", (version << 24) | (opcode << 16) | flags) + tail),
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, 0xFFFF),
    st.binary(max_size=80),
)
v3_random_ops = st.builds(
    lambda op, version, txn, priority: v3.encode_request(
        pb.Request(header=pb.BKPacketHeader(version=version, operation=op, txnId=txn, priority=priority))
    ),
    st.sampled_from([v for v in pb.OperationType.values()]),
    st.sampled_from([v for v in pb.ProtocolVersion.values()]),
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**32 - 1),
)
streams = st.lists(
    st.one_of(st.binary(max_size=200), st.binary(max_size=200).map(frame), v2_headers, v3_random_ops, mutated()),
    min_size=1,
    max_size=4,
).map(b"".join)


def blast(port: int, data: bytes) -> None:
    """Send bytes, half-close, drain whatever comes back until the bookie closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except (ConnectionError, socket.timeout):
            pass


def test_fuzzed_frames_never_crash_the_bookie(zk_root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = PythonBookieCluster(zk_root.metadata_service_uri, tmp_path, bookies=1, journal_sync_data=False)
    with cluster:
        port = cluster.bookies[0].port
        with RawBookieConnection(port) as c:
            for (_ledger, _eid), data in sorted(STORED.items()):
                assert c.call_v2(v2.encode_add_request(0, KEY, data)).rc == v2.EOK

        @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(streams)
        def fuzz(data: bytes) -> None:
            blast(port, data)

        fuzz()
        assert cluster.bookies[0].is_alive, cluster.log_tail(0)
        with RawBookieConnection(port) as c:
            for (ledger, eid), data in STORED.items():
                assert bytes(c.call_v2(v2.encode_read_request(ledger, eid)).entry) == data
            # Not fenced by any fuzzed request (all carried a wrong key).
            nxt = DIGEST.package_entry(7, 5, 4, 0, b"after the fuzz")
            assert c.call_v2(v2.encode_add_request(0, KEY, nxt)).rc == v2.EOK
        assert cluster.http_get(0, "/heartbeat") == "OK\n"
        assert "Traceback" not in cluster.log_tail(0, 2000)
