"""Jepsen's split for one bookie that crashes under load: writer threads log each operation as invoke, then ok / fail /
info (no answer: the bookie died) in a :class:`History`; after the restart :func:`violations` judges the history
against what the bookie returns, knowing nothing of how the crash was made (docs/bookie.md, "Acknowledgement after
sync, proven" and "Failures between the steps")."""

from __future__ import annotations

import threading
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field

from bkspark.protocol import v2
from bkspark.protocol.digest import master_key
from tests.harness.python_bookie import LedgerEntries, PythonBookieCluster, RawBookieConnection

__all__ = [
    "History",
    "workload",
    "run_writers_until_the_crash",
    "restart_after_its_own_crash",
    "violations",
    "unanswered_operations_lost",
]

#: A master key no workload uses: an add with it must get EUA on every ledger the workload made.
WRONG_KEY = master_key(b"not-the-key")
#: The entry id a checker's probing add uses (far past any the workload writes).
PROBE_ENTRY = 10_000


@dataclass
class History:
    """Operations as the clients saw them: ``(kind, ledger, entry)`` -> "ok" / "fail" / "info"."""

    outcomes: dict[tuple[str, int, int], str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def invoke(self, op: tuple[str, int, int]) -> None:
        with self.lock:
            self.outcomes[op] = "info"  # until an answer says otherwise

    def complete(self, op: tuple[str, int, int], ok: bool) -> None:
        with self.lock:
            self.outcomes[op] = "ok" if ok else "fail"

    def of(self, kind: str, outcome: str) -> list[tuple[str, int, int]]:
        return sorted(op for op, o in self.outcomes.items() if op[0] == kind and o == outcome)


def workload(port: int, ledger: int, history: History, entries: LedgerEntries) -> None:
    """Pipelined adds to one ledger (its first add binds the master key); every 50 adds a fence of a side ledger.
    Runs until the bookie goes away."""
    conn = RawBookieConnection(port, timeout=30)
    try:
        eid = 0
        side = ledger * 1000
        while True:
            # A side ledger: 3 adds, then a fencing read (acknowledged only once the fence is durable).
            for e in range(3):
                history.invoke(("add", side, e))
                resp = conn.call_v2(entries.add_request(side, e))
                history.complete(("add", side, e), resp.rc == v2.EOK)
            history.invoke(("fence", side, -1))
            resp = conn.call_v2(v2.encode_read_request(side, -1, v2.FLAG_DO_FENCING, entries.master_key))
            history.complete(("fence", side, -1), resp.rc == v2.EOK)
            side += 1
            batch = []
            for _ in range(50):
                history.invoke(("add", ledger, eid))
                batch.append(entries.add_request(ledger, eid))
                eid += 1
            conn.send(b"".join(batch))
            for _ in batch:
                resp = v2.decode_response(conn.recv())
                history.complete(("add", resp.ledger_id, resp.entry_id), resp.rc == v2.EOK)
    except (ConnectionError, OSError):
        return  # the crash
    finally:
        conn.close()


def run_writers_until_the_crash(port: int, entries: LedgerEntries, writers: int) -> History:
    """:func:`workload` on ledgers 1..``writers``, one thread each, until the bookie dies; their history."""
    history = History()
    threads = [
        threading.Thread(target=workload, args=(port, ledger, history, entries), daemon=True)
        for ledger in range(1, writers + 1)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return history


def a_request_it_dies_in(request: Callable[[], object], attempts: int = 10) -> None:
    """Send ``request`` (an admin call that makes a bookie reach its armed fault point) until its answer never comes
    (an OSError that is not an HTTP answer: the connection died with the bookie). An HTTP answer, an error one
    included (a round that failed on a loaded machine, e.g. on a ZooKeeper call right after the start), means the
    bookie is alive and did not reach the point: the request is sent again, ``attempts`` times at most."""
    answer: object = None
    for _ in range(attempts):
        try:
            answer = request()
        except urllib.error.HTTPError as exc:  # an answer: the bookie is alive
            answer = f"HTTP {exc.code}: {exc.read()[:200]!r}"
        except OSError:
            return
        time.sleep(1.0)
    raise AssertionError(f"the bookie answered {attempts} times and never reached its fault point: {answer}")


def restart_after_its_own_crash(cluster: PythonBookieCluster, i: int, last_words: str) -> None:
    """Bookie i killed itself at a test fault point (its log says ``last_words``): start it again without faults."""
    bookie = cluster.bookies[i]
    assert bookie.process is not None
    assert bookie.process.wait_exit(60) != 0, "the bookie did not reach its fault point"
    assert last_words in bookie.log_tail(400)
    bookie.fault_env = {}
    cluster.crash(i)  # dead already: this drops its registration
    cluster.start(i, timeout=90)


#: Reads :func:`violations` keeps in flight on its one connection.
READ_WINDOW = 256


def violations(port: int, history: History, entries: LedgerEntries) -> list[str]:
    """Every acknowledged add is readable with its bytes, every acknowledged fence holds, every ledger with an
    acknowledged add still knows its master key.  Returns the violations."""
    found = []
    with RawBookieConnection(port) as c:
        acked = [(ledger, eid) for _, ledger, eid in history.of("add", "ok")]
        for start in range(0, len(acked), READ_WINDOW):  # pipelined: tens of thousands of reads, not round trips
            window = acked[start:start + READ_WINDOW]
            c.send(b"".join(v2.encode_read_request(ledger, eid) for ledger, eid in window))
            answers = {}
            for _ in window:
                resp = v2.decode_response(c.recv())
                answers[(resp.ledger_id, resp.entry_id)] = resp
            for ledger, eid in window:
                resp = answers.get((ledger, eid))
                if resp is None or resp.rc != v2.EOK or bytes(resp.entry) != entries.entry(ledger, eid):
                    found.append(f"acknowledged add {ledger}/{eid} lost (rc {None if resp is None else resp.rc})")
        for _, ledger, _ in history.of("fence", "ok"):
            rc = c.call_v2(entries.add_request(ledger, PROBE_ENTRY)).rc
            if rc != v2.EFENCED:
                found.append(f"acknowledged fence of ledger {ledger} lost (add got rc {rc})")
        for ledger in sorted({lg for _, lg, _ in history.of("add", "ok")}):
            wrong = v2.encode_add_request(0, WRONG_KEY, entries.entry(ledger, 2 * PROBE_ENTRY))
            rc = c.call_v2(wrong).rc
            if rc != v2.EUA:
                found.append(f"master key of ledger {ledger} lost (wrong-key add got rc {rc})")
    return found


def unanswered_operations_lost(port: int, history: History, entries: LedgerEntries) -> int:
    """How many operations that got no answer left no trace after the restart (the crash really dropped bytes):
    adds that cannot be read, fences not in effect."""
    lost = 0
    with RawBookieConnection(port) as c:
        for _, ledger, eid in history.of("add", "info"):
            if c.call_v2(v2.encode_read_request(ledger, eid)).rc != v2.EOK:
                lost += 1
        for _, ledger, _ in history.of("fence", "info"):
            if c.call_v2(entries.add_request(ledger, PROBE_ENTRY)).rc != v2.EFENCED:
                lost += 1
    return lost
