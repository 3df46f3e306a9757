"""Apache BookKeeper (Java) for compatibility tests: bookie clusters, the BookieShell and our tools/java programs.

Jars come from `.cache/bookkeeper/<version>/lib` (resolved by `make jars`), our programs from
`.cache/bookkeeper/<version>/classes`. Every JVM gets a generated configuration file and a log4j2 configuration
that logs to a file in its own directory. Bookie and shell JVMs share class-data archives (tests/harness/cds.py).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient

from bkspark.errors import InvalidOptionError
from bkspark.protocol import layout

from tests.harness.cds import CdsArchive, CdsUse
from tests.harness.java import JVM_OPTS, java_executable, repo_root
from tests.harness.ports import free_port, port_is_open
from tests.harness.process import HarnessError, ManagedProcess, tail
from tests.harness.zookeeper import ZkRoot

__all__ = [
    "BK_VERSIONS",
    "DEFAULT_BK_VERSION",
    "JavaBookie",
    "JavaBookieCluster",
    "JavaClusterFactory",
    "JavaTools",
    "bookkeeper_classpath",
    "cache_dir",
    "ensure_jars",
    "parse_metadata_service_uri",
]

BK_VERSIONS: tuple[str, ...] = ("4.16.6", "4.17.3", "4.18.2")
DEFAULT_BK_VERSION = "4.17.3"
BOOKIE_MAIN = "org.apache.bookkeeper.server.Main"
SHELL_MAIN = "org.apache.bookkeeper.bookie.BookieShell"

ConfValue = str | int | float | bool


def cache_dir() -> Path:
    """`$BKSPARK_CACHE`, else `<repo>/.cache`."""
    env = os.environ.get("BKSPARK_CACHE")
    return Path(env) if env else repo_root() / ".cache"


# -- jars -------------------------------------------------------------------------------------------------------

_jars_lock = threading.Lock()
_jars_status: dict[str, str | None] = {}  # version -> None (all built) or make's error output


def ensure_jars(version: str, need_tools: bool = True) -> Path:
    """Make sure `.cache/bookkeeper/<version>` is complete and up to date (`make -s jars`, once per session).

    Returns the version's directory. When `make` fails, HarnessError with its output, except when only our
    tools/java programs failed to build and `need_tools` is False (bookies and the shell need BookKeeper's jars
    only): then a warning.
    """
    if version not in BK_VERSIONS:
        raise HarnessError(f"unknown Apache BookKeeper version {version!r}; the harness knows {', '.join(BK_VERSIONS)}")
    vdir = cache_dir() / "bookkeeper" / version
    root = repo_root()
    with _jars_lock:
        if version not in _jars_status:
            _jars_status[version] = _make_jars(root, version, vdir)
        error = _jars_status[version]
    if error is None:
        return vdir
    if not need_tools and (vdir / "lib" / ".ok").is_file():
        warnings.warn(f"bkspark harness: tools/java did not build for BookKeeper {version}; using its jars only\n{error}")
        return vdir
    raise HarnessError(
        f"bkspark harness: `make jars` failed for Apache BookKeeper {version} (run `cd {root} && make jars` to see "
        f"why; it needs Java 17+, and Maven with network access the first time)\n{error}"
    )


def _make_jars(root: Path, version: str, vdir: Path) -> str | None:
    """Run `make -s jars BK_VERSIONS=<version>`; None on success, else its output."""
    if not (root / "Makefile").is_file():
        return f"no Makefile in {root}"
    try:
        # The Makefile serialises concurrent `make jars` runs (flock on .cache/jars.lock).
        proc = subprocess.run(
            ["make", "-s", "jars", f"BK_VERSIONS={version}"], cwd=root, capture_output=True, text=True, timeout=900
        )
    except FileNotFoundError:
        return "`make` is not installed (apt-get install make)"
    except subprocess.TimeoutExpired:
        return "`make jars` took over 15 minutes"
    if proc.returncode != 0 or not (vdir / ".ok").is_file():
        return f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}".strip() or f"make exited with {proc.returncode}"
    return None


def bookkeeper_classpath(version: str, with_tools: bool = True) -> list[str]:
    """Classpath of a BookKeeper version: our compiled tools/java classes (optional), then every jar of `lib/`."""
    vdir = ensure_jars(version, need_tools=with_tools)
    jars = sorted(str(p) for p in (vdir / "lib").glob("*.jar"))
    if not jars:
        raise HarnessError(f"bkspark harness: {vdir / 'lib'} holds no jars; run `make jars`")
    return ([str(vdir / "classes")] if with_tools else []) + jars


# -- configuration helpers ----------------------------------------------------------------------------------------


def parse_metadata_service_uri(uri: str) -> tuple[str, str]:
    """Split `zk+hierarchical://h1:p1;h2:p2/ledgers` into (kazoo hosts "h1:p1,h2:p2", root path "/ledgers").

    The client's own parser (`bkspark.protocol.layout`) does the work; an empty root means `/ledgers`.
    """
    try:
        parsed = layout.parse_metadata_service_uri(uri)
    except InvalidOptionError as exc:
        raise HarnessError(f"not a ZooKeeper metadata service URI: {exc}") from None
    return parsed.connect_string, parsed.root or "/ledgers"


def _conf_value(value: ConfValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def write_properties(path: Path, values: Mapping[str, ConfValue]) -> Path:
    """Write a Java properties file (one `key=value` a line, as bk_server.conf)."""
    lines = ["# generated by the bkspark test harness"]
    lines += [f"{key}={_conf_value(value)}" for key, value in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_log4j2(
    path: Path,
    log_file: Path | None,
    console: bool = False,
    console_loggers: Sequence[str] = (),
    console_target: str = "SYSTEM_OUT",
) -> Path:
    """A log4j2 properties configuration: everything at INFO into `log_file` and, if `console`, the INFO messages
    of `console_loggers` (and WARN+ of everything) as plain lines on `console_target` (SYSTEM_OUT/SYSTEM_ERR),
    the way `bin/bookkeeper shell` prints. Structured (slog) attributes follow the message as `{key=value}`."""
    lines = ["status = error", "name = bkspark-harness"]
    refs: list[str] = []
    if log_file is not None:
        lines += [
            "appender.file.type = File",
            "appender.file.name = file",
            f"appender.file.fileName = {log_file}",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = %d{ISO8601} [%t] %-5level %logger{1.} - %msg%notEmpty{ %X}%n",
        ]
        refs.append("file")
    if console:
        lines += [
            "appender.console.type = Console",
            "appender.console.name = console",
            f"appender.console.target = {console_target}",
            "appender.console.layout.type = PatternLayout",
            "appender.console.layout.pattern = %msg%notEmpty{ %X}%n",
            "appender.console.filter.threshold.type = ThresholdFilter",
            "appender.console.filter.threshold.level = info",
        ]
    lines.append("rootLogger.level = info")
    for ref in refs:
        lines.append(f"rootLogger.appenderRef.{ref}.ref = {ref}")
    if console:
        lines += ["rootLogger.appenderRef.console.ref = console", "rootLogger.appenderRef.console.level = warn"]
        for i, name in enumerate(console_loggers):
            lines += [
                f"logger.c{i}.name = {name}",
                f"logger.c{i}.level = info",
                f"logger.c{i}.additivity = false",
                f"logger.c{i}.appenderRef.console.ref = console",
            ]
            for ref in refs:
                lines.append(f"logger.c{i}.appenderRef.{ref}.ref = {ref}")
    for i, noisy in enumerate(("org.apache.zookeeper", "io.netty")):
        lines += [f"logger.q{i}.name = {noisy}", f"logger.q{i}.level = warn"]
    path.write_text("\n".join(lines) + "\n")
    return path


def _jvm_argv(
    version: str, main_class: str, log4j_conf: Path, extra_jvm: Sequence[str] = (), with_tools: bool = False
) -> list[str]:
    """The command line of a BookKeeper JVM (no class-data sharing). Prefer `JavaTools.command`/`.start`."""
    return _jvm_command(version, main_class, log4j_conf, extra_jvm, with_tools)[0]


def _jvm_command(
    version: str,
    main_class: str,
    log4j_conf: Path,
    extra_jvm: Sequence[str] = (),
    with_tools: bool = False,
    cds_kind: str | None = None,
) -> tuple[list[str], CdsUse]:
    """The command line of a BookKeeper JVM, and its use of the class-data sharing archive of `cds_kind`
    (only for jar-only classpaths: CDS cannot archive classes from directories such as our tools' classes/)."""
    java = java_executable()
    classpath = bookkeeper_classpath(version, with_tools=with_tools)
    cds = CdsUse([])
    if cds_kind is not None and not with_tools:
        cds = CdsArchive(cache_dir() / "bookkeeper" / version / "cds", cds_kind, java, classpath).acquire()
    argv = [
        java,
        *JVM_OPTS,
        "-XX:MaxDirectMemorySize=256m",
        f"-Dlog4j.configurationFile={log4j_conf}",
        f"-Dlog4j2.configurationFile={log4j_conf}",
        "-Dlog4j2.disable.jmx=true",
        "-Dzookeeper.jmx.log4j.disable=true",
        *cds.jvm_args,
        *extra_jvm,
        "-cp",
        os.pathsep.join(classpath),
        main_class,
    ]
    return argv, cds


# -- bookies ------------------------------------------------------------------------------------------------------


def bookie_conf(
    *,
    port: int,
    metadata_service_uri: str,
    journal_dir: Path,
    ledger_dir: Path,
    bookie_id: str | None = None,
    journal_sync_data: bool = True,
    overrides: Mapping[str, ConfValue] | None = None,
) -> dict[str, ConfValue]:
    """bk_server.conf settings for a small test bookie on 127.0.0.1 (DbLedgerStorage with tiny caches)."""
    conf: dict[str, ConfValue] = {
        "bookiePort": port,
        "advertisedAddress": "127.0.0.1",
        "allowLoopback": True,
        "useHostNameAsBookieID": False,
        "useShortHostName": False,
        "metadataServiceUri": metadata_service_uri,
        "zkTimeout": 8000,
        "journalDirectories": str(journal_dir),
        "ledgerDirectories": str(ledger_dir),
        "journalSyncData": journal_sync_data,
        "journalPreAllocSizeMB": 4,
        "journalWriteBufferSizeKB": 64,
        "journalMaxGroupWaitMSec": 1,
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "dbStorage_writeCacheMaxSizeMb": 16,
        "dbStorage_readAheadCacheMaxSizeMb": 16,
        "dbStorage_rocksDB_blockCacheSize": 4 * 1024 * 1024,
        "dbStorage_rocksDB_writeBufferSizeMB": 4,
        "dbStorage_rocksDB_sstSizeInMB": 4,
        "dbStorage_rocksDB_blockSize": 4096,
        "logSizeLimit": 64 * 1024 * 1024,
        "httpServerEnabled": False,
        "enableStatistics": False,
        "statsProviderClass": "org.apache.bookkeeper.stats.NullStatsProvider",
        "autoRecoveryDaemonEnabled": False,
        "extraServerComponents": "",
        "diskUsageThreshold": 0.99,
        "diskUsageWarnThreshold": 0.98,
        "diskUsageLwmThreshold": 0.98,
        "numAddWorkerThreads": 2,
        "numReadWorkerThreads": 2,
        "numJournalCallbackThreads": 2,
        "serverNumIOThreads": 2,
        "gcWaitTime": 60000,
        "flushInterval": 1000,
    }
    if bookie_id is not None:
        conf["bookieId"] = bookie_id
    if overrides:
        conf.update(overrides)
    return conf


class JavaBookie:
    """One Apache BookKeeper bookie JVM (`org.apache.bookkeeper.server.Main --conf <file>`)."""

    def __init__(
        self,
        *,
        version: str,
        base_dir: Path,
        metadata_service_uri: str,
        port: int | None = None,
        bookie_id: str | None = None,
        journal_sync_data: bool = True,
        conf_overrides: Mapping[str, ConfValue] | None = None,
        jvm_args: Sequence[str] = (),
    ) -> None:
        self.version = version
        self.base_dir = Path(base_dir)
        self.port = port if port is not None else free_port()
        self.custom_bookie_id = bookie_id
        self.metadata_service_uri = metadata_service_uri
        self.journal_dir = self.base_dir / "journal"
        self.ledger_dir = self.base_dir / "ledgers"
        self.conf_path = self.base_dir / "bk_server.conf"
        self.log_file = self.base_dir / "bookie.log"
        self.log4j_path = self.base_dir / "log4j2.properties"
        self.conf = bookie_conf(
            port=self.port,
            metadata_service_uri=metadata_service_uri,
            journal_dir=self.journal_dir,
            ledger_dir=self.ledger_dir,
            bookie_id=bookie_id,
            journal_sync_data=journal_sync_data,
            overrides=conf_overrides,
        )
        self.jvm_args = list(jvm_args)
        self.process: ManagedProcess | None = None
        self._cds: CdsUse | None = None

    @property
    def bookie_id(self) -> str:
        """The BookieId it registers under: the custom `bookieId` (BP-41), else "127.0.0.1:PORT"."""
        return self.custom_bookie_id if self.custom_bookie_id is not None else f"127.0.0.1:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the bookie serves on."""
        return ("127.0.0.1", self.port)

    def launch(self) -> None:
        """Write its configuration and start the JVM (does not wait)."""
        if self.process is not None and self.process.is_alive:
            raise HarnessError(f"bookie {self.bookie_id} is already running")
        for d in (self.journal_dir, self.ledger_dir):
            d.mkdir(parents=True, exist_ok=True)
        write_properties(self.conf_path, self.conf)
        write_log4j2(self.log4j_path, self.log_file)
        if self.process is not None:  # it exited by itself since the last launch
            self._exited(self.process.returncode)
        jvm, self._cds = _jvm_command(self.version, BOOKIE_MAIN, self.log4j_path, self.jvm_args, cds_kind="bookie")
        argv = [*jvm, "--conf", str(self.conf_path)]
        if self.process is None:
            self.process = ManagedProcess(
                f"bookie-{self.port}", argv, cwd=self.base_dir, log_dir=self.base_dir, extra_logs=[self.log_file]
            )
        else:
            self.process.argv = argv
        self.process.start()

    def registration_path(self, root: str) -> str:
        """`<root>/available/<bookieId>`."""
        return f"{root}/available/{self.bookie_id}"

    def wait_ready(self, zk: KazooClient, root: str, timeout: float = 120.0, stale_czxid: int | None = None) -> None:
        """Wait until the port answers and `<root>/available/<bookieId>` exists (and, when a registration of an
        earlier run was still there at launch, `stale_czxid`, until it is a new one)."""
        assert self.process is not None
        reg = self.registration_path(root)

        def ready() -> bool:
            if not port_is_open(self.port):
                return False
            stat = zk.exists(reg)
            return stat is not None and stat.czxid != stale_czxid

        self.process.wait_until(
            ready,
            timeout=timeout,
            what=f"bookie {self.bookie_id} (BookKeeper {self.version}) to listen and register at {reg}",
            interval=0.2,
        )

    @property
    def is_alive(self) -> bool:
        """True while the JVM runs."""
        return self.process is not None and self.process.is_alive

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (the bookie unregisters and exits), SIGKILL after `timeout` seconds."""
        if self.process is None:
            return
        dumping = self._cds is not None and self._cds.dumping
        code = self.process.terminate(max(timeout, 90.0) if dumping else timeout)
        self._exited(code)

    def kill(self) -> None:
        """SIGKILL the JVM."""
        if self.process is None:
            return
        self._exited(self.process.kill())

    def _exited(self, code: int | None) -> None:
        if self._cds is not None:
            cds, self._cds = self._cds, None
            cds.finish(clean_exit=code is not None and code >= 0)

    def log_tail(self, lines: int = 80) -> str:
        """End of the bookie's log4j log and of its stdout/stderr."""
        if self.process is None:
            return tail(self.log_file, lines)
        return self.process.log_tail(lines)


class JavaBookieCluster:
    """N Java bookies of one Apache BookKeeper version, registered under one metadata service URI.

    Bookie i keeps its directories and port across `stop(i)`/`kill(i)` and `start(i)`.
    """

    def __init__(
        self,
        *,
        version: str,
        metadata_service_uri: str,
        base_dir: str | os.PathLike[str],
        bookies: int = 3,
        bookie_ids: Sequence[str | None] | None = None,
        journal_sync_data: bool = True,
        conf_overrides: Mapping[str, ConfValue] | None = None,
        jvm_args: Sequence[str] = (),
        start_timeout: float = 120.0,
    ) -> None:
        if bookie_ids is not None and len(bookie_ids) != bookies:
            raise ValueError(f"bookie_ids has {len(bookie_ids)} entries for {bookies} bookies")
        ensure_jars(version, need_tools=False)
        self.version = version
        self.metadata_service_uri = metadata_service_uri
        self.zk_hosts, self.root = parse_metadata_service_uri(metadata_service_uri)
        self.base_dir = Path(base_dir)
        self.journal_sync_data = journal_sync_data
        self.conf_overrides = dict(conf_overrides or {})
        self.jvm_args = list(jvm_args)
        self.start_timeout = start_timeout
        self.bookies: list[JavaBookie] = []
        self._zk: KazooClient | None = None
        for i in range(bookies):
            self._new_bookie(None if bookie_ids is None else bookie_ids[i])

    def _new_bookie(self, bookie_id: str | None) -> JavaBookie:
        index = len(self.bookies)
        bookie = JavaBookie(
            version=self.version,
            base_dir=self.base_dir / f"bookie-{index}",
            metadata_service_uri=self.metadata_service_uri,
            bookie_id=bookie_id,
            journal_sync_data=self.journal_sync_data,
            conf_overrides=self.conf_overrides,
            jvm_args=self.jvm_args,
        )
        self.bookies.append(bookie)
        return bookie

    @property
    def zk(self) -> KazooClient:
        """The cluster's own kazoo client (for registration checks)."""
        if self._zk is None:
            zk = KazooClient(hosts=self.zk_hosts, timeout=10.0)
            try:
                zk.start(timeout=15)
            except Exception as exc:
                zk.close()
                raise HarnessError(f"cannot connect to ZooKeeper at {self.zk_hosts}: {exc}") from exc
            self._zk = zk
        return self._zk

    # -- views ---------------------------------------------------------------------------------------------------
    @property
    def bookie_ids(self) -> list[str]:
        """BookieIds, in bookie order ("127.0.0.1:PORT" unless a custom bookieId was given)."""
        return [b.bookie_id for b in self.bookies]

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of every bookie, in bookie order."""
        return [b.address for b in self.bookies]

    @property
    def ports(self) -> list[int]:
        """Bookie ports, in bookie order."""
        return [b.port for b in self.bookies]

    def is_alive(self, i: int) -> bool:
        """True while bookie i's JVM runs."""
        return self.bookies[i].is_alive

    def registered(self, readonly: bool = False) -> list[str]:
        """BookieIds registered now under `<root>/available` (or `available/readonly`)."""
        path = f"{self.root}/available/readonly" if readonly else f"{self.root}/available"
        children = self.zk.get_children(path) if self.zk.exists(path) else []
        return sorted(c for c in children if c != "readonly")

    # -- life cycle ----------------------------------------------------------------------------------------------
    def start_all(self) -> "JavaBookieCluster":
        """Start every stopped bookie (JVMs in parallel) and wait until all are registered."""
        pending = [b for b in self.bookies if not b.is_alive]
        stale = {id(b): self.zk.exists(b.registration_path(self.root)) for b in pending}
        for bookie in pending:
            bookie.launch()
        try:
            for bookie in pending:
                old = stale[id(bookie)]
                bookie.wait_ready(self.zk, self.root, self.start_timeout, None if old is None else old.czxid)
        except HarnessError:
            self.close()
            raise
        return self

    def start(self, i: int) -> None:
        """(Re)start bookie i with its old directories, port and id; wait until it is registered."""
        bookie = self.bookies[i]
        # After kill(i) the old registration lives until its session expires; do not mistake it for the new one.
        stale = self.zk.exists(bookie.registration_path(self.root))
        bookie.launch()
        bookie.wait_ready(self.zk, self.root, self.start_timeout, stale_czxid=None if stale is None else stale.czxid)

    def add_bookie(self, bookie_id: str | None = None, start: bool = True) -> int:
        """Add one more bookie to the cluster (started unless `start=False`); return its index."""
        self._new_bookie(bookie_id)
        index = len(self.bookies) - 1
        if start:
            self.start(index)
        return index

    def stop(self, i: int, timeout: float = 20.0) -> None:
        """Stop bookie i gracefully (SIGTERM: it unregisters), SIGKILL after `timeout` seconds."""
        self.bookies[i].stop(timeout)

    def kill(self, i: int) -> None:
        """SIGKILL bookie i (a crash: its registration vanishes when its ZooKeeper session expires)."""
        self.bookies[i].kill()

    def wait_unregistered(self, i: int, timeout: float = 60.0) -> None:
        """Wait until bookie i is gone from `<root>/available` (e.g. after kill: session expiry)."""
        path = self.bookies[i].registration_path(self.root)
        deadline = time.monotonic() + timeout
        while self.zk.exists(path) is not None:
            if time.monotonic() > deadline:
                raise HarnessError(f"bookie {self.bookies[i].bookie_id} still registered at {path} after {timeout}s")
            time.sleep(0.2)

    def wait_registered(self, i: int, timeout: float = 60.0) -> None:
        """Wait until bookie i is registered under `<root>/available`."""
        self.bookies[i].wait_ready(self.zk, self.root, timeout)

    def close(self) -> None:
        """Stop every bookie (SIGTERM, then SIGKILL) and close the kazoo client."""
        for bookie in self.bookies:
            bookie.stop(timeout=10.0)  # also settles a bookie that exited by itself
        if self._zk is not None:
            try:
                self._zk.stop()
            finally:
                self._zk.close()
                self._zk = None

    def log_tail(self, i: int, lines: int = 80) -> str:
        """End of bookie i's logs."""
        return self.bookies[i].log_tail(lines)

    def __enter__(self) -> "JavaBookieCluster":
        return self.start_all()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<JavaBookieCluster {self.version} {self.metadata_service_uri} {self.bookie_ids}>"


# -- shell and tools ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RunDirs:
    conf: Path
    log4j: Path
    log: Path


class JavaTools:
    """Runs Apache BookKeeper's BookieShell and our tools/java programs as short-lived JVMs."""

    # Loggers whose INFO lines are the shell's output (the 4.14+ shell commands print through slf4j).
    SHELL_CONSOLE_LOGGERS: tuple[str, ...] = (
        "org.apache.bookkeeper.tools",
        "org.apache.bookkeeper.bookie.BookieShell",
        "org.apache.bookkeeper.client.BookKeeperAdmin",
    )

    def __init__(self, base_dir: str | os.PathLike[str]) -> None:
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._counter = 0
        self._lock = threading.Lock()

    def _dirs(
        self,
        name: str,
        console_loggers: Sequence[str],
        conf: Mapping[str, ConfValue] | None,
        console_target: str = "SYSTEM_OUT",
    ) -> _RunDirs:
        with self._lock:
            self._counter += 1
            run_dir = self.base_dir / f"{self._counter:04d}-{name}"
        run_dir.mkdir(parents=True, exist_ok=True)
        log = run_dir / "java.log"
        log4j = write_log4j2(
            run_dir / "log4j2.properties", log, console=True, console_loggers=console_loggers, console_target=console_target
        )
        conf_path = write_properties(run_dir / "client.conf", conf or {})
        return _RunDirs(conf_path, log4j, log)

    @staticmethod
    def _client_conf(metadata_service_uri: str | None, extra: Mapping[str, ConfValue] | None) -> dict[str, ConfValue]:
        conf: dict[str, ConfValue] = {"allowLoopback": True, "zkTimeout": 10000, "enableStatistics": False}
        if metadata_service_uri is not None:
            conf["metadataServiceUri"] = metadata_service_uri
        if extra:
            conf.update(extra)
        return conf

    @staticmethod
    def _exec(
        argv: list[str],
        timeout: float,
        input: str | None,
        what: str,
        cwd: Path,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a JVM to completion in its own session; HarnessError with its output on timeout."""
        try:
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                input=input,
                cwd=cwd,
                env=None if env is None else dict(env),
                start_new_session=True,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            raise HarnessError(f"{what} timed out after {timeout}s\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}") from exc

    def shell(
        self,
        version: str,
        metadata_service_uri: str,
        *args: str,
        timeout: float = 180.0,
        conf: Mapping[str, ConfValue] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`bookkeeper shell <args>` of `version` against `metadata_service_uri` (stdout holds the command's output).

        The configuration file is passed with `-conf`; `conf` adds or overrides settings.
        """
        name = args[0] if args else "shell"
        dirs = self._dirs(f"shell-{name}", self.SHELL_CONSOLE_LOGGERS, self._client_conf(metadata_service_uri, conf))
        jvm, cds = _jvm_command(version, SHELL_MAIN, dirs.log4j, cds_kind="shell")
        argv = [*jvm, "-conf", str(dirs.conf), *map(str, args)]
        result: subprocess.CompletedProcess[str] | None = None
        try:
            result = self._exec(argv, timeout, None, f"bookkeeper shell {' '.join(map(str, args))}", dirs.conf.parent)
        finally:
            cds.finish(clean_exit=result is not None and result.returncode == 0)
        return result

    def run(
        self,
        version: str,
        main_class: str,
        *args: str,
        metadata_service_uri: str | None = None,
        timeout: float = 180.0,
        input: str | None = None,
        conf: Mapping[str, ConfValue] | None = None,
        jvm_args: Sequence[str] = (),
    ) -> subprocess.CompletedProcess[str]:
        """Run `main_class` (from tools/java or BookKeeper's jars) with `args`.

        With `metadata_service_uri`, the program gets it three ways: system property `bkspark.metadataServiceUri`,
        environment variable `BKSPARK_METADATA_SERVICE_URI`, and system property `bkspark.clientConf` naming a
        client configuration file (`metadataServiceUri=...` plus `conf`). Log lines go to a file; WARN and above
        also to stderr, so that stdout holds only what the program prints.
        """
        argv, env, run_dir = self.command(
            version, main_class, *args, metadata_service_uri=metadata_service_uri, conf=conf, jvm_args=jvm_args
        )
        return self._exec(argv, timeout, input, main_class, run_dir, env)

    def command(
        self,
        version: str,
        main_class: str,
        *args: str,
        metadata_service_uri: str | None = None,
        conf: Mapping[str, ConfValue] | None = None,
        jvm_args: Sequence[str] = (),
    ) -> tuple[list[str], dict[str, str], Path]:
        """What `run` executes: (argv, environment, working directory with the generated files)."""
        dirs = self._dirs(
            main_class.rsplit(".", 1)[-1], (), self._client_conf(metadata_service_uri, conf), console_target="SYSTEM_ERR"
        )
        extra = [f"-Dbkspark.clientConf={dirs.conf}", *jvm_args]
        env = dict(os.environ)
        if metadata_service_uri is not None:
            extra.append(f"-Dbkspark.metadataServiceUri={metadata_service_uri}")
            env["BKSPARK_METADATA_SERVICE_URI"] = metadata_service_uri
        jvm, _ = _jvm_command(version, main_class, dirs.log4j, extra, with_tools=True)
        return [*jvm, *map(str, args)], env, dirs.conf.parent

    def start(
        self,
        version: str,
        main_class: str,
        *args: str,
        metadata_service_uri: str | None = None,
        conf: Mapping[str, ConfValue] | None = None,
        jvm_args: Sequence[str] = (),
    ) -> ManagedProcess:
        """Start `main_class` in the background, like `run` but without waiting: a started ManagedProcess whose
        stdout/stderr are files in its directory (`.stdout_path`, `.stderr_path`); stop it with `.terminate()` or
        `.kill()` (the harness kills it at the end of the session otherwise)."""
        argv, env, run_dir = self.command(
            version, main_class, *args, metadata_service_uri=metadata_service_uri, conf=conf, jvm_args=jvm_args
        )
        name = main_class.rsplit(".", 1)[-1]
        return ManagedProcess(name, argv, cwd=run_dir, env=env, log_dir=run_dir).start()


class JavaClusterFactory:
    """Creates started Java bookie clusters and stops them all at `close()` (the factory fixtures' engine)."""

    def __init__(self, make_dir: Callable[[str], Path], default_root: Callable[[], ZkRoot]) -> None:
        self._make_dir = make_dir
        self._default_root = default_root
        self.clusters: list[JavaBookieCluster] = []

    def __call__(
        self,
        version: str = DEFAULT_BK_VERSION,
        bookies: int = 3,
        root: ZkRoot | None = None,
        *,
        bookie_ids: Sequence[str | None] | None = None,
        journal_sync_data: bool = True,
        conf_overrides: Mapping[str, ConfValue] | None = None,
        jvm_args: Sequence[str] = (),
        start: bool = True,
    ) -> JavaBookieCluster:
        """A cluster of `bookies` bookies of `version` on `root` (default: see the fixture), started unless told."""
        if version not in BK_VERSIONS:
            raise ValueError(f"unknown BookKeeper version {version!r}; choose one of {BK_VERSIONS}")
        target = root if root is not None else self._default_root()
        base = self._make_dir(f"java-{version}-cluster")
        cluster = JavaBookieCluster(
            version=version,
            metadata_service_uri=target.metadata_service_uri,
            base_dir=base,
            bookies=bookies,
            bookie_ids=bookie_ids,
            journal_sync_data=journal_sync_data,
            conf_overrides=conf_overrides,
            jvm_args=jvm_args,
        )
        self.clusters.append(cluster)
        if start:
            cluster.start_all()
        return cluster

    def close(self) -> None:
        """Stop every cluster made, newest first."""
        for cluster in reversed(self.clusters):
            cluster.close()
