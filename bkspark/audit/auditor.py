"""The orphan auditor: leader-elected among every running auditor, auditing on a period it re-reads live.

Any number of auditors may run (``bkspark auditor``, or embedded in a bookie
through :meth:`Auditor.start` / :meth:`Auditor.stop`); kazoo's ``Election``
recipe under ``<root>/bkspark/audit/election`` makes exactly one of them the
leader, and only the leader scans and writes.  When the leader's ZooKeeper
session ends (stopped, crashed, killed -9: once the session times out), the
next contender in line becomes leader and starts auditing.  Every write of a
leader's pass is fenced by its own election znode (``multi`` with a ``check``):
a leader that lost its session, or its znode, in the middle of a pass writes
nothing more over the new leader's results, and stops leading.

The period and the grace period come from the ``config`` znode, watched: a
change applies at once (the next pass is rescheduled from the start of the
last one).  Values the znode does not hold come from the constructor.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable

from bkspark.audit.records import (
    AuditConfig,
    AuditStatus,
    LeadershipLostError,
    audit_root,
    config_path,
    election_path,
    write_status,
)
from bkspark.audit.scan import AuditResult, Progress, reconcile, scan
from bkspark.errors import BadMetadataError, BKError, IllegalOpError
from bkspark.metadata.store import ZkMetadataStore
from bkspark.metadata.znodes import ZK_FAILURES, LeaderElection, Znodes, on_session_lost, watch_data
from bkspark.security.zk import ZkSecurity

__all__ = ["Auditor"]

log = logging.getLogger(__name__)


def _default_identifier() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Auditor:
    """One orphan-audit contender (see the module docstring).

    ``zk`` may be an already started kazoo client (an embedding bookie's);
    otherwise the auditor opens and owns its own session with
    ``session_timeout`` seconds (how long a crashed leader blocks a takeover).
    """

    def __init__(
        self,
        metadata_service_uri: str,
        *,
        zk: Any | None = None,
        identifier: str | None = None,
        audit_period: float = AuditConfig.audit_period,
        grace_period: float = AuditConfig.grace_period,
        parent_grace_period: float = AuditConfig.parent_grace_period,
        session_timeout: float = 10.0,
        zk_security: ZkSecurity | None = None,
    ) -> None:
        self.defaults = AuditConfig(
            audit_period=audit_period, grace_period=grace_period, parent_grace_period=parent_grace_period
        )
        self.identifier = identifier or _default_identifier()
        if not isinstance(self.identifier, str) or not self.identifier or len(self.identifier) > 256:
            raise IllegalOpError("auditor identifier must be a non-empty string of at most 256 characters")
        self.store = ZkMetadataStore(
            metadata_service_uri, zk=zk, session_timeout=session_timeout, create_layout=False, zk_security=zk_security
        )
        self.zk = self.store.zk
        self.root = self.store.root
        self._config = self.defaults
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lost = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._election: LeaderElection | None = None
        self._watch: Any = None
        self._stop_listening: Callable[[], None] | None = None
        self._is_leader = False
        #: This auditor's own election znode while it leads: every write of its passes checks that it still exists.
        self._fence: str | None = None
        self.passes = 0
        self.last_result: AuditResult | None = None

    # -- public state ------------------------------------------------------------------------------------------

    @property
    def config(self) -> AuditConfig:
        """The configuration in force (the znode's values over the constructor's)."""
        return self._config

    @property
    def is_leader(self) -> bool:
        """Whether this auditor currently holds the leadership."""
        return self._is_leader

    def contenders(self) -> list[str]:
        """Identifiers of every running auditor, the leader first."""
        return LeaderElection(self.zk, election_path(self.root)).contenders()

    # -- lifecycle ------------------------------------------------------------------------------------------------

    def start(self) -> "Auditor":
        """Join the election in a background thread (returns at once)."""
        with self._lock:
            if self._thread is not None:
                raise IllegalOpError("auditor already started")
            Znodes(self.zk).ensure_path(audit_root(self.root))
            self._stop_listening = on_session_lost(self.zk, self._on_session_lost)
            self._watch = watch_data(self.zk, config_path(self.root), self._on_config)
            self._thread = threading.Thread(target=self._run, name=f"bkspark-auditor-{self.identifier}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """Leave the election (a leader finishes its current pass first) and close an owned session."""
        self._stop.set()
        self._wake.set()
        election = self._election
        if election is not None:
            election.cancel()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        if self._stop_listening is not None:
            self._stop_listening()
            self._stop_listening = None
        self.store.close()

    def request_stop(self) -> None:
        """Ask :meth:`run_forever` to return (safe from a signal handler: sets a flag only)."""
        self._stop.set()
        self._wake.set()

    def run_forever(self) -> None:
        """``start()`` then block until :meth:`stop` is called (from a signal handler, say)."""
        self.start()
        while not self._stop.wait(1.0):
            pass
        thread = self._thread
        if thread is not None:
            thread.join(15.0)

    def __enter__(self) -> "Auditor":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- watches ----------------------------------------------------------------------------------------------------

    def _on_session_lost(self) -> None:
        # Our ephemeral election znode is gone: someone else may lead now.
        self._lost.set()
        self._wake.set()

    def _on_config(self, data: bytes | None, stat: Any) -> bool | None:
        if self._stop.is_set():
            return False  # stop watching
        if data is None:
            new = self.defaults
        else:
            try:
                new = AuditConfig.from_bytes(data, self.defaults)
            except BadMetadataError as exc:
                log.error("ignoring audit config at %s: %s (keeping %s)", config_path(self.root), exc, self._config)
                return None
        if new != self._config:
            log.info(
                "audit config now: period %.1fs, grace %.1fs, parent grace %.1fs",
                new.audit_period, new.grace_period, new.parent_grace_period,
            )
            self._config = new
            self._wake.set()
        return None

    # -- election and leading ---------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._lost.clear()
            election = LeaderElection(self.zk, election_path(self.root), self.identifier)
            self._election = election
            try:
                election.run(self._lead)
            except (*ZK_FAILURES, BKError) as exc:
                log.warning("auditor %s left the election: %s", self.identifier, exc)
            except Exception:  # a bug must not kill an embedding bookie's thread silently
                log.exception("auditor %s failed", self.identifier)
            if not self._stop.is_set():
                self._stop.wait(1.0)

    def _lead(self) -> None:
        assert self._election is not None
        self._fence = self._election.own_znode
        self._is_leader = True
        log.info("auditor %s is the leader", self.identifier)
        last_start: float | None = None
        try:
            while not self._stop.is_set() and not self._lost.is_set():
                now = time.monotonic()
                if last_start is None or now >= last_start + self._config.audit_period:
                    last_start = now
                    try:
                        self.audit_once()
                    except LeadershipLostError as exc:
                        # Our znode went (deleted; or our session ended before we heard): another may lead now.
                        log.warning("auditor %s stops leading: %s", self.identifier, exc)
                        return
                    except (*ZK_FAILURES, BKError) as exc:
                        log.warning("audit pass failed: %s", exc)
                self._wake.wait(max(0.0, last_start + self._config.audit_period - time.monotonic()))
                self._wake.clear()
        finally:
            self._is_leader = False
            self._fence = None
            log.info("auditor %s is no longer the leader", self.identifier)

    # -- one pass ------------------------------------------------------------------------------------------------------

    def audit_once(self, *, record: bool = True, progress: Progress | None = None) -> AuditResult:
        """Scan every ledger now; with ``record``, rewrite the orphans and status znodes.

        The loop calls this as leader.  While this auditor leads, every write of the pass is conditional on the
        election znode it held when the pass began: once that znode is gone (its session ended, or it was deleted)
        the pass writes nothing more and raises :class:`LeadershipLostError`.  Tools, shell commands and tests may
        call it directly on an auditor that does not lead: it holds no election znode then, and writes unfenced.
        """
        fence = self._fence
        result = scan(self.store, self._config, progress=progress)
        if record:
            reconcile(self.zk, self.root, result.orphans, now_ms=result.started_ms, fence=fence)
            passes = self.passes + 1
            status = AuditStatus(
                auditor=self.identifier,
                pass_started_ms=result.started_ms,
                pass_finished_ms=result.finished_ms,
                ledgers_scanned=result.scanned,
                orphans=len({r.name for r in result.orphans}),
                unreadable=len(result.unreadable),
                passes=passes,
            )
            write_status(self.zk, self.root, status, fence=fence)
            self.passes = passes
        for label, error in result.unreadable:
            log.warning("ledger %s skipped by the audit: %s", label, error)
        self.last_result = result
        log.info(
            "audit pass: %d ledgers, %d orphan findings, %d unreadable",
            result.scanned,
            len(result.orphans),
            len(result.unreadable),
        )
        return result
