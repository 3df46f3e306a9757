"""The soak (docs/reliability.md, "The soak"): ``make soak MINUTES=N`` or ``python -m bench.soak --minutes N``.

For N minutes, on one ZooKeeper and four Python bookies (fsync'd journals) on loopback:

* a **writer** (bkspark's client) appends rows to ledgers of its own (ids from ``SOURCE_BASE``, so no other
  ledger falls in the stream's range), about 50 a second, closing each ledger after ``ENTRIES_PER_LEDGER``;
* a **streaming query** follows those ledgers (``spark.readStream`` with a ledger range listed again at every
  trigger) into the **exactly-once sink** (``writeStream``, dataset ``soak``);
* a **batch job** every ``--batch-every`` seconds reads the sink's dataset (``spark.read``) and counts it;
* a **fault schedule** (``Faults``, seeded by ``--seed``): every ``--fault-every`` seconds one fault of
  ``FAULT_KINDS`` (a bookie killed, paused, or power-cut at its journal's fault point; the link to one bookie
  delayed or black-holed in one direction; the writer's ZooKeeper session expired; every ZooKeeper connection
  dropped), lifted within ``HOLD_S``; never more than one at a time. Every client reaches ZooKeeper and the
  bookies through the harness's fault proxies (tests/harness/proxy.py).

Every ``--sample-every`` seconds it records RSS, open file descriptors, threads and TCP connections of every
process it started: this one (the client: writer, Spark driver; the fault proxies apart), Spark's JVM, Spark's
Python workers, the stream's runners, ZooKeeper and each bookie; the stream's lag; the load average. Every
``--dump-every`` seconds it counts Spark's JVM's threads by pool (``jcmd Thread.print``), and each Spark Python
process's ZooKeeper sessions (one per bkspark client it holds). At the end it stops the writer, waits for the stream to catch up, and reads the dataset: every
acknowledged row must be there exactly once, and no row the writer never tried.

**Growth rule** (``grows_without_bound``): the warm-up is left out: the first ``WARM_UP`` of the run, and at least
``WARM_UP_PERIODS`` batch-job periods (JVM warm-up, caches that fill as each kind of work first reaches a
process); the rest is cut in two halves; a series grows without bound when the second half's peak exceeds the
first half's by more than ``GROWTH_TOLERANCE`` of it and more than the series' floor (``FLOORS``: a few MiB,
fds, threads or connections, a few thousand entries of lag). A leak raises every later peak; a flat series
with noise, or one that restarts (a killed bookie), does not.

Writes ``--out`` (JSON: samples, verdicts, figures) and ``--png`` (the picture); exits 1 when a series grows
without bound or a row is missing or duplicated.

``--netns`` runs the same soak (:func:`soak`, on a :class:`Bed`) on the namespace test bed under faults made by the
kernel and the disks (bench/soak_netns.py; docs/reliability.md, "The soak on namespaces").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.common import Cluster, spark_session
from bkspark.client import BookKeeper
from bkspark.errors import invalidates_client
from tests.harness.proxy import FaultProxy, proxied_bookie_id

#: The writer's ledger ids start here: far above the ids ZooKeeper hands out (the sink's ledgers).
SOURCE_BASE = 1_000_000_000
ENTRIES_PER_LEDGER = 1500
DATASET = "soak"
#: Share of the run left out of the growth rule (warm-up).
WARM_UP = 0.2
#: ... and at least this many periods of the slowest periodic work, the batch job: what fills up as each kind of
#: work first reaches a process (a Python worker's one client per set of client settings, Spark's pools sized by
#: the work of their last minute) has then reached every process that serves it.
WARM_UP_PERIODS = 2
DEFAULT_BATCH_EVERY = 180.0
GROWTH_TOLERANCE = 0.10
#: The least rise that counts as growth, per metric.
FLOORS = {"rss_mib": 24.0, "fds": 16.0, "threads": 8.0, "connections": 8.0, "lag_entries": 3000.0,
          "behind_entries": 3000.0, "index_reader_slots": 8.0, "clients": 2.0, "connections_per_client": 1.0}
#: The soak's bookies.
BOOKIES = 4
#: The most connections one bkspark client holds: its ZooKeeper session, and a v2 and a v3 connection to each
#: bookie, opened when first needed (bkspark/client/pool.py).
CLIENT_CONNECTIONS_BOUND = 1 + 2 * BOOKIES
#: The roles whose processes hold bkspark clients that reach ZooKeeper and the bookies through the fault proxies.
CLIENT_ROLES = ("client", "python-workers", "stream-runners")
#: Every client (the writer's, Spark's) dials a BookieId as the host:port it spells: the bookie's fault proxy.
CLIENT_CONF = {"addEntryTimeoutSec": 5, "readEntryTimeoutSec": 5, "explicitLacInterval": 500,
               "bookieAddressResolverEnabled": False}
METRICS = ("rss_mib", "fds", "threads", "connections")
#: Spark's JVM starts with its whole heap committed and touched, so that its RSS moves only with memory outside the
#: heap (metaspace, code cache, threads, direct buffers: where a leak would be) and not as G1 takes in more of the
#: heap over the run, which the second 30-minute soak read as growth (docs/reliability.md, "The soak"); the heap's
#: own use is sampled apart (``jcmd GC.heap_info``).
JVM_HEAP = "1g"
JVM_OPTIONS = f"-Xms{JVM_HEAP} -XX:+AlwaysPreTouch"
#: Restarts of the streaming query after which the soak gives up. Spark waits a fixed 10 s for a new Python
#: worker to connect back, which a loaded machine's interpreter start-up can miss ("Python worker failed to
#: connect back"): each such failure is recorded and the query restarted, as an operator would.
MAX_QUERY_RESTARTS = 40


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- the writer ------------------------------------------------------------------------------------------------------


class Writer:
    """Appends rows to ledgers ``SOURCE_BASE, SOURCE_BASE + 1, ...``; remembers what was acknowledged."""

    def __init__(self, uri: str, rate: float, conf: dict[str, Any] | None = None) -> None:
        self.uri = uri
        self.conf = CLIENT_CONF if conf is None else conf
        self.pause = 1.0 / rate
        self.acked: set[str] = set()
        #: Rows whose add failed or was never answered: they may be in the sink (once) or not.
        self.unknown: set[str] = set()
        self.ledgers = 0
        #: Ledger id -> rows acknowledged in it.
        self.acked_in: Counter[int] = Counter()
        self.failures = 0
        #: The writer's client once open (the ZooKeeper session-expiry fault expires its session).
        self.client: BookKeeper | None = None
        self.clients_reopened = 0
        #: Ledgers left open by a failure, to be closed by recovery (else the stream would wait on them).
        self.to_recover: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="soak-writer", daemon=True)

    def _run(self) -> None:
        k = 0
        while not self.stop.is_set():
            # As the connector does (bkspark/datasource/clients.py): a client an error invalidates (a ZooKeeper
            # session expired, a reconnection given up after zkTimeout) is closed and a new one opened.
            with BookKeeper(self.uri, conf=self.conf) as bk:
                self.client = bk
                k = self._write(bk, k)
            if not self.stop.is_set():
                self.clients_reopened += 1
                _log("writer: its client was invalidated; opening a new one")

    def _write(self, bk: BookKeeper, k: int) -> int:
        """Write ledgers from id ``SOURCE_BASE + k`` on until stopped or ``bk`` is invalidated; the next k."""
        while not self.stop.is_set():
            lid = SOURCE_BASE + k
            k += 1
            try:
                lh = bk.create_ledger_adv(lid, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
            except Exception as exc:  # noqa: BLE001 - a fault: try the next id
                _log(f"writer: create {lid} failed: {exc!r}")
                self.failures += 1
                if invalidates_client(exc):
                    return k
                time.sleep(1)
                continue
            self.ledgers += 1
            error: Exception | None = None
            for i in range(ENTRIES_PER_LEDGER):
                if self.stop.is_set():
                    break
                row = f"{lid}-{i}"
                try:
                    lh.append(row.encode())
                except Exception as exc:  # noqa: BLE001 - outcome unknown; this ledger is done
                    _log(f"writer: add {row} failed: {exc!r}")
                    self.unknown.add(row)
                    self.failures += 1
                    error = exc
                    break
                self.acked.add(row)
                self.acked_in[lid] += 1
                time.sleep(self.pause)
            try:
                if error is not None and invalidates_client(error):
                    self.to_recover.append(lid)  # recovered by the next client
                    return k
                if error is not None:
                    bk.open_ledger(lid, recovery=True).close()  # recovery closes it for the stream
                else:
                    lh.close()
            except Exception as exc:  # noqa: BLE001 - recovered by the next client
                _log(f"writer: closing {lid} failed: {exc!r}")
                self.to_recover.append(lid)
                if invalidates_client(exc):
                    return k
            while self.to_recover and not self.stop.is_set():
                try:
                    bk.open_ledger(self.to_recover[0], recovery=True).close()
                    self.to_recover.pop(0)
                except Exception as exc:  # noqa: BLE001 - tried again after the next ledger
                    _log(f"writer: recovering {self.to_recover[0]} failed: {exc!r}")
                    if invalidates_client(exc):
                        return k
                    break
        return k


# -- faults ----------------------------------------------------------------------------------------------------------


#: The fault kinds of the schedule, each drawn as often (docs/reliability.md, "The soak").
FAULT_KINDS = ("kill", "pause", "power-cut", "delay", "blackhole", "zk-expire", "zk-drop")
#: Faults that are made at once and need no lifting (what they start, a new session or a reconnection, is the
#: client's to do).
INSTANT_FAULTS = ("zk-expire", "zk-drop")
#: How long a bookie stays down, paused or cut off (s): each fault is lifted within it, so the stream's lag stays
#: bounded; a hold longer than the client's timeouts (5 s) makes the client replace the bookie, a shorter one not.
HOLD_S = (5.0, 15.0)
#: The group commit at which a power-cut bookie dies, counted from its restart (a few seconds of adds).
POWER_CUT_BATCH = (20, 200)


class FaultSchedule:
    """One fault at a time, every ``every`` seconds (after the last one was lifted), drawn by :meth:`draw` from a
    seeded generator and made by :meth:`make`; counted by kind (``done``) and logged in order (``log``: seconds since
    the start, kind, bookie or None, hold in seconds, and what :meth:`make` returned about it)."""

    #: Faults that are made at once and need no lifting.
    instant: tuple[str, ...] = ()

    def __init__(self, every: float, seed: int) -> None:
        self.every = every
        self.rng = random.Random(seed)
        self.done: Counter[str] = Counter()
        self.log: list[tuple[Any, ...]] = []
        self.t0 = time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="soak-faults", daemon=True)

    def draw(self) -> tuple[str, int | None, float]:
        """The next fault: (kind, bookie or None, hold in seconds)."""
        raise NotImplementedError

    def make(self, kind: str, target: int | None, hold: float) -> Any:
        """Make the fault and lift it (within ``hold``); what it did, for the log (None: nothing to say)."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            kind, target, hold = self.draw()
            lasting = kind not in self.instant
            _log(f"fault: {kind}{'' if target is None else f' bookie {target}'}{f' for {hold:.0f} s' if lasting else ''}")
            entry = (round(time.monotonic() - self.t0, 1), kind, target, round(hold, 1) if lasting else 0.0)
            try:
                outcome = self.make(kind, target, hold)
            except Exception as exc:  # noqa: BLE001 - a fault that could not be made is logged, not fatal
                _log(f"fault: {kind} failed: {exc!r}")
                self.log.append((*entry, {"failed": repr(exc)[:300]}))
                continue
            self.log.append(entry if outcome is None else (*entry, outcome))
            self.done[kind] += 1


class Faults(FaultSchedule):
    """One fault at a time, drawn from ``FAULT_KINDS`` every ``every`` seconds and lifted within ``HOLD_S``:

    * ``kill``: kill -9 one bookie, start it again;
    * ``pause``: SIGSTOP one bookie (a hung process), SIGCONT;
    * ``power-cut``: restart one bookie with the journal's power-cut fault point armed
      (``bookie_server.journal.JournalFaults``): at its N-th group commit it SIGKILLs itself before the fsync,
      so what it wrote since its last fsync is really lost; then it is started again unarmed;
    * ``delay``: every byte between the clients and one bookie held 0.2 to 1 s (its fault proxy);
    * ``blackhole``: one direction between the clients and one bookie swallowed (connections stay open);
    * ``zk-expire``: the writer's ZooKeeper session expired (its client must open a new one and go on);
    * ``zk-drop``: every client's ZooKeeper connection closed (a ZooKeeper server restart): they reconnect and
      keep their sessions.
    """

    instant = INSTANT_FAULTS

    def __init__(self, bookies: Any, bookie_proxies: list[Any], zk_proxy: Any, writer: "Writer", zk_connect: str,
                 every: float, seed: int) -> None:
        super().__init__(every, seed)
        self.bookies = bookies
        self.bookie_proxies = bookie_proxies
        self.zk_proxy = zk_proxy
        self.writer = writer
        self.zk_connect = zk_connect

    def draw(self) -> tuple[str, int | None, float]:
        kind = self.rng.choice(FAULT_KINDS)
        i = self.rng.randrange(len(self.bookies.bookies))
        hold = self.rng.uniform(*HOLD_S)
        return kind, None if kind.startswith("zk") else i, hold

    def make(self, kind: str, target: int | None, hold: float) -> None:
        getattr(self, "_" + kind.replace("-", "_"))(target, hold)

    def _kill(self, i: int, hold: float) -> None:
        self.bookies.kill(i)
        time.sleep(hold)
        self.bookies.start(i, timeout=120)

    def _pause(self, i: int, hold: float) -> None:
        pid = self.bookies.bookies[i].process.pid
        os.kill(pid, signal.SIGSTOP)
        time.sleep(hold)
        os.kill(pid, signal.SIGCONT)

    def _power_cut(self, i: int, hold: float) -> None:
        from bookie_server.journal import JournalFaults

        bookie = self.bookies.bookies[i]
        self.bookies.crash(i)
        bookie.fault_env = {JournalFaults.POWER_CUT_ENV: str(self.rng.randint(*POWER_CUT_BATCH))}
        try:
            self.bookies.start(i, timeout=120)
        finally:
            bookie.fault_env = {}  # read at launch only: the next start is unarmed
        try:
            bookie.process.wait_exit(60)
        except Exception:  # noqa: BLE001 - too few adds reached it in a minute: cut it the plain way
            pass
        self.bookies.crash(i)  # dead (or killed now): its registration goes at once
        time.sleep(hold)
        self.bookies.start(i, timeout=120)

    def _delay(self, i: int, hold: float) -> None:
        self.bookie_proxies[i].delay(self.rng.uniform(0.2, 1.0))
        time.sleep(hold)
        self.bookie_proxies[i].restore()

    def _blackhole(self, i: int, hold: float) -> None:
        from tests.harness.proxy import Direction

        self.bookie_proxies[i].blackhole(self.rng.choice((Direction.UP, Direction.DOWN)))
        time.sleep(hold)
        self.bookie_proxies[i].restore()

    def _zk_expire(self, i: int, hold: float) -> None:
        from bkspark.datasource.clients import client_zk
        from tests.harness.zookeeper import expire_session

        bk = self.writer.client
        if bk is None:
            raise RuntimeError("the writer has no client yet")
        expire_session(self.zk_connect, client_zk(bk).client_id)

    def _zk_drop(self, i: int, hold: float) -> None:
        self.zk_proxy.drop()


# -- sampling --------------------------------------------------------------------------------------------------------


def tcp_socket_inodes(table: str) -> set[int]:
    """The socket inodes of a /proc/<pid>/net/tcp or tcp6 table (a header line, then one socket a line, its inode
    the tenth field)."""
    inodes = set()
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 9 and fields[9].isdigit():
            inodes.add(int(fields[9]))
    return inodes


def tcp_connections(pid: int) -> int:
    """The process's TCP sockets (listening ones too, as psutil's ``net_connections(kind="tcp")`` counts them), read
    in the process's own network namespace: psutil reads this process's /proc/net, which on the namespace test bed
    does not list a bookie's or ZooKeeper's sockets (each host is a namespace of its own)."""
    inodes: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            inodes |= tcp_socket_inodes(Path(f"/proc/{pid}/net/{table}").read_text())
        except FileNotFoundError:
            continue
    count = 0
    with os.scandir(f"/proc/{pid}/fd") as fds:
        for fd in fds:
            try:
                link = os.readlink(fd.path)
            except OSError:  # closed meanwhile
                continue
            if link.startswith("socket:[") and int(link[8:-1]) in inodes:
                count += 1
    return count


def _measure(proc: psutil.Process) -> dict[str, float]:
    with proc.oneshot():
        measured = {
            "rss_mib": proc.memory_info().rss / 2**20,
            "fds": float(proc.num_fds()),
            "threads": float(proc.num_threads()),
        }
    try:
        measured["connections"] = float(tcp_connections(proc.pid))
    except FileNotFoundError as exc:  # the process is gone
        raise psutil.NoSuchProcess(proc.pid) from exc
    return measured


_HEAP_LINE = re.compile(r"(?:heap|generation)\s+total (\d+)K, used (\d+)K")


def heap_sizes(heap_info: str) -> dict[str, float] | None:
    """The Java heap's committed and used MiB from ``jcmd <pid> GC.heap_info`` (G1's one line, or the Serial
    collector's generations summed); None when it says neither."""
    found = [(int(total), int(used)) for total, used in _HEAP_LINE.findall(heap_info)]
    if not found:
        return None
    return {"committed_mib": sum(t for t, _ in found) / 1024, "used_mib": sum(u for _, u in found) / 1024}


def jvm_heap(pid: int) -> dict[str, float] | None:
    """Spark's JVM's heap now (its RSS rises as the heap is committed, up to spark.driver.memory)."""
    try:
        info = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return heap_sizes(info)


def spark_jvm_flags(bookies: Any) -> list[str]:
    """The heap flags Spark's JVM runs with (from its command line): :data:`JVM_OPTIONS` must be among them, or the
    JVM's RSS would measure its heap's growth (raises when they are not)."""
    jvms = _roles(bookies)["spark-jvm"]
    flags = [arg for arg in (jvms[0].cmdline() if jvms else []) if arg.startswith(("-Xm", "-XX:+AlwaysPreTouch"))]
    missing = [flag for flag in JVM_OPTIONS.split() if flag not in flags]
    if missing:
        raise RuntimeError(f"Spark's JVM does not run with {missing} (its heap flags: {flags})")
    return flags


def connections_by_peer(proc: psutil.Process) -> dict[str, int]:
    """The process's connected TCP sockets by remote ``address:port`` (ZooKeeper, each bookie, Spark's JVM): which
    peer a growing connection count is to (a Spark Python process runs in this process's network namespace, where
    psutil sees its sockets)."""
    return dict(Counter(f"{c.raddr.ip}:{c.raddr.port}" for c in proc.net_connections(kind="tcp") if c.raddr))


def zookeeper_sessions(proc: psutil.Process, zk_port: int) -> int:
    """The process's TCP connections to ZooKeeper: one per bkspark client it holds (each client has one
    ZooKeeper session), so a Spark Python worker's count is the number of clients it has cached
    (bkspark/datasource/clients.py)."""
    return sum(1 for c in proc.net_connections(kind="tcp") if c.raddr and c.raddr.port == zk_port)


def _roles(bookies: Any) -> dict[str, list[psutil.Process]]:
    """Every bkspark process now, by role."""
    me = psutil.Process()
    roles: dict[str, list[psutil.Process]] = {"client": [me], "spark-jvm": [], "python-workers": [], "stream-runners": [],
                                              "zookeeper": []}
    for child in me.children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if child.name() == "java":  # by main class: the run's temporary directory's name says "bkspark"
            if "org.apache.spark.deploy.SparkSubmit" in cmd:
                roles["spark-jvm"].append(child)
            elif "org.apache.zookeeper" in cmd:
                roles["zookeeper"].append(child)
        elif "pyspark.sql.streaming" in cmd:  # the stream's planner (its source's reader) and the sink's committer
            roles["stream-runners"].append(child)
        elif "pyspark" in cmd:  # daemons and the workers they fork: tasks, data source lookups and writes
            roles["python-workers"].append(child)
    for i, bookie in enumerate(bookies.bookies):
        pid = bookie.process.pid if bookie.process is not None and bookie.is_alive else None
        roles[f"bookie-{i}"] = [psutil.Process(pid)] if pid else []
    return roles


def _split_proxies(proc: psutil.Process, measured: dict[str, float], proxies: "Proxies") -> dict[str, float]:
    """Take the fault proxies' share out of this process's figures (they run in it as one thread each): their
    sockets, accepted on a proxy's port or dialled to a bookie's or ZooKeeper's own port (the harness's own
    ZooKeeper client's one connection counts with them). Returns the proxies' figures."""
    ours = [c for c in proc.net_connections(kind="tcp")
            if c.laddr.port in proxies.ports or (c.raddr and c.raddr.port in proxies.targets)]
    share = {"rss_mib": 0.0, "fds": float(len(ours)), "threads": float(len(proxies.ports)), "connections": float(len(ours))}
    for key in ("fds", "threads", "connections"):
        measured[key] -= share[key]
    return share


class Proxies:
    """The soak's fault proxies: their listening ports and the ports they forward to."""

    def __init__(self, zk: FaultProxy, bookies: list[FaultProxy], zk_port: int, bookie_ports: list[int]) -> None:
        self.zk, self.bookies = zk, bookies
        self.ports = {zk.port, *(p.port for p in bookies)}
        self.targets = {zk_port, *bookie_ports}


def sample(bookies: Any, detail: dict[str, list[float]], proxies: Proxies | None, zk_port: int,
           peers: dict[str, dict[str, int]] | None = None) -> dict[str, dict[str, float]]:
    """Each role's metrics summed over its processes (a role with no live process is left out); ``detail`` gets
    each Spark Python process's own [threads, fds, connections, ZooKeeper sessions] by "<module> <pid>" (to tell
    which one grows, and whether by cached clients: each client holds one ZooKeeper session, dialled to
    ``zk_port``), and ``peers`` (when given) each one's TCP connections by remote address (:func:`connections_by_peer`).
    The fault proxies' share (when there are proxies) is taken out of the client's."""
    out: dict[str, dict[str, float]] = {}
    for role, procs in _roles(bookies).items():
        total = dict.fromkeys(METRICS, 0.0)
        seen = 0
        for proc in procs:
            try:
                measured = _measure(proc)
                if role == "client" and proxies is not None:
                    out["fault-proxies"] = _split_proxies(proc, measured, proxies) | {"processes": 1.0}
                if role in ("python-workers", "stream-runners"):
                    name = f"{proc.cmdline()[-1]} {proc.pid}"
                    detail[name] = [
                        *(measured[k] for k in ("threads", "fds", "connections")),
                        float(zookeeper_sessions(proc, zk_port)),
                    ]
                    if peers is not None:
                        peers[name] = connections_by_peer(proc)
            except psutil.Error:
                continue
            for key, value in measured.items():
                total[key] += value
            seen += 1
        if seen:
            out[role] = total | {"processes": float(seen)}
            if role.startswith("bookie-") and (slots := index_reader_slots(bookies, int(role[7:]))) is not None:
                out[role]["index_reader_slots"] = slots
    return out


def index_reader_slots(bookies: Any, i: int) -> float | None:
    """Slots of bookie i's entry-index reader table its process holds (the gauge ``bookie_index_reader_slots``,
    active and idle: docs/bookie.md, "The entry index's reader slots"); None when its HTTP endpoint does not answer
    (a bookie killed or paused by a fault)."""
    try:
        return sum(bookies.metric(i, "bookie_index_reader_slots", http_timeout=2.0, state=state) or 0.0 for state in ("active", "idle"))
    except OSError:
        return None


def stream_lag(query: Any) -> float | None:
    """Entries confirmed in the source and not yet planned into a micro-batch (the source's progress report)."""
    progress = query.lastProgress
    if not progress:
        return None
    try:
        latest = json.loads(progress["sources"][0]["latestOffset"])
        return float(latest["lag"]["entries"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def rows_behind(query: Any, writer: "Writer") -> float | None:
    """Rows acknowledged to the writer and not yet in a finished micro-batch (each entry is one row): the stream's
    lag from end to end, where ``stream_lag`` counts only what the last planned batch left behind."""
    progress = query.lastProgress
    if not progress:
        return None
    try:
        ledgers = json.loads(progress["sources"][0]["endOffset"])["ledgers"]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    read = 0
    for key, position in ledgers.items():
        lid = int(key.split(":")[-1])
        read += writer.acked_in.get(lid, 0) if position == "done" else int(position)
    return float(len(writer.acked) - read)


#: A thread's name with its numbers taken out: the pool it belongs to ("Executor task launch worker for task 12.0 in
#: stage 3.0 (TID 40)" -> "Executor task launch worker for task #.# in stage #.# (TID #)").
_NUMBERS = re.compile(r"\d+")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_THREAD_LINE = re.compile(r'^"(?P<name>.*?)" (?:#\d+ )?(?:daemon )?(?:prio=\d+ )?os_prio=', re.MULTILINE)


def thread_pools(dump: str) -> dict[str, int]:
    """A JVM thread dump's (``jcmd <pid> Thread.print``) threads counted by pool: name without its numbers and
    UUIDs (a streaming query's ids)."""
    return dict(Counter(_NUMBERS.sub("#", _UUID.sub("<id>", m["name"])) for m in _THREAD_LINE.finditer(dump)))


def jvm_thread_pools(pid: int) -> dict[str, int] | None:
    """Threads of the JVM ``pid`` by pool, from ``jcmd <pid> Thread.print`` (the JDK on PATH, the one Spark runs
    on); None when the dump fails (the JVM is busy or gone)."""
    try:
        dump = subprocess.run(["jcmd", str(pid), "Thread.print"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return thread_pools(dump) or None


# -- the rule --------------------------------------------------------------------------------------------------------


def after_warm_up(times: list[float], values: list[float], warm_up_s: float = 0.0) -> list[tuple[float, float]]:
    """The ``(time, value)`` samples the growth rule judges: those after the warm-up, the longer of ``WARM_UP`` of the
    run and ``warm_up_s``."""
    if not times:
        return []
    cut = times[0] + max(WARM_UP * (times[-1] - times[0]), warm_up_s)
    return [(t, v) for t, v in zip(times, values) if t >= cut]


def grows_without_bound(times: list[float], values: list[float], floor: float, warm_up_s: float = 0.0) -> tuple[bool, str]:
    """The growth rule of the module docstring: (verdict, the figures it rests on). The warm-up is the longer of
    ``WARM_UP`` of the run and ``warm_up_s`` (two periods of the slowest periodic work)."""
    if not times:
        return False, "no samples"
    kept = after_warm_up(times, values, warm_up_s)
    if len(kept) < 4:
        return False, "too few samples after the warm-up"
    middle = kept[0][0] + (kept[-1][0] - kept[0][0]) / 2
    first = max(v for t, v in kept if t < middle)
    second = max(v for t, v in kept if t >= middle)
    rise = second - first
    verdict = rise > max(GROWTH_TOLERANCE * first, floor)
    return verdict, f"peak {first:.1f} then {second:.1f}"


def pool_changes(samples: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Spark's JVM threads by pool over the run, for each pool whose count changed: the count in the first dump,
    its peak, when the peak was first reached (minutes) and the count in the last dump."""
    dumps = [(s["t"], s["jvm_pools"]) for s in samples if s.get("jvm_pools")]
    if not dumps:
        return {}
    names = sorted({name for _, pools in dumps for name in pools})
    out = {}
    for name in names:
        counts = [(t, pools.get(name, 0)) for t, pools in dumps]
        values = [c for _, c in counts]
        if min(values) == max(values):
            continue
        peak = max(values)
        out[name] = {"first": values[0], "peak": peak, "peak_at_min": round(next(t for t, c in counts if c == peak) / 60, 1),
                     "last": values[-1]}
    return out


def judge(samples: list[dict[str, Any]], warm_up_s: float = 0.0) -> dict[str, dict[str, Any]]:
    series: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    for s in samples:
        for role, metrics in s["roles"].items():
            for key in (*METRICS, "index_reader_slots"):
                if key not in metrics:
                    continue
                ts, vs = series.setdefault((role, key), ([], []))
                ts.append(s["t"])
                vs.append(metrics[key])
        for name in ("lag", "behind"):
            if s.get(name) is not None:
                ts, vs = series.setdefault(("stream", f"{name}_entries"), ([], []))
                ts.append(s["t"])
                vs.append(s[name])
        holding = [w for w in s.get("workers", {}).values() if len(w) > 3 and w[3] > 0]
        clients = sum(w[3] for w in holding)
        if clients:  # the Python workers' clients, and the connections each holds (less its worker's to the JVM)
            for key, value in (("clients", clients),
                               ("connections_per_client", (sum(w[2] for w in holding) - len(holding)) / clients)):
                ts, vs = series.setdefault(("python-workers", key), ([], []))
                ts.append(s["t"])
                vs.append(value)
    verdicts = {}
    for (role, key), (ts, vs) in sorted(series.items()):
        grows, why = grows_without_bound(ts, vs, FLOORS[key], warm_up_s)
        judged = after_warm_up(ts, vs, warm_up_s)
        verdicts[f"{role}/{key}"] = {"grows": grows, "why": why, "first": vs[0], "last": vs[-1], "max": max(vs),
                                     "max_after_warm_up": max((v for _, v in judged), default=None)}
    bounded_by_clients(verdicts, series)
    return verdicts


def bounded_by_clients(verdicts: dict[str, dict[str, Any]],
                       series: dict[tuple[str, str], tuple[list[float], list[float]]]) -> None:
    """Connections that follow bkspark's clients are bounded when the clients are: a Python worker holds at most one
    client per set of client settings (bkspark/datasource/clients.py), each client at most
    ``CLIENT_CONNECTIONS_BOUND`` connections, opened as it first needs each bookie.  So the Python workers'
    connections may rise while their clients reach more bookies: they grow without bound only if their clients grow
    or a client holds more than that bound (the per-client series is judged by the bound, not by its halves).  The
    fault proxies hold two sockets for each connection a client holds through them: theirs grow without bound only
    if the clients' do, or if they hold sockets no client holds any more (the bug the proxies' series found once,
    docs/reliability.md: then they hold more than two for each client connection in some sample).  Verdicts so
    explained are marked ``bounded_by``."""
    def grows(name: str) -> bool:
        return bool(verdicts.get(name, {}).get("grows"))

    per_client = verdicts.get("python-workers/connections_per_client")
    if per_client is not None and per_client["max_after_warm_up"] is not None:
        # Bounded by the pool's make-up, not by its halves: a client's count rises toward the bound as it first
        # needs each bookie, and only a count past the bound is a client that keeps connections it should not.
        peak = per_client["max_after_warm_up"]
        per_client.update(grows=peak > CLIENT_CONNECTIONS_BOUND,
                          why=f"{per_client['why']}; at most {CLIENT_CONNECTIONS_BOUND} a client, "
                              f"{peak:.1f} at most seen")
    workers = verdicts.get("python-workers/connections")
    if (workers is not None and workers["grows"] and per_client is not None and not per_client["grows"]
            and per_client["max_after_warm_up"] is not None
            and per_client["max_after_warm_up"] <= CLIENT_CONNECTIONS_BOUND and "python-workers/clients" in verdicts
            and not grows("python-workers/clients")):
        workers.update(grows=False, bounded_by="clients",
                       why=f"{workers['why']}; per client {per_client['why']}; "
                           f"clients {verdicts['python-workers/clients']['why']}")
    if any(grows(f"{role}/connections") for role in CLIENT_ROLES):
        return
    held: dict[float, float] = {}  # the clients' connections in each sample
    for role in CLIENT_ROLES:
        for t, v in zip(*series.get((role, "connections"), ([], []))):
            held[t] = held.get(t, 0.0) + v
    for key in ("connections", "fds"):
        times, values = series.get(("fault-proxies", key), ([], []))
        if any(v > 2 * held.get(t, 0.0) for t, v in zip(times, values)):
            continue
        proxies = verdicts.get(f"fault-proxies/{key}")
        if proxies is not None and proxies["grows"]:
            proxies.update(grows=False, bounded_by="the clients' connections",
                           why=f"{proxies['why']}; two sockets per client connection, and those are bounded")


# -- the picture -----------------------------------------------------------------------------------------------------


_FAULT_COLOURS = {"delay": "tab:blue", "blackhole": "tab:blue", "zk-expire": "tab:red", "zk-drop": "tab:red"}
_FAULT_CAPTION = ("faults: grey a bookie killed, paused or power-cut; blue its link delayed or black-holed;\n"
                  "red the writer's ZooKeeper session expired or every ZooKeeper connection dropped")


def draw(samples: list[dict[str, Any]], faults: list[tuple[float, str]], png: Path, title: str,
         caption: str = _FAULT_CAPTION, colours: dict[str, str] | None = None) -> None:
    """The picture: one panel per metric (a line per role) and the stream's lag, a vertical line at each fault
    (coloured by ``colours``, grey for a kind not in it; ``caption`` says what the colours mean)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [*METRICS, "lag_entries"]
    labels = {"rss_mib": "RSS (MiB)", "fds": "open fds", "threads": "threads", "connections": "TCP connections",
              "lag_entries": "stream lag (rows)"}
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 13), sharex=True)
    roles = sorted({r for s in samples for r in s["roles"]})
    for ax, key in zip(axes, panels):
        if key == "lag_entries":
            for name, label in (("behind", "acknowledged, not yet in the sink"), ("lag", "left by the last planned batch")):
                pts = [(s["t"] / 60, s[name]) for s in samples if s.get(name) is not None]
                if pts:
                    ax.plot(*zip(*pts), label=label, linewidth=1)
            ax.legend(fontsize=7, loc="upper left")
        else:
            for role in roles:
                pts = [(s["t"] / 60, s["roles"][role][key]) for s in samples if role in s["roles"]]
                ax.plot(*zip(*pts), label=role, linewidth=1)
        for t, kind in faults:
            ax.axvline(t / 60, color=(colours or {}).get(kind, "grey"), alpha=0.3, linewidth=0.8)
        ax.set_ylabel(labels[key])
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=4, loc="upper left")
    axes[-1].set_xlabel(f"minutes ({caption})", fontsize=8)
    fig.suptitle(textwrap.fill(title, 120), fontsize=9)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=80)


# -- the run ---------------------------------------------------------------------------------------------------------


_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception)\b.*")


def query_error(text: str) -> str:
    """A failed query's error in one line: its first line, or, when that only says a Python worker raised ("...
    Traceback (most recent call last):"), the Python exception's own line (the traceback's last ``...Error: ...``)."""
    lines = text.splitlines() or [""]
    if "Traceback" in lines[0]:
        raised = [line for line in lines[1:] if _ERROR_LINE.match(line)]
        if raised:
            return raised[-1][:300]
    return lines[0][:300]


def read_dataset(spark: Any, uri: str) -> list[str]:
    try:
        df = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", DATASET).load()
        return [bytes(r.payload).decode() for r in df.select("payload").collect()]
    except Exception as exc:  # noqa: BLE001 - nothing committed yet
        if "BOOKKEEPER_DATASET_NOT_FOUND" in str(exc):
            return []
        raise


@dataclass
class Bed:
    """What the soak runs on, as its set-up built it (loopback: ``run``; namespaces: bench/soak_netns.py)."""

    #: The metadata service URI every client (the writer's, Spark's) uses.
    uri: str
    #: Client settings of every client (the writer's conf, Spark's ``bookkeeper.*`` options).
    client_conf: dict[str, Any]
    #: The bookies: ``bookies[i].process``, ``start(i, timeout)``, ``metric(i, name, ...)``.
    bookies: Any
    #: The port a client's ZooKeeper connection dials (a Spark Python process's sessions are counted by it).
    zk_port: int
    #: A directory of the run's (the stream's checkpoint).
    workdir: Path
    #: The fault schedule, given the writer (not started).
    make_faults: Callable[[Writer], FaultSchedule]
    #: After the run: every fault lifted, every bookie running.
    lift_all: Callable[[], None]
    #: The fault proxies, whose share is taken out of the client's figures; None without proxies.
    proxies: Proxies | None = None
    #: What the run's JSON says beside the common figures (e.g. what the faults did), asked at the end.
    extra: Callable[[], dict[str, Any]] = dict
    #: The picture's caption of the fault lines' colours.
    fault_caption: str = ""
    #: The picture's fault-line colour by kind (grey for a kind not in it).
    fault_colours: dict[str, str] = field(default_factory=dict)


def run(args: argparse.Namespace) -> int:
    """The loopback soak: one ZooKeeper, four Python bookies, every client behind the fault proxies."""
    with Cluster() as cluster:
        direct_uri = cluster.new_root("soak")
        zk_connect = cluster.zk.connect_string
        zk_port = int(zk_connect.rsplit(":", 1)[1])
        # Every client reaches ZooKeeper and each bookie through a fault proxy (tests/harness/proxy.py); the
        # bookies register the proxies' addresses as their BookieIds and reach ZooKeeper directly.
        zk_proxy = FaultProxy(("127.0.0.1", zk_port), name="zookeeper")
        cluster.callback(zk_proxy.close)
        uri = direct_uri.replace(zk_connect, f"127.0.0.1:{zk_proxy.port}", 1)
        bookie_proxies = [FaultProxy(name=f"bookie{i}") for i in range(4)]
        for proxy in bookie_proxies:
            cluster.callback(proxy.close)
        bookies = cluster.python_bookies(direct_uri, BOOKIES, "soak", [proxied_bookie_id(p) for p in bookie_proxies])
        for proxy, address in zip(bookie_proxies, bookies.addresses):
            proxy.target = address
        proxies = Proxies(zk_proxy, bookie_proxies, zk_port, [port for _, port in bookies.addresses])

        def lift_all() -> None:
            zk_proxy.restore()
            for proxy in bookie_proxies:
                proxy.restore()
            for i in range(len(bookies.bookies)):
                if not bookies.bookies[i].is_alive:
                    bookies.start(i, timeout=120)

        bed = Bed(uri, CLIENT_CONF, bookies, zk_proxy.port, cluster.base,
                  lambda writer: Faults(bookies, bookie_proxies, zk_proxy, writer, zk_connect, args.fault_every, args.seed),
                  lift_all, proxies=proxies, fault_caption=_FAULT_CAPTION, fault_colours=_FAULT_COLOURS)
        result = soak(args, bed)
    return conclude(result, Path(args.out))


def soak(args: argparse.Namespace, bed: Bed) -> dict[str, Any]:
    """Run the writer, the stream, the batch jobs and the faults on ``bed`` for ``args.minutes``; the result (not yet
    judged: :func:`conclude`). Spark's JVM is started on the calling thread (in its network namespace) and stopped
    before this returns; the PNG is drawn."""
    seconds = args.minutes * 60
    uri, bookies = bed.uri, bed.bookies
    spark = spark_session(2, "bkspark-soak", driver_memory=JVM_HEAP, java_options=JVM_OPTIONS)
    client_opts = {f"bookkeeper.{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in bed.client_conf.items()}
    source = spark.readStream.format("bookkeeper").option("metadataServiceUri", uri)
    source = source.option("ledgers", f"{SOURCE_BASE}-{SOURCE_BASE + 10**6}").option("maxEntriesPerTrigger", "5000")
    for key, value in client_opts.items():
        source = source.option(key, value)
    sink = source.load().select("payload").writeStream.format("bookkeeper")
    sink = sink.option("metadataServiceUri", uri).option("dataset", DATASET)
    sink = sink.option("checkpointLocation", str(bed.workdir / "checkpoint"))
    for key, value in client_opts.items():
        sink = sink.option(key, value)
    writer = Writer(uri, args.rate, bed.client_conf)
    faults = bed.make_faults(writer)
    samples: list[dict[str, Any]] = []
    batch_counts: list[tuple[float, int | str]] = []
    query_failures: list[tuple[float, str]] = []
    writer.thread.start()
    query = sink.trigger(processingTime="2 seconds").start()
    t0 = faults.t0 = time.monotonic()
    jvm_flags = spark_jvm_flags(bookies)

    def keep_running(query: Any) -> Any:
        """As an operator would: a failed query starts again from its checkpoint (exactly once across it)."""
        if query.exception() is None:
            return query
        error = query_error(str(query.exception()))
        _log(f"the streaming query failed ({error}); starting it again from its checkpoint")
        query_failures.append((round(time.monotonic() - t0, 1), error))
        if len(query_failures) > MAX_QUERY_RESTARTS:
            raise RuntimeError(f"the streaming query failed {len(query_failures)} times: {query_failures}")
        return sink.trigger(processingTime="2 seconds").start()

    faults.thread.start()
    next_batch = args.batch_every
    next_dump = 0.0
    try:
        while (now := time.monotonic() - t0) < seconds:
            query = keep_running(query)
            progress = query.lastProgress
            detail: dict[str, list[float]] = {}
            peers: dict[str, dict[str, int]] = {}
            roles = sample(bookies, detail, bed.proxies, bed.zk_port, peers)
            pools = heap = None
            if now >= next_dump:
                jvms = _roles(bookies)["spark-jvm"]
                pools = jvm_thread_pools(jvms[0].pid) if jvms else None
                heap = jvm_heap(jvms[0].pid) if jvms else None
                next_dump += args.dump_every
            samples.append({"t": round(now, 1), "roles": roles, "lag": stream_lag(query), "jvm_pools": pools,
                            "load": os.getloadavg()[0], "jvm_heap": heap,
                            "behind": rows_behind(query, writer), "acked": len(writer.acked),
                            "batch": progress["batchId"] if progress else None, "workers": detail,
                            "worker_peers": peers})
            if now >= next_batch:
                try:
                    count: int | str = len(read_dataset(spark, uri))
                except Exception as exc:  # noqa: BLE001 - recorded: a batch job may fail under faults
                    count = f"failed: {str(exc).splitlines()[0][:200]}"
                batch_counts.append((round(now, 1), count))
                _log(f"batch job: the dataset holds {count} rows; {len(writer.acked)} acknowledged")
                next_batch += args.batch_every
            time.sleep(args.sample_every)
    finally:
        faults.stop.set()
        writer.stop.set()
        faults.thread.join(300)
        writer.thread.join(120)
    _log(f"writer stopped: {len(writer.acked)} rows acknowledged in {writer.ledgers} ledgers; catching up")
    if writer.to_recover:  # ledgers a failure left open: closed by recovery, so the stream can finish them
        with BookKeeper(uri, conf=bed.client_conf) as bk:
            for lid in writer.to_recover:
                bk.open_ledger(lid, recovery=True).close()
    bed.lift_all()
    deadline = time.monotonic() + 600
    rows: list[str] = []
    #: Errors of the reads after the run (the figures are written whatever they are: a read that fails is
    #: a finding, and the run's samples are what finds its cause).
    read_errors: list[tuple[float, str]] = []

    def read_rows() -> list[str] | None:
        try:
            return read_dataset(spark, uri)
        except Exception as exc:  # noqa: BLE001 - recorded and tried again; the verdict counts it
            read_errors.append((round(time.monotonic() - t0, 1), str(exc).splitlines()[0][:300]))
            _log(f"reading the dataset failed: {read_errors[-1][1]}")
            return None

    while time.monotonic() < deadline:
        query = keep_running(query)
        got = read_rows()
        if got is not None:
            rows = got
            if writer.acked <= set(rows) and (stream_lag(query) or 0) == 0:
                break
        time.sleep(5)
    time.sleep(10)  # one more trigger: nothing should change
    query.stop()
    final: list[str] | None = None
    for _attempt in range(5):
        if (final := read_rows()) is not None:
            break
        time.sleep(10)
    rows = final if final is not None else []
    counts = Counter(rows)
    missing = sorted(writer.acked - counts.keys())
    duplicated = sorted(r for r, c in counts.items() if c > 1)
    phantom = sorted(counts.keys() - writer.acked - writer.unknown)
    result = {
        "minutes": args.minutes,
        "batch_every": args.batch_every,
        "command": " ".join(["python -m bench.soak", *sys.argv[1:]]),
        "rows_acknowledged": len(writer.acked),
        "rows_unknown": len(writer.unknown),
        "rows_in_dataset": len(rows),
        "ledgers_written": writer.ledgers,
        "writer_failures": writer.failures,
        "writer_clients_reopened": writer.clients_reopened,
        "faults": dict(faults.done),
        "fault_log": faults.log,
        "batch_jobs": batch_counts,
        "query_restarts": query_failures,
        "read_errors_after_the_run": read_errors,
        "spark_jvm_flags": jvm_flags,
        "final_read_failed": final is None,
        "missing": len(missing),
        "duplicated": len(duplicated),
        "phantom": len(phantom),
        "examples": {"missing": missing[:5], "duplicated": duplicated[:5], "phantom": phantom[:5]},
        "max_lag_entries": max((s["lag"] for s in samples if s.get("lag") is not None), default=None),
        "max_rows_behind": max((s["behind"] for s in samples if s.get("behind") is not None), default=None),
        **bed.extra(),
        "samples": samples,
    }
    title = (f"bkspark soak, {args.minutes} min: {len(writer.acked)} rows acknowledged, {len(missing)} missing, "
             f"{len(duplicated)} duplicated; faults {dict(faults.done)}")
    spark.stop()
    draw(samples, [(t, kind) for t, kind, *_ in faults.log], Path(args.png), title, bed.fault_caption, bed.fault_colours)
    return result


def worker_clients(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Spark's Python processes' threads against the bkspark clients they hold (their ZooKeeper sessions): for
    each number of clients, the thread counts seen in a process holding that many. Threads that follow the
    clients, and clients no more than the sets of client settings, make a bounded series."""
    threads_by_clients: dict[int, set[int]] = {}
    for s in samples:
        for threads, _fds, _connections, *sessions in s.get("workers", {}).values():
            if sessions:
                threads_by_clients.setdefault(int(sessions[0]), set()).add(int(threads))
    return {"max_clients_in_one_process": max(threads_by_clients, default=0),
            "threads_by_clients": {str(k): sorted(v) for k, v in sorted(threads_by_clients.items())}}


def conclude(result: dict[str, Any], out: Path) -> int:
    """Judge ``result``'s samples by the growth rule, write it to ``out``, print the figures; 1 on a failure."""
    samples = result["samples"]
    verdicts = judge(samples, warm_up_s=WARM_UP_PERIODS * result.get("batch_every", DEFAULT_BATCH_EVERY))
    result["verdicts"] = verdicts
    result["growing"] = sorted(k for k, v in verdicts.items() if v["grows"])
    result["jvm_pools_changed"] = pool_changes(samples)
    result["worker_clients"] = worker_clients(samples)
    heaps = [(s["t"], s["jvm_heap"]) for s in samples if s.get("jvm_heap")]
    if heaps:
        result["jvm_heap_mib"] = {"first": heaps[0][1], "peak_committed": max(h["committed_mib"] for _, h in heaps),
                                  "last": heaps[-1][1]}
    loads = sorted(s["load"] for s in samples if s.get("load") is not None)
    if loads:
        result["load_average_1min"] = {"min": loads[0], "median": loads[len(loads) // 2], "max": loads[-1]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    summary = {k: v for k, v in result.items() if k not in ("samples", "verdicts", "fault_log")}
    print(json.dumps(summary, indent=1))
    for key, v in verdicts.items():
        print(f"  {key:32} {'GROWS' if v['grows'] else 'flat '}  {v['why']}  (first {v['first']:.1f}, last {v['last']:.1f})")
    ok = not (result["missing"] or result["duplicated"] or result["phantom"] or result["growing"]
              or result.get("final_read_failed"))
    print("soak: PASS" if ok else "soak: FAIL", flush=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=50.0, help="rows a second the writer appends")
    p.add_argument("--fault-every", type=float, default=40.0)
    p.add_argument("--batch-every", type=float, default=DEFAULT_BATCH_EVERY)
    p.add_argument("--sample-every", type=float, default=5.0)
    p.add_argument("--dump-every", type=float, default=60.0, help="seconds between thread dumps of Spark's JVM")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--netns", action="store_true",
                   help="on the namespace test bed, under kernel-level network and disk faults (bench/soak_netns.py; root)")
    p.add_argument("--out", help="default bench/results/soak.json, with --netns soak-netns.json")
    p.add_argument("--png", help="default bench/results/soak.png, with --netns soak-netns.png")
    p.add_argument("--judge", metavar="JSON", help="judge a finished run's samples again (written back to the file)")
    args = p.parse_args(argv)
    if args.judge:
        return conclude(json.loads(Path(args.judge).read_text()), Path(args.judge))
    name = "soak-netns" if args.netns else "soak"
    args.out = args.out or f"bench/results/{name}.json"
    args.png = args.png or f"bench/results/{name}.png"
    if args.netns:
        from bench.soak_netns import run_netns

        return run_netns(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
