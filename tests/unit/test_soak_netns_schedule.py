"""The namespace soak's fault schedule (bench/soak_netns.py, docs/reliability.md "The soak on namespaces") and the
soak's pure parts it relies on: what a seed draws, the fault log, TCP sockets counted in a process's own namespace."""

from __future__ import annotations

import os
import random
import socket
from typing import Any

import psutil

from bench.soak import HOLD_S, FaultSchedule, connections_by_peer, query_error, tcp_connections, tcp_socket_inodes
from bench.soak_netns import LONG_HOLD_KINDS, LONG_HOLD_S, NETNS_FAULT_KINDS, draw_netns_fault
from tests.campaign.netns_schedule import FAULT_KINDS, LEDGER_DISK_FAULT_KINDS
from tests.harness.netns import PACKET_FAULT_KINDS, Testbed

RACKS = [1, 1, 2, 2]


def _draws(seed: int, n: int = 400) -> list[Any]:
    rng = random.Random(seed)
    return [draw_netns_fault(rng, RACKS) for _ in range(n)]


def test_a_seed_draws_the_same_schedule_and_another_seed_another() -> None:
    assert _draws(7) == _draws(7)
    assert _draws(7) != _draws(8)


def test_every_kind_is_drawn_with_what_the_bed_needs_to_make_it() -> None:
    faults = _draws(1)
    assert {f.kind for f in faults} == set(NETNS_FAULT_KINDS)
    for f in faults:
        # BedFaults.apply (or, for a power cut, the soak itself) makes every kind
        assert f.kind.replace("-", "_") in FAULT_KINDS + LEDGER_DISK_FAULT_KINDS
        if f.kind == "zk-cut":
            assert f.bookie is None
            continue
        assert f.bookie is not None and 0 <= f.bookie < len(RACKS)
        if f.kind == "rack-cut":
            assert f.params["rack"] == RACKS[f.bookie]  # the drawn bookie's rack goes dark
        elif f.kind == "power-cut":
            assert f.params["at_batch"] >= 1
        elif f.kind == "slow-fsync":
            assert f.params["iops"] >= 1
        elif f.kind in PACKET_FAULT_KINDS:
            Testbed._check_packet_fault(f.kind, f.params.get("probability", 0.0), f.params.get("delay_ms", 0.0),
                                        f.params.get("jitter_ms", 0.0), f.params.get("direction", "in"))


def test_some_network_outages_outlast_the_client_timeouts_and_nothing_else_does() -> None:
    faults = _draws(2, 1000)
    long = [f for f in faults if f.hold >= LONG_HOLD_S[0]]
    assert {f.kind for f in long} == set(LONG_HOLD_KINDS)
    assert all(LONG_HOLD_S[0] <= f.hold <= LONG_HOLD_S[1] for f in long)
    assert all(HOLD_S[0] <= f.hold <= HOLD_S[1] for f in faults if f not in long)
    assert any(f.hold < LONG_HOLD_S[0] for f in faults if f.kind in LONG_HOLD_KINDS)


class _Scripted(FaultSchedule):
    """Three faults: the second cannot be made; the schedule stops after the third."""

    def __init__(self) -> None:
        super().__init__(every=0.0, seed=0)
        self.drawn = 0

    def draw(self) -> tuple[str, int | None, float]:
        self.drawn += 1
        if self.drawn == 3:
            self.stop.set()
        return ("link-down", 0, 30.0) if self.drawn != 2 else ("zk-cut", None, 5.0)

    def make(self, kind: str, target: int | None, hold: float) -> Any:
        if kind == "zk-cut":
            raise RuntimeError("no route")
        return {"writer_failures": 2}


def test_the_fault_log_says_what_each_fault_did_and_counts_only_those_made() -> None:
    schedule = _Scripted()
    schedule._run()  # on this thread: draws until its third fault stops it
    assert schedule.done == {"link-down": 2}
    assert [entry[1:4] for entry in schedule.log] == [("link-down", 0, 30.0), ("zk-cut", None, 5.0), ("link-down", 0, 30.0)]
    assert schedule.log[0][4] == {"writer_failures": 2}
    assert schedule.log[1][4] == {"failed": "RuntimeError('no route')"}


def test_tcp_sockets_are_read_from_the_process_table_and_counted_as_psutil_does() -> None:
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:0885 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41414 1 0\n"
        "   1: 0100007F:9C40 0100007F:0885 01 00000000:00000000 00:00000000 00000000     0        0 42424 1 0\n"
    )
    assert tcp_socket_inodes(table) == {41414, 42424}
    with socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname()):
            ours = tcp_connections(os.getpid())
            assert ours == len(psutil.Process().net_connections(kind="tcp")) and ours >= 2
            host, port = server.getsockname()
            assert connections_by_peer(psutil.Process()).get(f"{host}:{port}") == 1  # the client's; the listener has none


def test_a_query_error_names_the_python_exception_a_worker_raised() -> None:
    worker = (
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):\n"
        '  File "bkspark/client/ops.py", line 108, in _request\n'
        "    return await fut\n"
        "bkspark.errors.BookieUnavailableError: connection to bookie closed by this client (bookie_id='198.18.1.10:3181')\n"
        " SQLSTATE: 38000\n"
    )
    assert query_error(worker).startswith("bkspark.errors.BookieUnavailableError: connection to bookie closed")
    assert query_error("Python worker failed to connect back.\nat ...") == "Python worker failed to connect back."
