"""One schedule of the campaign, generated from a seed (docs/reliability.md, "The campaign").

A schedule writes one ledger with a writer (bkspark's client, or Apache BookKeeper's Java client through
tools/java), injects faults at random moments while it writes, sometimes lets another client fence the ledger
mid-write or has the writer die mid-ledger, then heals the cluster, recovers the ledger with either client and
reads it back (single and batched reads, Java's reader now and then). Every client operation goes into a
:class:`History`; the checker judges it. Same seed, same schedule (the timing of faults against the writer's
progress varies with the machine's load, as it does for Jepsen).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bkspark.client import BookKeeper
from bkspark.errors import BKError
from tests.campaign.cluster import CLIENT_CONF, JAVA_CLIENT_CONF, JAVA_VERSION, BookieRef, CampaignCluster
from tests.campaign.history import History, check
from tests.campaign.spark_jobs import SparkRunner, plan_spark_job
from tests.harness.java_bookkeeper import JavaTools
from tests.harness.proxy import Direction

__all__ = ["Plan", "Stats", "plan_schedule", "plan_power_cuts", "run_schedule", "JAVA_CLIENT", "java_payload"]

JAVA_CLIENT = "bkspark.tools.JavaClient"
#: Fraction of schedules whose writer is Apache BookKeeper's Java client (a JVM start costs seconds).
JAVA_WRITER_SHARE = 0.12
#: Fraction of the others in which Java recovers or re-reads the ledger.
JAVA_READER_SHARE = 0.12
#: Seconds after which an add that neither completed nor failed counts as hung (addEntryTimeoutSec is 2).
ADD_HANG_SECONDS = 30.0
#: Fraction of schedules that also run a Spark connector write job (docs/reliability.md); ``CAMPAIGN_SPARK_SHARE``.
SPARK_SHARE = 0.1
#: Fraction of schedules whose bookies' streams are cut into small pieces throughout (docs/reliability.md).
FRAGMENT_SHARE = 0.25
#: Fraction of schedules in which one or two Python bookies lose power at a group commit of their journal
#: (docs/reliability.md, "Power cuts").
POWER_CUT_SHARE = 0.25
FAULT_KINDS = ("kill", "delay", "blackhole", "reset", "half_open", "rate", "zk_outage", "session_expiry", "fence")


def java_payload(i: int) -> bytes:
    """JavaClient write-forever's entry i (tools/java JavaClient: exactly "entry-i")."""
    return f"entry-{i}".encode()


@dataclass
class Stats:
    """Totals over the schedules of a run (written into docs/reliability.md)."""

    schedules: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    acknowledged: int = 0
    verified: int = 0
    recovered: Counter[str] = field(default_factory=Counter)
    writers: Counter[str] = field(default_factory=Counter)
    writer_deaths: int = 0
    #: Power cuts armed, and of them the ones that fired (the bookie reached the drawn group commit).
    power_cuts_fired: int = 0
    #: Spark jobs: "committed", "failed", "failed, outcome unknown", "killed", "fault:<kind>".
    spark: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "schedules": self.schedules,
            "faults": dict(sorted(self.faults.items())),
            "entries_acknowledged": self.acknowledged,
            "entries_verified": self.verified,
            "ledgers_recovered_by": dict(self.recovered),
            "writers": dict(self.writers),
            "writers_killed_mid_ledger": self.writer_deaths,
            "power_cuts_fired": self.power_cuts_fired,
            "spark_jobs": dict(sorted(self.spark.items())),
            "failures": self.failures,
            "seconds": round(self.seconds, 1),
        }


@dataclass
class Plan:
    """What a seed decides."""

    seed: int
    write_quorum: int
    ack_quorum: int
    writer: str  # "python" | "java"
    entries: int  # Python writer: entries to write; Java writer: milliseconds to let it write
    faults: list[tuple[float, str, dict[str, Any]]]
    writer_dies: bool
    recoverer: str  # "python" | "java"
    java_reads: bool
    batched_read: bool
    mid_reader: bool
    spark_job: dict[str, Any] | None = None
    #: Bookie id -> the largest piece its proxy cuts every chunk into, both ways, for the whole schedule.
    fragmented: dict[str, int] = field(default_factory=dict)
    #: Python bookie id -> (the group commit of its journal at which it loses power, seconds it stays down).
    power_cuts: dict[str, tuple[int, float]] = field(default_factory=dict)


def plan_fragmenting(seed: int, bookies: list[BookieRef], share: float = FRAGMENT_SHARE) -> dict[str, int]:
    """Which bookies' streams schedule ``seed`` cuts into pieces, and how small (a generator of its own, so the
    rest of the schedule stays what the seed always drew)."""
    rng = random.Random(f"fragment-{seed}")
    if rng.random() >= share:
        return {}
    chosen = rng.sample(bookies, rng.randint(1, len(bookies)))
    return {b.bookie_id: rng.choice((16, 200, 1500)) for b in chosen}


def plan_power_cuts(
    seed: int, bookies: list[BookieRef], share: float = POWER_CUT_SHARE
) -> dict[str, tuple[int, float]]:
    """Which Python bookies of schedule ``seed`` lose power, at which group commit of their journal, and for how
    long (a generator of its own, so the rest of the schedule stays what the seed always drew)."""
    rng = random.Random(f"power-cut-{seed}")
    pythons = [b for b in bookies if b.kind == "python"]
    if rng.random() >= share or not pythons:
        return {}
    chosen = rng.sample(pythons, min(rng.randint(1, 2), len(pythons)))
    return {b.bookie_id: (rng.randint(1, 25), rng.uniform(0.3, 1.5)) for b in chosen}


def plan_schedule(seed: int, bookies: list[BookieRef], spark_share: float = SPARK_SHARE) -> Plan:
    """The schedule of ``seed``: quorums, writer, faults (time offset, kind, parameters), recovery and reads, and
    now and then a Spark job (drawn apart, so a seed's other draws never change)."""
    rng = random.Random(seed)
    write_quorum = rng.choice((2, 3))
    ack_quorum = rng.choice([a for a in (2, 3) if a <= write_quorum])
    writer = "java" if rng.random() < JAVA_WRITER_SHARE else "python"
    faults: list[tuple[float, str, dict[str, Any]]] = []
    for _ in range(rng.randint(1, 3)):
        at = rng.uniform(0.0, 1.2)
        kind = rng.choice(FAULT_KINDS if writer == "python" else tuple(k for k in FAULT_KINDS if k != "session_expiry"))
        params: dict[str, Any] = {"duration": rng.uniform(0.3, 1.5)}
        if kind == "kill":
            # Up to A-1 bookies at once, never more; mostly Python ones (a JVM restarts slowly).
            count = rng.randint(1, ack_quorum - 1)
            pool = [b for b in bookies if b.kind == "python"] if rng.random() < 0.85 else list(bookies)
            params["bookies"] = [b.bookie_id for b in rng.sample(pool, min(count, len(pool)))]
        elif kind in ("delay", "blackhole", "reset", "half_open", "rate"):
            params["bookie"] = rng.choice(bookies).bookie_id
            params["direction"] = rng.choice(("UP", "DOWN", "BOTH"))
            params["seconds"] = rng.uniform(0.05, 1.0)
            params["rate"] = rng.choice((2_000, 20_000, 200_000))
        elif kind == "fence":
            params["by"] = "java" if rng.random() < JAVA_READER_SHARE else "python"
        faults.append((at, kind, params))
    faults.sort(key=lambda f: f[0])
    return Plan(
        seed=seed,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        writer=writer,
        entries=rng.randint(20, 80) if writer == "python" else rng.randint(800, 2000),
        faults=faults,
        writer_dies=writer == "java" or rng.random() < 0.3,
        recoverer="python" if writer == "java" else ("java" if rng.random() < JAVA_READER_SHARE else "python"),
        java_reads=writer == "java" or rng.random() < JAVA_READER_SHARE / 2,
        batched_read=rng.random() < 0.5,
        mid_reader=rng.random() < 0.4,
        spark_job=plan_spark_job(seed, spark_share),
        fragmented=plan_fragmenting(seed, bookies),
        power_cuts=plan_power_cuts(seed, bookies),
    )


class _Run:
    """The state of one running schedule."""

    def __init__(
        self, plan: Plan, cluster: CampaignCluster, java_tools: JavaTools, work_dir: Path, stats: Stats
    ) -> None:
        self.plan = plan
        self.cluster = cluster
        self.java_tools = java_tools
        self.work_dir = work_dir
        self.stats = stats
        self.history = History()
        self.ledger_id: int | None = None
        self.writer_bk: BookKeeper | None = None
        self.fenced = threading.Event()
        self.writing_done = threading.Event()
        self.restarts: list[threading.Thread] = []
        self.errors: list[str] = []
        self.by_id = {ref.bookie_id: ref for ref in cluster.bookies}

    # -- clients ------------------------------------------------------------------------------------------------

    def _client(self) -> BookKeeper:
        return BookKeeper(self.cluster.uri, conf=CLIENT_CONF)

    def _java(self, *args: str, timeout: float = 120.0) -> list[dict[str, Any]]:
        proc = self.java_tools.run(
            JAVA_VERSION, JAVA_CLIENT, *args, "--zk", self.cluster.uri, conf=JAVA_CLIENT_CONF, timeout=timeout
        )
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"event"')]
        if proc.returncode != 0:
            raise RuntimeError(f"JavaClient {args[0]} exited {proc.returncode}: {events[-2:]} {proc.stderr[-800:]}")
        return events

    def recover(self, by: str, process: str) -> None:
        """Fence and recover the ledger with ``by``'s client; log it and the read of everything it now holds."""
        assert self.ledger_id is not None
        lid = self.ledger_id
        self.history.log(process, "invoke", "recover", lid)
        if by == "python":
            with self._client() as bk:
                rh = bk.open_ledger(lid, recovery=True)
                last = rh.last_add_confirmed
                self.history.log(process, "ok", "recover", lid, last)
                self._log_read(process, lid, _read_when_back(rh, last) if last >= 0 else [], last)
        else:
            events = self._java("recover", "--ledger", str(lid), "--digest", "CRC32C", "--password", "")
            last = int(next(e for e in events if e["event"] == "recovered")["last_entry_id"])
            self.history.log(process, "ok", "recover", lid, last)
            self.java_read(process + "-read")
        self.stats.recovered[by] += 1

    def _log_read(self, process: str, lid: int, entries: list[Any], last: int | None, after_close: bool = True) -> None:
        got = {e.entry_id: bytes(e.payload) for e in entries}
        self.history.log(process, "ok", "read", lid, {"entries": got, "last": last, "after_close": after_close})

    def java_read(self, process: str) -> None:
        """Read the closed ledger with Apache BookKeeper's Java client."""
        assert self.ledger_id is not None
        lid = self.ledger_id
        self.history.log(process, "invoke", "read", lid)
        events = self._java("read", "--ledger", str(lid), "--digest", "CRC32C", "--password", "")
        opened = next(e for e in events if e["event"] == "opened")
        entries = {int(e["entry_id"]): bytes.fromhex(e["hex"]) for e in events if e["event"] == "entry"}
        last = int(opened["last_add_confirmed"])
        self.history.log(process, "ok", "read", lid, {"entries": entries, "last": last, "after_close": True})

    # -- writers ------------------------------------------------------------------------------------------------

    def python_writer(self) -> None:
        plan = self.plan
        rng = random.Random(plan.seed ^ 0x5EED)
        bk = self.writer_bk = self._client()
        lh = bk.create_ledger(3, plan.write_quorum, plan.ack_quorum)
        self.ledger_id = lid = lh.ledger_id
        window: list[tuple[str, Any]] = []

        def settle(process: str, future: Any) -> None:
            try:
                entry = future.result(timeout=ADD_HANG_SECONDS)
            except TimeoutError:
                # Neither acknowledged nor failed long after addEntryTimeoutSec: the client lost track of it.
                self.errors.append(f"{process} neither completed nor failed within {ADD_HANG_SECONDS} s")
                self.history.log(process, "info", "add", lid)
                raise
            except Exception:  # noqa: BLE001 - any failure leaves the add's outcome unknown
                self.history.log(process, "info", "add", lid)
                return
            self.history.log(process, "ok", "add", lid, entry)

        try:
            for i in range(plan.entries):
                if self.fenced.is_set() and rng.random() < 0.5:
                    break
                payload = f"{plan.seed}:{i}:".encode() + rng.randbytes(rng.randint(0, 200))
                process = f"add-{i}"
                self.history.log(process, "invoke", "add", lid, (lid, payload))
                try:
                    window.append((process, lh.append_async(payload)))
                except Exception:  # noqa: BLE001 - the handle refuses: closed, fenced
                    self.history.log(process, "info", "add", lid)
                    break
                while len(window) > 8:
                    settle(*window.pop(0))
                time.sleep(rng.uniform(0, 0.012))
            if plan.writer_dies:
                # The writer dies mid-ledger: its client goes away without closing the ledger.
                self.stats.writer_deaths += 1
                bk.close()
            for item in window:
                settle(*item)
            if not plan.writer_dies:
                try:
                    lh.close()
                except Exception:  # noqa: BLE001 - fenced by another client: recovery closes it
                    pass
        finally:
            self.writing_done.set()

    def java_writer(self) -> None:
        """Apache BookKeeper's Java client writes until it is killed with -9 (its ledger then recovered)."""
        plan = self.plan
        ledger_file = self.work_dir / f"ledger-{plan.seed}"
        process = self.java_tools.start(
            JAVA_VERSION,
            JAVA_CLIENT,
            "write-forever",
            "--zk",
            self.cluster.uri,
            "--ledger-file",
            str(ledger_file),
            "--ensemble",
            "3",
            "--write",
            str(plan.write_quorum),
            "--ack",
            str(plan.ack_quorum),
            "--digest",
            "CRC32C",
            "--password",
            "",
            "--interval-ms",
            "2",
            conf=JAVA_CLIENT_CONF,
        )
        try:
            process.wait_until(ledger_file.exists, timeout=120, what="JavaClient write-forever to create its ledger")
            self.ledger_id = int(ledger_file.read_text())
            time.sleep(plan.entries / 1000.0)
        finally:
            process.kill()
            self.stats.writer_deaths += 1
        acked = [
            int(e["entry_id"])
            for e in map(json.loads, process.stdout_path.read_text().splitlines())
            if e.get("event") == "added"
        ] if process.stdout_path.exists() else []
        lid = self.ledger_id
        for entry in acked:
            self.history.log(f"add-{entry}", "invoke", "add", lid, (lid, java_payload(entry)))
            self.history.log(f"add-{entry}", "ok", "add", lid, entry)
        # The add in flight when it died (addEntry is synchronous: at most one) may or may not be durable.
        nxt = max(acked, default=-1) + 1
        self.history.log(f"add-{nxt}", "invoke", "add", lid, (lid, java_payload(nxt)))
        self.history.log(f"add-{nxt}", "info", "add", lid)
        self.writing_done.set()

    # -- faults -------------------------------------------------------------------------------------------------

    def inject(self, kind: str, params: dict[str, Any]) -> None:
        """One fault; a standing one is lifted after ``duration`` by a background thread."""
        self.stats.faults[kind] += 1
        duration = params["duration"]
        if kind == "kill":
            refs = [self.by_id[b] for b in params["bookies"]]
            for ref in refs:
                if self.cluster.is_alive(ref):
                    self.cluster.kill(ref)

            def restart() -> None:
                time.sleep(duration)
                for ref in refs:
                    if not self.cluster.is_alive(ref):
                        self.cluster.start(ref)

            thread = threading.Thread(target=restart, daemon=True)
            thread.start()
            self.restarts.append(thread)
            return
        if kind == "zk_outage":  # shorter than the client's zkTimeout: only a pause
            self.cluster.zk_proxy.refuse()
            self._later(duration, self.cluster.zk_proxy.restore)
            return
        if kind == "session_expiry":
            if self.writer_bk is not None:
                self.cluster.expire_session(self.writer_bk.store.zk.client_id)
            return
        if kind == "fence":
            if self.ledger_id is not None:
                self.recover(params["by"], f"fence-{params['by']}")
                self.fenced.set()
            return
        proxy = self.by_id[params["bookie"]].proxy
        direction = Direction[params["direction"]]
        if kind == "delay":
            proxy.delay(params["seconds"], direction)
        elif kind == "blackhole":
            proxy.blackhole(direction)
        elif kind == "rate":
            proxy.rate(params["rate"], direction)
        elif kind == "reset":
            proxy.reset()
            return
        elif kind == "half_open":
            proxy.half_open()
            return
        self._later(duration, proxy.restore)

    def arm_power_cuts(self) -> None:
        """Arm the plan's power cuts (before the writer starts); each bookie, once it has cut itself, stays down
        for the drawn time and starts again unarmed."""
        for bookie_id, (at_batch, down) in sorted(self.plan.power_cuts.items()):
            ref = self.by_id[bookie_id]
            self.stats.faults["power_cut"] += 1
            self.cluster.arm_power_cut(ref, at_batch)

            def restart_after_the_cut(ref: BookieRef = ref, down: float = down) -> None:
                while self.cluster.is_alive(ref) and not self.writing_done.is_set():
                    time.sleep(0.02)
                if self.cluster.is_alive(ref):
                    return  # never reached its group commit: heal() disarms it
                self.stats.power_cuts_fired += 1
                time.sleep(down)
                if not self.cluster.is_alive(ref):
                    self.cluster.start(ref)

            thread = threading.Thread(target=restart_after_the_cut, daemon=True)
            thread.start()
            self.restarts.append(thread)

    def _later(self, delay: float, action: Any) -> None:
        def run() -> None:
            time.sleep(delay)
            action()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.restarts.append(thread)

    def mid_read(self) -> None:
        """A reader that opens the ledger without recovery while it is written and reads up to its LAC."""
        lid = self.ledger_id
        if lid is None:
            return
        self.history.log("mid-reader", "invoke", "read", lid)
        try:
            with self._client() as bk:
                rh = bk.open_ledger(lid, recovery=False)
                lac = rh.last_add_confirmed
                entries = rh.read(0, lac) if lac >= 0 else []
        except Exception:  # noqa: BLE001 - a read under faults may fail; it proves nothing then
            self.history.log("mid-reader", "fail", "read", lid)
            return
        self._log_read("mid-reader", lid, entries, None, after_close=False)


#: The Spark connector's options in the campaign: the client settings (through the proxies), quorums 3/2/2.
SPARK_OPTIONS = {f"bookkeeper.{k}": str(v).lower() if isinstance(v, bool) else v for k, v in CLIENT_CONF.items()} | {
    "ensembleSize": 3,
    "writeQuorumSize": 2,
    "ackQuorumSize": 2,
}


#: How long a read waits for a replica that a fault took away (a power-cut bookie is down for at most 1.5 s, then
#: restarts and replays its journal; a reader of a real cluster would wait for it as well).
READ_BACK_DEADLINE_S = 120.0


def _read_when_back(rh: Any, last: int) -> list[Any]:
    """Entries ``0..last``, read again while the error is retriable (every replica of some entry down at once: a
    power cut on two bookies of a write quorum) until the bookies are back; an error that is not retriable, or
    one past the deadline, is raised."""
    deadline = time.monotonic() + READ_BACK_DEADLINE_S
    while True:
        try:
            return list(rh.read(0, last))
        except BKError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def run_schedule(
    seed: int,
    cluster: CampaignCluster,
    java_tools: JavaTools,
    work_dir: Path,
    stats: Stats,
    spark: SparkRunner | None = None,
    spark_share: float = SPARK_SHARE,
) -> tuple[list[str], History]:
    """Run the schedule of ``seed``; the checker's findings (empty when every promise held) and the history.

    Without ``spark`` no schedule runs a Spark job."""
    started = time.monotonic()
    cluster.heal()
    plan = plan_schedule(seed, cluster.bookies, spark_share if spark is not None else 0.0)
    run = _Run(plan, cluster, java_tools, work_dir, stats)
    stats.writers[plan.writer] += 1
    spark_thread: threading.Thread | None = None
    watermark = -1
    if plan.spark_job is not None and spark is not None:
        spark.session()  # started before the schedule's clock, so the JVM's start is not part of it
        with run._client() as bk:
            watermark = max(bk.list_ledgers(), default=-1)
        job = plan.spark_job

        def spark_job() -> None:
            try:
                spark.run_job(seed, job, cluster.uri, SPARK_OPTIONS, run.history, stats)
            except Exception as exc:  # noqa: BLE001 - reported as a schedule error
                run.errors.append(f"the Spark job of seed {seed} crashed the schedule: {type(exc).__name__}: {exc}")

        spark_thread = threading.Thread(target=spark_job, daemon=True)
    run.arm_power_cuts()
    for index, (bookie_id, max_piece) in enumerate(sorted(plan.fragmented.items())):
        run.by_id[bookie_id].proxy.fragment(max_piece, seed=seed + index)  # lifted by any restore, and by heal()
    writer = threading.Thread(target=run.java_writer if plan.writer == "java" else run.python_writer, daemon=True)
    writer.start()
    deadline = time.monotonic() + 180
    while run.ledger_id is None and writer.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    t0 = time.monotonic()
    if spark_thread is not None:
        spark_thread.start()
    try:
        for at, kind, params in plan.faults:
            wait = at - (time.monotonic() - t0)
            if wait > 0:
                time.sleep(wait)
            if plan.writer == "python" and run.writing_done.is_set() and kind != "fence":
                continue  # the writer is done: this fault would hit nobody
            run.inject(kind, params)
        if plan.mid_reader:
            run.mid_read()
        writer.join(240)
        if spark_thread is not None:
            spark_thread.join(300)
            if spark_thread.is_alive():
                run.errors.append(f"the Spark job of seed {seed} still running after 300 s")
        if run.errors or writer.is_alive():
            return run.errors or [f"writer of seed {seed} still running after 240 s"], run.history
        for thread in run.restarts:
            thread.join(120)
        cluster.heal()
        if run.ledger_id is None:
            return [f"seed {seed}: the writer never created its ledger"], run.history
        run.recover(plan.recoverer, f"recover-{plan.recoverer}")
        with run._client() as bk:
            rh = bk.open_ledger(run.ledger_id, recovery=False)
            last = rh.last_add_confirmed
            if plan.batched_read and last >= 0:
                run._log_read("batched-reader", run.ledger_id, list(rh.read_batched(0, last, batch_size=16)), last)
            else:
                run._log_read("reader", run.ledger_id, rh.read(0, last) if last >= 0 else [], last)
            if spark_thread is not None and spark is not None:
                spark.read_and_audit(seed, cluster.uri, SPARK_OPTIONS, run.history, bk, watermark, stats)
        if plan.java_reads:
            run.java_read("java-reader")
    finally:
        run.writing_done.wait(60)
        if run.writer_bk is not None:
            run.writer_bk.close()
    problems = check(run.history)
    acked = sum(1 for op in run.history.ops if op.f == "add" and op.type == "ok")
    finals = sum(1 for op in run.history.ops if op.f == "read" and op.type == "ok" and op.value.get("after_close"))
    stats.schedules += 1
    stats.acknowledged += acked
    stats.verified += acked * finals
    stats.seconds += time.monotonic() - started
    return problems, run.history
