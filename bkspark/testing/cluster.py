"""A BookKeeper cluster in containers: one ZooKeeper and N bookies, for tests of code that uses BookKeeper.

The containers share the host's network and listen on free loopback ports (bkspark.devcluster.ports), so that
``metadata_service_uri`` and every bookie's BookieId (``127.0.0.1:PORT``) are the addresses the client, Spark and
the containers all use: no port mapping, no address rewriting. Each server gets its configuration in an
environment variable and writes it to a file inside its container before it starts, so that a stopped or killed
bookie started again comes back with the same port, id and data (its container is restarted, not recreated).

Every container carries the labels :data:`CLUSTER_LABEL` and :data:`OWNER_LABEL` (host and pid of the Python
process that started it). ``close()`` removes every container of its cluster by label, whatever happened before;
a cluster that starts removes the containers of owners that have exited on this host (a test process killed
with SIGKILL leaves its containers behind, and with Ryuk off nothing else reaps them). See docs/testing.md.
"""

from __future__ import annotations

import atexit
import os
import socket
import time
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bkspark.devcluster.pids import pid_alive
from bkspark.devcluster.ports import free_port, port_is_open
from bkspark.devcluster.zookeeper import four_letter_word
from bkspark.errors import LocalClusterError
from bkspark.protocol import zk_paths
from bkspark.testing import images as images_mod

__all__ = [
    "BOOKIE_KINDS", "BookKeeperCluster", "CLUSTER_LABEL", "DEFAULT_BOOKKEEPER_VERSION", "OWNER_LABEL",
    "reap_orphans",
]

#: The Apache BookKeeper version of the Java bookies when none is given (the Makefile's CONTAINER_BK_VERSIONS).
DEFAULT_BOOKKEEPER_VERSION = "4.17.3"
BOOKIE_KINDS = ("java", "python")
CLUSTER_LABEL = "org.bkspark.testing.cluster"
OWNER_LABEL = "org.bkspark.testing.owner"

_CONF_ENV = "BKSPARK_CONF"
#: Configuration and data of every server, in its container: under /tmp, writable whatever user an image runs as.
DATA_DIR = "/tmp/bkspark"
_JAVA_CONF = f"{DATA_DIR}/bk_server.conf"
#: Writes $BKSPARK_CONF to a file, then runs the server (a shell in the container, the same for every image).
_WRITE_CONF = f'mkdir -p {DATA_DIR} && printf "%s\\n" "${_CONF_ENV}" > {{path}} && '


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def reap_orphans(client: Any) -> list[str]:
    """Remove the bkspark test containers whose owning process (on this host) has exited; their names."""
    removed = []
    host = socket.gethostname()
    for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
        owner_host, _, pid = container.labels.get(OWNER_LABEL, "").rpartition(":")
        if owner_host == host and pid.isdigit() and not pid_alive(int(pid)):
            try:
                container.remove(force=True, v=True)
                removed.append(container.name)
            except Exception:  # removed meanwhile by another process: what we wanted
                pass
    return removed


def _properties(values: Mapping[str, object]) -> str:
    def text(value: object) -> str:
        return ("true" if value else "false") if isinstance(value, bool) else str(value)

    return "\n".join(f"{key}={text(value)}" for key, value in values.items())


def java_bookie_conf(port: int, metadata_service_uri: str) -> dict[str, object]:
    """bk_server.conf of a Java bookie in a container on 127.0.0.1:port: data under DATA_DIR, small journal
    files, two threads per pool, and nothing else that binds a port (no HTTP server, no Prometheus endpoint: with
    the host's network, two bookies would both want theirs)."""
    return {
        "metadataServiceUri": metadata_service_uri,
        "bookiePort": port,
        "listeningInterface": "lo",
        "advertisedAddress": "127.0.0.1",
        "allowLoopback": True,
        "useHostNameAsBookieID": False,
        "journalDirectories": f"{DATA_DIR}/journal",
        "ledgerDirectories": f"{DATA_DIR}/ledgers",
        "zkTimeout": 6000,
        "journalPreAllocSizeMB": 4,
        "journalMaxGroupWaitMSec": 1,
        "httpServerEnabled": False,
        "statsProviderClass": "org.apache.bookkeeper.stats.NullStatsProvider",
        "autoRecoveryDaemonEnabled": False,
        "extraServerComponents": "",
        "diskUsageThreshold": 0.99,  # a test machine's disk is often fuller than 95 %, Java's default
        "diskUsageWarnThreshold": 0.98,
        "diskUsageLwmThreshold": 0.98,
        "serverNumIOThreads": 2,
        "numAddWorkerThreads": 2,
        "numReadWorkerThreads": 2,
    }


def python_bookie_conf(port: int, metadata_service_uri: str) -> dict[str, object]:
    """bk_server.conf-style settings of bkspark's bookie in a container on 127.0.0.1:port."""
    return {
        "bookiePort": port,
        "advertisedAddress": "127.0.0.1",
        "bindAddress": "127.0.0.1",
        "metadataServiceUri": metadata_service_uri,
        "journalDirectories": f"{DATA_DIR}/journal",
        "ledgerDirectories": f"{DATA_DIR}/ledgers",
        "httpServerEnabled": False,
        "zkTimeout": 6000,
    }


@dataclass
class _Server:
    """One container of the cluster and what it serves."""

    name: str
    port: int
    container: Any = None  # testcontainers' DockerContainer once started
    stale_czxid: int | None = field(default=None, repr=False)

    @property
    def docker(self) -> Any:
        """docker-py's Container."""
        if self.container is None:
            raise LocalClusterError(f"{self.name} was never started")
        return self.container.get_wrapped_container()


_open_clusters: "weakref.WeakSet[BookKeeperCluster]" = weakref.WeakSet()


@atexit.register
def _close_open_clusters() -> None:
    for cluster in list(_open_clusters):
        cluster.close()


class BookKeeperCluster:
    """ZooKeeper and ``bookies`` bookies in containers, formatted and registered; use as a context manager.

    ``bookie="java"``: Apache BookKeeper ``version``'s bookie; ``bookie="python"``: bkspark's own. ``images``:
    ``auto``, ``official`` or ``project`` (bkspark.testing.images; default the environment's
    ``BKSPARK_TESTCONTAINERS_IMAGES``, else auto). ``conf_overrides``: more bk_server.conf settings of every bookie.
    """

    def __init__(
        self,
        bookies: int = 3,
        *,
        bookie: str = "java",
        version: str = DEFAULT_BOOKKEEPER_VERSION,
        images: str | None = None,
        root: str = "/ledgers",
        conf_overrides: Mapping[str, object] | None = None,
        start_timeout: float = 180.0,
    ) -> None:
        if bookie not in BOOKIE_KINDS:
            raise ValueError(f"bookie={bookie!r}: expected one of {', '.join(BOOKIE_KINDS)}")
        if bookies < 1:
            raise ValueError(f"bookies={bookies}: a cluster needs at least one bookie")
        self.bookie_kind = bookie
        self.version = version
        self.images_option = images
        self.root = root
        self.conf_overrides = dict(conf_overrides or {})
        self.start_timeout = start_timeout
        self.cluster_id = uuid.uuid4().hex[:10]
        self.image_set: images_mod.ImageSet | None = None
        self.zookeeper = _Server(f"bkspark-{self.cluster_id}-zookeeper", free_port())
        self.bookies = [_Server(f"bkspark-{self.cluster_id}-bookie-{i}", free_port()) for i in range(bookies)]
        self._client: Any = None
        self._zk: Any = None
        self._closed = False

    # -- views -------------------------------------------------------------------------------------------------
    @property
    def zookeeper_connect_string(self) -> str:
        """``127.0.0.1:PORT`` of the ZooKeeper container."""
        return f"127.0.0.1:{self.zookeeper.port}"

    @property
    def metadata_service_uri(self) -> str:
        """``zk+hierarchical://127.0.0.1:PORT/ledgers``: what clients, Spark and bookies are given."""
        return f"zk+hierarchical://{self.zookeeper_connect_string}{self.root}"

    @property
    def bookie_ids(self) -> list[str]:
        """BookieIds in bookie order (``127.0.0.1:PORT``)."""
        return [f"127.0.0.1:{b.port}" for b in self.bookies]

    def bookie_index(self, bookie_id: str) -> int:
        """The index of the bookie registered as ``bookie_id``."""
        return self.bookie_ids.index(bookie_id)

    def registered(self) -> list[str]:
        """BookieIds registered as available (writable) now."""
        path = zk_paths.available_path(self.root)
        children = self._zk.get_children(path) if self._zk is not None and self._zk.exists(path) else []
        return sorted(c for c in children if c != zk_paths.READONLY)

    def is_running(self, i: int) -> bool:
        """True while bookie i's container runs."""
        container = self.bookies[i].docker
        container.reload()
        return container.status == "running"

    # -- life cycle --------------------------------------------------------------------------------------------
    def start(self) -> "BookKeeperCluster":
        """Start ZooKeeper, format the cluster root, start every bookie and wait until all are registered. On any
        failure every container is removed and LocalClusterError carries their logs."""
        _open_clusters.add(self)
        try:
            self._client = images_mod.docker_client()
            reap_orphans(self._client)
            self.image_set = images_mod.resolve(self.version, self.images_option, self._client)
            if self.image_set.source == images_mod.PROJECT:
                # Ryuk (testcontainers' reaper) is an image from a registry: off where there is none. Teardown is
                # this class's own, by label.
                os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
            self._start_zookeeper()
            for i in range(len(self.bookies)):
                self._run_bookie(i)
            for i in range(len(self.bookies)):
                self._wait_bookie(i)
        except BaseException as exc:
            logs = self._logs_text()
            self.close()
            if isinstance(exc, LocalClusterError):
                raise LocalClusterError(f"{exc}\n{logs}") from exc
            raise
        return self

    def __enter__(self) -> "BookKeeperCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _container(self, server: _Server, image: str, conf: str, run: str, conf_path: str) -> Any:
        from testcontainers.core.container import DockerContainer

        container = (
            DockerContainer(image)
            .with_name(server.name)
            .with_env(_CONF_ENV, conf)
            .with_kwargs(
                network_mode="host",
                entrypoint=["/bin/sh", "-c"],
                labels={CLUSTER_LABEL: self.cluster_id, OWNER_LABEL: _owner()},
            )
            .with_command([_WRITE_CONF.format(path=conf_path) + run])
        )
        server.container = container
        container.start()
        return container

    def _start_zookeeper(self) -> None:
        assert self.image_set is not None
        port = self.zookeeper.port
        cfg = _properties({
            "tickTime": 500, "initLimit": 10, "syncLimit": 5, "dataDir": f"{DATA_DIR}/zookeeper", "clientPort": port,
            "clientPortAddress": "127.0.0.1", "maxClientCnxns": 0, "admin.enableServer": False,
            "4lw.commands.whitelist": "ruok,srvr", "forceSync": "no", "minSessionTimeout": 1000,
            "maxSessionTimeout": 60000,
        })
        self._container(self.zookeeper, self.image_set.zookeeper, cfg,
                        self.image_set.zookeeper_command(f"{DATA_DIR}/zoo.cfg"), f"{DATA_DIR}/zoo.cfg")
        self._wait(self.zookeeper, lambda: four_letter_word(port, "ruok") == "imok"
                   and "Zookeeper version" in four_letter_word(port, "srvr"), f"ZooKeeper on 127.0.0.1:{port}")
        from bkspark.metadata.znodes import ZkClient
        from bkspark.shell.admin import init_new_cluster

        self._zk = ZkClient(hosts=self.zookeeper_connect_string, timeout=10.0)
        self._zk.start(timeout=30)
        init_new_cluster(self._zk, self.root)

    def _run_bookie(self, i: int) -> None:
        assert self.image_set is not None
        server = self.bookies[i]
        if self.bookie_kind == "java":
            conf = {**java_bookie_conf(server.port, self.metadata_service_uri), **self.conf_overrides}
            image = self.image_set.bookkeeper
            run = f"BOOKIE_CONF={_JAVA_CONF} exec {images_mod.BOOKKEEPER_HOME}/bin/bookkeeper bookie"
            path = _JAVA_CONF
        else:
            conf = {**python_bookie_conf(server.port, self.metadata_service_uri), **self.conf_overrides}
            image = images_mod.python_bookie_image()
            path = f"{DATA_DIR}/bookie.conf"
            run = f"exec bookie-server --conf {path}"
        self._container(server, image, _properties(conf), run, path)

    def _wait_bookie(self, i: int) -> None:
        server = self.bookies[i]
        registration = zk_paths.bookie_registration_path(self.root, self.bookie_ids[i])

        def ready() -> bool:
            if not port_is_open(server.port):
                return False
            stat = self._zk.exists(registration)
            return stat is not None and stat.czxid != server.stale_czxid

        self._wait(server, ready, f"bookie {self.bookie_ids[i]} to listen and register at {registration}")

    def _wait(self, server: _Server, predicate: Any, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not predicate():
            container = server.docker
            container.reload()
            if container.status not in ("created", "running"):
                raise LocalClusterError(f"{server.name} exited ({container.status}) while waiting for {what}")
            if time.monotonic() > deadline:
                raise LocalClusterError(f"timed out after {self.start_timeout:.0f} s waiting for {what}")
            time.sleep(0.2)

    # -- faults ------------------------------------------------------------------------------------------------
    def kill_bookie(self, i: int) -> None:
        """SIGKILL bookie i (its container stops at once; its registration lingers until its session expires)."""
        self.bookies[i].docker.kill()
        self.bookies[i].docker.wait(timeout=60)

    def stop_bookie(self, i: int, timeout: int = 20) -> None:
        """Stop bookie i: SIGTERM (it unregisters and exits), SIGKILL after ``timeout`` seconds."""
        self.bookies[i].docker.stop(timeout=timeout)

    def start_bookie(self, i: int) -> None:
        """Start stopped or killed bookie i again (same port, id and data); wait until it is registered anew."""
        server = self.bookies[i]
        stat = self._zk.exists(zk_paths.bookie_registration_path(self.root, self.bookie_ids[i]))
        server.stale_czxid = None if stat is None else stat.czxid
        server.docker.start()
        self._wait_bookie(i)

    # -- Java tools --------------------------------------------------------------------------------------------
    def shell(self, *args: str, bookie: int = 0) -> tuple[int, str]:
        """Apache BookKeeper's shell (``bin/bookkeeper shell ARGS``) in Java bookie ``bookie``'s container, with
        that bookie's configuration: ``(exit code, stdout and stderr)``."""
        if self.bookie_kind != "java":
            raise LocalClusterError("the BookKeeper shell runs in Java bookie containers (bookie='java')")
        script = f'BOOKIE_CONF={_JAVA_CONF} exec {images_mod.BOOKKEEPER_HOME}/bin/bookkeeper shell "$@"'
        code, output = self.bookies[bookie].docker.exec_run(["/bin/sh", "-c", script, "shell", *args])
        return code, output.decode("utf-8", "replace")

    # -- logs and teardown -------------------------------------------------------------------------------------
    def logs(self, tail: int = 200) -> dict[str, str]:
        """The last ``tail`` lines of every container's output, by container name."""
        out: dict[str, str] = {}
        for server in [self.zookeeper, *self.bookies]:
            if server.container is None:
                continue
            try:
                out[server.name] = server.docker.logs(tail=tail).decode("utf-8", "replace")
            except Exception as exc:  # removed already, or the engine went away
                out[server.name] = f"(no logs: {type(exc).__name__}: {exc})"
        return out

    def _logs_text(self, tail: int = 200) -> str:
        return "\n".join(f"--- {name} ---\n{text}" for name, text in self.logs(tail).items())

    def close(self) -> None:
        """Remove every container of this cluster (by label: also those whose start failed half-way)."""
        if self._closed:
            return
        self._closed = True
        _open_clusters.discard(self)
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception:
                pass
        if self._client is None:
            return
        try:
            for container in self._client.containers.list(all=True, filters={"label": f"{CLUSTER_LABEL}={self.cluster_id}"}):
                try:
                    container.remove(force=True, v=True)
                except Exception:  # already gone
                    pass
        finally:
            self._client.close()

    def __repr__(self) -> str:
        return (f"<BookKeeperCluster {self.metadata_service_uri} {len(self.bookies)} {self.bookie_kind} bookies "
                f"({self.image_set.source if self.image_set else 'not started'})>")
