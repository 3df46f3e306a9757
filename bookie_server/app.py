"""A whole bookie process: storage, server, ZooKeeper membership, HTTP, GC, signals.

Start-up order (each step must succeed before the next):

1. bind the bookie port (so ``bookiePort=0`` gives a real port, and with it
   the default ``host:port`` BookieId);
2. connect to ZooKeeper, check the cluster and the cookies (refuse to start on
   a mismatch) -- before anything touches the data directories;
3. open storage and replay the journal;
4. serve requests, start HTTP;
5. register in ``available`` (or ``available/readonly``).

Shutdown (SIGTERM/SIGINT) runs the reverse: unregister, stop accepting and
close connections, sync the journal and checkpoint, end the ZooKeeper session.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import signal
import socket
import time
from typing import Any

from bkspark.config.bookie import BookieConfig
from bkspark.config.secrets import read_password_file
from bkspark.config.typed import lookup
from bkspark.confkeys import BOOKIE_KEYS, check_keys, check_unsupported
from bkspark.errors import BookieIOError, CookieMismatchError, InvalidOptionError, one_line
from bkspark.placement.base import conf_bool
from bkspark.protocol.cookie import Cookie

from bookie_server.bookie import Bookie
from bookie_server.gc import GarbageCollector
from bookie_server.http_admin import AdminHttpServer, json_body
from bookie_server.metrics import BookieMetrics
from bookie_server.registration import Registration, check_local_cookies, dir_is_empty, write_dir_cookie
from bookie_server.security import BookieSecurity, authentication_configured
from bookie_server.server import BookieServer

__all__ = ["BookieApp", "EXIT_READ_ONLY_MODE_DISABLED", "run", "STOPPED_WITHOUT_CHECKPOINT"]

log = logging.getLogger("bookie_server.app")


class BookieApp:
    """Owns every part of a running bookie."""

    def __init__(self, conf: BookieConfig) -> None:
        self.conf = conf
        # Keys and TLS/SASL settings are checked before anything starts (docs/security.md).
        check_keys(conf.extra, BOOKIE_KEYS, "bookie")
        check_unsupported(conf.extra)
        self.security = BookieSecurity.from_conf(conf.extra)
        self.metrics = BookieMetrics()
        self.bookie = Bookie(conf, metrics=self.metrics)
        self.server: BookieServer | None = None
        self.http: AdminHttpServer | None = None
        self.registration: Registration | None = None
        self.gc: GarbageCollector | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        #: Set by SIGTERM/SIGINT (``run``) or by the bookie itself (:meth:`_must_stop`); ``exit_status`` says why.
        self.stop_requested = asyncio.Event()
        self.exit_status = 0
        self.stopped = asyncio.Event()
        self._sock: socket.socket | None = None

    # -- start --------------------------------------------------------------------------
    def _bind(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.conf.bindAddress, self.conf.bookiePort))
        sock.listen(1024)
        sock.setblocking(False)
        self.conf.bookiePort = sock.getsockname()[1]
        self._sock = sock

    async def start(self) -> None:
        """Bring the bookie up (see the module docstring for the order)."""
        loop = asyncio.get_running_loop()
        self._bind()
        if self.conf.metadataServiceUri:
            self.registration = Registration(self.conf)
            await loop.run_in_executor(None, self.registration.start)
            await loop.run_in_executor(None, self.registration.check_cookies)
        else:
            self._local_cookies()
        await self.bookie.start()
        self.server = BookieServer(self.bookie, self.conf, self.metrics, self.security)
        assert self._sock is not None
        await self.server.start(self._sock)
        http_port = None
        if self.conf.httpServerEnabled:
            self.http = AdminHttpServer(
                self.conf.httpServerHost, self.conf.httpServerPort, self._admin_token(),
                token_required=authentication_configured(self.security, self.conf.extra),
            )
            self._routes(self.http)
            await self.http.start()
            http_port = self.http.port
        self.bookie.on_must_stop = self._must_stop
        self.bookie.check_disks()
        if self.stop_requested.is_set():  # Java's bookie does not start on full disks with read-only mode disabled
            raise BookieIOError("disk usage over diskUsageThreshold and readOnlyModeEnabled=false: not starting")
        self.metrics.readonly.set(0 if self.bookie.readonly else 1)
        self.bookie.on_state_change = self._state_changed
        self.bookie.on_checkpoint = self.metrics.observe_checkpoint
        if self.registration is not None:
            await loop.run_in_executor(None, self.registration.register, self.conf.bookiePort, http_port, self.bookie.readonly)
            self.gc = GarbageCollector(self.bookie, self.registration.zk, self.registration.root)
            self._tasks.append(asyncio.create_task(self.gc.run_forever(max(self.conf.gcWaitTime, 1000) / 1000.0)))
        self._tasks.append(asyncio.create_task(self._disk_checker()))
        self._tasks.append(asyncio.create_task(self._gauges()))
        log.info(
            "bookie started",
            extra={
                "bookie_id": self.conf.bookie_id(),
                "port": self.conf.bookiePort,
                "http_port": http_port,
                "readonly": self.bookie.readonly,
            },
        )

    def _local_cookies(self) -> None:
        """Without ZooKeeper: directory cookies alone (a test or single-node set-up)."""
        master = Cookie.generate(self.conf.bookie_id(), self.conf.journalDirectories, self.conf.ledgerDirectories)
        missing, found = check_local_cookies(self.conf, master, stamp_allowed=True)
        if missing and found:
            raise CookieMismatchError(
                f"some directories lack a cookie while others have one: {[str(m) for m in missing]}"
            )
        for directory in missing:
            if not dir_is_empty(directory):
                raise CookieMismatchError(f"directory {directory} holds data but no cookie; refusing to start")
        for directory in missing:
            write_dir_cookie(directory, master)

    def _must_stop(self, reason: str) -> None:
        """The bookie cannot go on (``Bookie.on_must_stop``): stop as a signal would, with Java's exit status."""
        self.exit_status = EXIT_READ_ONLY_MODE_DISABLED
        self.stop_requested.set()

    def _state_changed(self, readonly: bool) -> None:
        self.metrics.readonly.set(0 if readonly else 1)
        if self.registration is not None and not self._stopping:
            loop = asyncio.get_running_loop()
            fut = loop.run_in_executor(None, self.registration.set_readonly, readonly)
            fut.add_done_callback(lambda f: f.exception() and log.error("read-only switch failed: %r", f.exception()))

    async def _disk_checker(self) -> None:
        while True:
            await asyncio.sleep(max(self.conf.diskCheckInterval, 100) / 1000.0)
            try:
                self.bookie.check_disks()
            except OSError as exc:
                log.error("disk check failed: %s", exc)

    async def _gauges(self) -> None:
        while True:
            self.metrics.write_cache_bytes.set(self.bookie.storage.write_cache_bytes)
            self.metrics.read_cache_bytes.set(self.bookie.storage.read_cache_bytes)
            self.metrics.ledgers.set(len(self.bookie.storage.ledgers()))
            active, idle = self.bookie.storage.reader_slots()
            self.metrics.index_reader_slots.labels("active").set(active)
            self.metrics.index_reader_slots.labels("idle").set(idle)
            await asyncio.sleep(5)

    # -- HTTP ---------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        return {
            "running": self.bookie.started,
            "readOnly": self.bookie.readonly,
            "shuttingDown": self._stopping,
            "availableForHighPriorityWrites": self.bookie.high_priority_writable,
        }

    def _routes(self, http: AdminHttpServer) -> None:
        async def heartbeat(_body: bytes) -> tuple[int, str, bytes]:
            return 200, "text/plain", b"OK\n"

        async def metrics(_body: bytes) -> tuple[int, str, bytes]:
            return 200, "text/plain; version=0.0.4; charset=utf-8", self.metrics.render()

        async def info(_body: bytes) -> tuple[int, str, bytes]:
            total, free = self.bookie.storage.disk_usage()
            return json_body({"freeSpace": free, "totalSpace": total})

        async def state(_body: bytes) -> tuple[int, str, bytes]:
            return json_body(self._state())

        async def set_readonly(body: bytes) -> tuple[int, str, bytes]:
            try:
                wanted = json.loads(body or b"{}").get("readOnly")
            except (ValueError, AttributeError):
                wanted = None
            if not isinstance(wanted, bool):
                return 400, "text/plain", b'expected {"readOnly": true|false}\n'
            # Apache BookKeeper's two refusals (BookieStateReadOnlyService), in its words.
            if wanted and not self.bookie.readonly and not self.conf.readOnlyModeEnabled:
                return 400, "text/plain", b"Bookie is disabled ReadOnly mode, cannot transit to readOnly mode\n"
            if not wanted and self.bookie.readonly and self.conf.forceReadOnlyBookie:
                return 400, "text/plain", b"Bookie is in forceReadOnly mode, cannot transit to writable mode\n"
            self.bookie.set_readonly(wanted)
            return json_body({"readOnly": self.bookie.readonly})

        async def get_readonly(_body: bytes) -> tuple[int, str, bytes]:
            return json_body({"readOnly": self.bookie.readonly})

        async def gc(body: bytes) -> tuple[int, str, bytes]:
            if self.gc is None:
                return 400, "text/plain", b"no metadata service: garbage collection is off\n"
            # Java's TriggerGCService body: {"forceMajor": bool, "forceMinor": bool}, both optional.
            try:
                flags = json.loads(body or b"{}")
            except ValueError:
                flags = None
            if not isinstance(flags, dict) or any(
                not isinstance(flags.get(k, False), bool) for k in ("forceMajor", "forceMinor")
            ):
                return 400, "text/plain", b'expected {"forceMajor": true|false, "forceMinor": true|false}\n'
            compacted_before = self.gc.compacted_total
            deleted = await self.gc.run_once(
                force_major=flags.get("forceMajor", False), force_minor=flags.get("forceMinor", False)
            )
            return json_body({
                "deleted": [{"scope": s, "ledger": lg} for s, lg in deleted],
                "compactedEntryLogs": self.gc.compacted_total - compacted_before,
            })

        http.route("GET", "/heartbeat", heartbeat)
        http.route("GET", "/metrics", metrics)
        http.route("GET", "/api/v1/bookie/info", info)
        http.route("GET", "/api/v1/bookie/state", state)
        http.route("GET", "/api/v1/bookie/state/readonly", get_readonly)
        http.route("PUT", "/api/v1/bookie/state/readonly", self._state_changing(set_readonly), state_changing=True)
        http.route("PUT", "/api/v1/bookie/gc", self._state_changing(gc), state_changing=True)

    def _admin_token(self) -> bytes | None:
        """The token of ``httpAdminTokenPath`` (a file), needed by the state-changing routes when set."""
        path = lookup(self.conf.extra, "httpAdminTokenPath")
        if path is None:
            return None
        token = read_password_file(str(path)).reveal_bytes()
        if not token:
            raise InvalidOptionError("httpAdminTokenPath names an empty file", path=str(path))
        return token

    def _state_changing(self, handler: Any) -> Any:
        """The route itself, or a 403 when ``httpAdminWriteEnabled=false`` (docs/security.md)."""
        if conf_bool(self.conf.extra, "httpAdminWriteEnabled", True):
            return handler

        async def refused(_body: bytes) -> tuple[int, str, bytes]:
            return 403, "text/plain", b"state-changing admin routes are disabled (httpAdminWriteEnabled=false)\n"

        return refused

    # -- stop ---------------------------------------------------------------------------
    async def stop(self) -> None:
        """Clean shutdown: unregister, stop serving, flush, leave ZooKeeper."""
        if self._stopping:
            return
        self._stopping = True
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        for task in self._tasks:
            task.cancel()
        if self.registration is not None:
            try:
                await loop.run_in_executor(None, self.registration.unregister)
            except Exception:
                log.exception("unregister failed")
        if self.server is not None:
            await self.server.stop_accepting()
            await self.server.close_connections()
        elif self._sock is not None:
            self._sock.close()
        if self.http is not None:
            await self.http.stop()
        try:
            await self.bookie.stop()
        finally:
            if self.registration is not None:
                await loop.run_in_executor(None, self.registration.close)
            self.stopped.set()
        log.info("bookie stopped", extra={"seconds": round(time.monotonic() - started, 3)})


#: The cyclic garbage collector's thresholds in a bookie process (Python's are 700, 10, 10).  A bookie makes a few
#: short-lived tuples per add; at Python's 700 the collector runs about once per hundred adds, and the event loop
#: spends 1.24x the CPU per add (``python -m bench.bookie_loop``; docs/bookie.md, "Python's garbage collector";
#: BENCHMARKS.md, "The Python bookie's adds").
GC_THRESHOLDS = (10_000, 10, 10)


def tune_gc() -> None:
    """Set the bookie process's collector up for serving: what start-up made (modules, the replayed state) is
    frozen out of every later collection, and the first generation collects every ``GC_THRESHOLDS[0]`` objects."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


#: What the log says, exit status 1, when a stop's final checkpoint failed (a full disk): the journal, not trimmed,
#: keeps what the checkpoint did not store, and the next start replays it.
STOPPED_WITHOUT_CHECKPOINT = "stopped without the final checkpoint; the next start replays the journal"

#: The exit status of a bookie that stopped because a fault would have turned it read-only while
#: ``readOnlyModeEnabled`` is false: Apache BookKeeper's ``ExitCode.BOOKIE_EXCEPTION``.
EXIT_READ_ONLY_MODE_DISABLED = 5


async def run(conf: BookieConfig) -> int:
    """Run a bookie until SIGTERM/SIGINT, or until it must stop itself; the process exit status (1:
    :data:`STOPPED_WITHOUT_CHECKPOINT`; :data:`EXIT_READ_ONLY_MODE_DISABLED` when a fault would have turned it
    read-only with ``readOnlyModeEnabled=false``).  A start that fails raises, after cleaning up."""
    app = BookieApp(conf)
    loop = asyncio.get_running_loop()
    stop = app.stop_requested
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await app.start()
    except BaseException:
        await app.stop()
        raise  # the caller (bookie_server.__main__) reports it as one line
    tune_gc()
    await stop.wait()
    log.info("shutting down" if app.exit_status else "signal received: shutting down")
    try:
        await app.stop()
    except BookieIOError as exc:  # not a start that failed: the caller's "cannot start" line would mislead
        log.error("%s: %s", STOPPED_WITHOUT_CHECKPOINT, one_line(exc))
        return app.exit_status or 1
    return app.exit_status
