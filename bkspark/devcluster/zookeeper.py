"""A real ZooKeeper server on 127.0.0.1 (cluster formatting, ``init_new_cluster``, is bkspark.shell.admin's)."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bkspark.devcluster.java import JVM_OPTS, java_executable
from bkspark.devcluster.ports import free_port
from bkspark.devcluster.process import LocalClusterError, ManagedProcess
from bkspark.metadata.znodes import ZkClient
from bkspark.shell.admin import HIERARCHICAL_LAYOUT, init_new_cluster  # one home: `bkspark shell initnewcluster`

__all__ = [
    "HIERARCHICAL_LAYOUT",
    "ZkRoot",
    "ZooKeeperServer",
    "four_letter_word",
    "init_new_cluster",
    "zookeeper_classpath",
]

DEBIAN_JAVA_DIR = Path("/usr/share/java")



def zookeeper_classpath() -> list[str]:
    """Classpath of a ZooKeeper server: $ZOOKEEPER_HOME (conf/ and lib/*.jar) or Debian's `zookeeper` package."""
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(str(p) for p in Path(home).glob("lib/*.jar")) + sorted(str(p) for p in Path(home).glob("*.jar"))
        if not any("zookeeper" in Path(j).name for j in jars):
            raise LocalClusterError(
                f"bkspark harness: ZOOKEEPER_HOME={home} holds no zookeeper jar in lib/ "
                "(unset it to use Debian's package, which `make zookeeper` installs)"
            )
        return [str(Path(home) / "conf"), *jars]
    main_jar = DEBIAN_JAVA_DIR / "zookeeper.jar"
    if not main_jar.is_file():
        raise LocalClusterError(
            "bkspark harness: ZooKeeper is not installed (no $ZOOKEEPER_HOME and no /usr/share/java/zookeeper.jar). "
            "Run `make zookeeper` (installs Debian's `zookeeper` package) or set ZOOKEEPER_HOME to a ZooKeeper 3.6+ "
            "distribution."
        )
    # Debian's zookeeper.jar names its dependencies in its manifest Class-Path; slf4j needs a binding.
    binding = DEBIAN_JAVA_DIR / "slf4j-simple.jar"
    return [str(main_jar), *([str(binding)] if binding.is_file() else [])]


def four_letter_word(port: int, word: str = "ruok", host: str = "127.0.0.1", timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command and return the reply ('' when nothing answers)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            while True:
                data = sock.recv(4096)
                if not data:
                    break
                chunks.append(data)
    except OSError:
        return ""
    return b"".join(chunks).decode("utf-8", "replace")


class ZooKeeperServer:
    """A standalone ZooKeeper (`ZooKeeperServerMain`) on 127.0.0.1, data and logs under `base_dir`."""

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        port: int | None = None,
        tick_time_ms: int = 500,
        *,
        die_with_parent: bool = True,
        extra_config: Sequence[str] = (),
        jvm_args: Sequence[str] = (),
    ) -> None:
        self.base_dir = Path(base_dir)
        #: More zoo.cfg lines and JVM options (e.g. SASL authentication required: docs/security.md).
        self.extra_config = list(extra_config)
        self.jvm_args = list(jvm_args)
        self.port = port if port is not None else free_port()
        self.tick_time_ms = tick_time_ms
        self.data_dir = self.base_dir / "data"
        self.config_path = self.base_dir / "zoo.cfg"
        self.die_with_parent = die_with_parent
        self._process: ManagedProcess | None = None

    @property
    def connect_string(self) -> str:
        """ZooKeeper connect string, "127.0.0.1:PORT"."""
        return f"127.0.0.1:{self.port}"

    @property
    def process(self) -> ManagedProcess | None:
        """The server's ManagedProcess (None before start)."""
        return self._process

    def write_config(self) -> Path:
        """Write zoo.cfg: loopback only, admin server off, every four-letter word allowed, no fsync."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.tick_time_ms}",
            "initLimit=10",
            "syncLimit=5",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            "maxClientCnxns=0",
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            "forceSync=no",
            "autopurge.purgeInterval=0",
            *self.extra_config,
        ]
        self.config_path.write_text("\n".join(lines) + "\n")
        return self.config_path

    def start(self, timeout: float = 60.0) -> "ZooKeeperServer":
        """Start the server and wait until it serves requests (`ruok`, then `srvr`)."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        argv = [
            java_executable(),
            *JVM_OPTS,
            "-Xmx128m",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.4lw.commands.whitelist=*",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            *self.jvm_args,
            "-cp",
            os.pathsep.join(zookeeper_classpath()),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(self.config_path),
        ]
        if self._process is None:
            self._process = ManagedProcess(
                "zookeeper", argv, cwd=self.base_dir, log_dir=self.base_dir, die_with_parent=self.die_with_parent
            )
        else:
            self._process.argv = argv
        self._process.start()
        self._process.wait_until(self.is_serving, timeout=timeout, what=f"ZooKeeper on {self.port} to serve")
        return self

    def is_serving(self) -> bool:
        """True once the server serves requests: `ruok` answers `imok` as soon as the port is bound, so this
        also asks `srvr`, which says "not currently serving requests" until the database is loaded."""
        return four_letter_word(self.port, "ruok") == "imok" and "Zookeeper version" in four_letter_word(
            self.port, "srvr"
        )

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL)."""
        if self._process is not None:
            self._process.terminate()

    def kill(self) -> None:
        """SIGKILL the server."""
        if self._process is not None:
            self._process.kill()

    @property
    def is_alive(self) -> bool:
        """True while the server process runs."""
        return self._process is not None and self._process.is_alive

    def client(self, timeout: float = 15.0) -> ZkClient:
        """A started kazoo client connected to this server (the caller stops and closes it)."""
        zk = ZkClient(hosts=self.connect_string, timeout=10.0)
        try:
            zk.start(timeout=timeout)
        except Exception as exc:
            zk.close()
            raise LocalClusterError(f"cannot connect to ZooKeeper at {self.connect_string}: {exc}") from exc
        return zk

    def __repr__(self) -> str:
        return f"<ZooKeeperServer {self.connect_string} alive={self.is_alive}>"


@dataclass
class ZkRoot:
    """A formatted BookKeeper cluster root (`init_new_cluster`) on a ZooKeeperServer, with a kazoo client."""

    path: str
    server: ZooKeeperServer
    zk_client: ZkClient
    instance_id: str
    ledger_manager: str = "hierarchical"

    @property
    def connect_string(self) -> str:
        """ZooKeeper connect string, "127.0.0.1:PORT"."""
        return self.server.connect_string

    @property
    def metadata_service_uri(self) -> str:
        """`zk+hierarchical://127.0.0.1:PORT/<root>`, as Java's `metadataServiceUri`."""
        return f"zk+{self.ledger_manager}://{self.server.connect_string}{self.path}"

    def close(self) -> None:
        """Stop and close the kazoo client."""
        try:
            self.zk_client.stop()
        finally:
            self.zk_client.close()
