"""Which container images a BookKeeper cluster runs, and building the project's own (docs/testing.md).

Two sources of images, one option (:data:`IMAGES_ENV`, or ``images=`` of the cluster) to choose:

* ``official``: ``zookeeper:3.9`` and ``apache/bookkeeper:<version>`` from an image registry;
* ``project``: images built here from the Dockerfiles of ``docker/`` on a local Debian base (``debootstrap`` and
  ``docker import``), so that nothing is pulled: ``bkspark/zookeeper``, ``bkspark/bookkeeper:<version>``;
* ``auto`` (the default): the official images when the engine already has them, else the project's when it has
  them, else the official ones when the registry answers a TCP connect within :data:`REGISTRY_PROBE_SECONDS`,
  else an error that says to run ``make containers``.

bkspark's own bookie has no official image: it is always ``bkspark/python-bookie:<bkspark version>``.

:func:`build` makes the project's images, each cached under a label holding the hash of what it is made of (its
Dockerfile and files, its parent's hash, the jars or sources it copies), so that a second ``make containers``
builds nothing. ``python -m bkspark.testing build`` is what the Makefile runs.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bkspark.errors import LocalClusterError

__all__ = [
    "BASE_IMAGE", "BOOKKEEPER_HOME", "HASH_LABEL", "IMAGES_ENV", "ImageSet", "JRE_IMAGE", "OFFICIAL", "PROJECT",
    "REGISTRY_ENV", "REGISTRY_PROBE_SECONDS", "build", "docker_client", "python_bookie_image", "registry_reachable",
    "resolve",
]

#: The option that chooses the images: ``auto`` (default), ``official`` or ``project``.
IMAGES_ENV = "BKSPARK_TESTCONTAINERS_IMAGES"
#: host:port that ``auto`` probes for a registry (default Docker Hub's).
REGISTRY_ENV = "BKSPARK_TESTCONTAINERS_REGISTRY"
REGISTRY_PROBE_SECONDS = 2.0
AUTO, OFFICIAL, PROJECT = "auto", "official", "project"
SOURCES = (AUTO, OFFICIAL, PROJECT)

#: Label of every project image: the hash of what it is built from.
HASH_LABEL = "org.bkspark.content-hash"
BASE_IMAGE = "bkspark/debian-base:bookworm"
JRE_IMAGE = "bkspark/jre:17"
#: ZooKeeper from the jars of the first Apache BookKeeper image built (docker/zookeeper/Dockerfile says why).
PROJECT_ZOOKEEPER = "bkspark/zookeeper:local"
OFFICIAL_ZOOKEEPER = "zookeeper:3.9"
#: Where Apache BookKeeper lives in its official image, and in the project's (same layout: bin/, conf/, lib/).
BOOKKEEPER_HOME = "/opt/bookkeeper"


@dataclass(frozen=True)
class ImageSet:
    """The images of one cluster and how each starts a server from a config file written in the container."""

    source: str  # OFFICIAL or PROJECT
    zookeeper: str
    bookkeeper: str  # of the cluster's Apache BookKeeper version

    def zookeeper_command(self, cfg_path: str) -> str:
        """Shell command that runs ZooKeeper in the foreground with ``cfg_path``."""
        if self.source == OFFICIAL:
            return f"exec zkServer.sh start-foreground {cfg_path}"
        return f"exec zookeeper-server {cfg_path}"


def python_bookie_image() -> str:
    """``bkspark/python-bookie:<version of this bkspark>``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"bkspark/python-bookie:{version('bkspark')}"
    except PackageNotFoundError:
        return "bkspark/python-bookie:dev"


def project_bookkeeper(version: str) -> str:
    return f"bkspark/bookkeeper:{version}"


def official_bookkeeper(version: str) -> str:
    return f"apache/bookkeeper:{version}"


def docker_client() -> Any:
    """A docker-py client from the environment (DOCKER_HOST or the local socket); LocalClusterError when no
    engine answers."""
    try:
        import docker
    except ImportError as exc:
        raise LocalClusterError("bkspark.testing needs the testcontainers extra: pip install 'bkspark[testcontainers]'") from exc
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # docker.errors.DockerException, requests' connection errors
        raise LocalClusterError(f"no container engine answers ({type(exc).__name__}: {exc}); start Docker, or run "
                                f"`make containers` as root in a checkout of bkspark") from exc
    return client


def _has_image(client: Any, name: str) -> bool:
    import docker.errors

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def registry_reachable(address: str | None = None, timeout: float = REGISTRY_PROBE_SECONDS) -> bool:
    """Whether a TCP connection to the registry (``host:port``, default :data:`REGISTRY_ENV` or Docker Hub)
    opens within ``timeout`` seconds, name lookup included (in a thread: ``getaddrinfo`` has no timeout of its own,
    and a machine without DNS can block in it far longer)."""
    host, _, port = (address or os.environ.get(REGISTRY_ENV) or "registry-1.docker.io:443").rpartition(":")
    result: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                result.append(True)
        except (OSError, ValueError):
            result.append(False)

    worker = threading.Thread(target=probe, name="bkspark-registry-probe", daemon=True)
    worker.start()
    worker.join(timeout)
    return bool(result and result[0])


def resolve(bookkeeper_version: str, images: str | None = None, client: Any = None) -> ImageSet:
    """The ImageSet to use for ``bookkeeper_version`` (``images``: a source name, default :data:`IMAGES_ENV`)."""
    source = (images or os.environ.get(IMAGES_ENV) or AUTO).strip().lower()
    if source not in SOURCES:
        raise ValueError(f"{IMAGES_ENV}/images={source!r}: expected one of {', '.join(SOURCES)}")
    official = ImageSet(OFFICIAL, OFFICIAL_ZOOKEEPER, official_bookkeeper(bookkeeper_version))
    project = ImageSet(PROJECT, PROJECT_ZOOKEEPER, project_bookkeeper(bookkeeper_version))
    if source == OFFICIAL:
        return official
    if source == PROJECT:
        return project
    client = client or docker_client()
    for candidate in (official, project):
        if _has_image(client, candidate.zookeeper) and _has_image(client, candidate.bookkeeper):
            return candidate
    if registry_reachable():
        return official
    raise LocalClusterError(
        f"no image registry answers and the project's images for Apache BookKeeper {bookkeeper_version} are not "
        f"built: run `make containers CONTAINER_BK_VERSIONS={bookkeeper_version}` in a checkout of bkspark "
        f"(docs/testing.md)"
    )


# -- building the project's images ------------------------------------------------------------------------------


def _hash_files(parts: Iterable[str], paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\0")
    for path in sorted(paths):
        digest.update(str(path.name).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _label(client: Any, name: str) -> str | None:
    import docker.errors

    try:
        return (client.images.get(name).labels or {}).get(HASH_LABEL)
    except docker.errors.ImageNotFound:
        return None


def _files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()]


def _place(source: Path, target: Path) -> None:
    """Put ``source`` into a build context: a hard link where it can (jars are large), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


class _Builder:
    """Builds each image only when its label's hash differs from the hash of what it is made of now."""

    def __init__(self, client: Any, repo: Path, log: Any = print) -> None:
        self.client = client
        self.repo = repo
        self.docker_dir = repo / "docker"
        self.log = log

    def base(self) -> str:
        """The Debian base: docker/base.sh (debootstrap + docker import)."""
        content = _hash_files([os.environ.get("BKSPARK_DEBIAN_SUITE", "bookworm")], [self.docker_dir / "base.sh"])
        if _label(self.client, BASE_IMAGE) != content:
            self.log(f"bkspark: building {BASE_IMAGE} (debootstrap, a minute or two)")
            subprocess.run(["bash", str(self.docker_dir / "base.sh"), BASE_IMAGE, f"{HASH_LABEL}={content}"],
                           check=True)
        return content

    def image(self, name: str, context: Path, parent_hash: str, extra: Sequence[str] = (),
              buildargs: dict[str, str] | None = None) -> str:
        """``docker build`` of ``context`` (its Dockerfile) as ``name`` unless its hash is unchanged."""
        content = _hash_files([parent_hash, *extra], _files(context))
        if _label(self.client, name) == content:
            return content
        self.log(f"bkspark: building {name}")
        try:
            self.client.images.build(path=str(context), tag=name, rm=True, forcerm=True, network_mode="host",
                                     labels={HASH_LABEL: content}, buildargs=buildargs or {}, pull=False)
        except Exception as exc:  # docker.errors.BuildError carries the build log
            log = "".join(str(chunk.get("stream", chunk.get("error", ""))) for chunk in getattr(exc, "build_log", []))
            raise LocalClusterError(f"building {name} failed: {exc}\n{log[-4000:]}") from exc
        return content

    def bookkeeper(self, jre_hash: str, version: str, lib: Path) -> str:
        jars = sorted(lib.glob("*.jar"))
        if not jars:
            raise LocalClusterError(f"{lib} holds no jars: run `make jars BK_VERSIONS={version}` first")
        with tempfile.TemporaryDirectory(prefix="bkspark-bk-image-") as tmp:
            context = Path(tmp)
            for path in _files(self.docker_dir / "bookkeeper"):
                _place(path, context / path.name)
            (context / "lib").mkdir()
            for jar in jars:
                _place(jar, context / "lib" / jar.name)
            manifest = [f"{j.name}:{j.stat().st_size}" for j in jars]
            return self.image(project_bookkeeper(version), context, jre_hash, [version, *manifest])

    def python_bookie(self, base_hash: str) -> None:
        """bkspark's bookie from wheels of this checkout and its dependencies (``pip wheel``)."""
        sources = [p for d in ("bkspark", "bookie_server") for p in (self.repo / d).rglob("*")
                   if p.is_file() and p.suffix in {".py", ".c", ".h", ".proto"}]
        sources += [self.repo / "pyproject.toml", self.repo / "setup.py"]
        name = python_bookie_image()
        dockerfile = self.docker_dir / "python-bookie" / "Dockerfile"
        content = _hash_files([base_hash, *(str(p.relative_to(self.repo)) for p in sorted(sources))],
                              [dockerfile, *sources])
        if _label(self.client, name) == content:
            return
        with tempfile.TemporaryDirectory(prefix="bkspark-py-image-") as tmp:
            context = Path(tmp)
            (context / "Dockerfile").write_bytes(dockerfile.read_bytes())
            self.log("bkspark: pip wheel (bkspark and its dependencies) for the python-bookie image")
            subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(context / "wheels"),
                            str(self.repo)], check=True)
            # The context's own hash would differ with every wheel build: label the image with the sources' hash.
            self.log(f"bkspark: building {name}")
            try:
                self.client.images.build(path=str(context), tag=name, rm=True, forcerm=True, network_mode="host",
                                         labels={HASH_LABEL: content}, pull=False)
            except Exception as exc:
                log = "".join(str(c.get("stream", c.get("error", ""))) for c in getattr(exc, "build_log", []))
                raise LocalClusterError(f"building {name} failed: {exc}\n{log[-4000:]}") from exc


def build(repo: Path, versions: Sequence[str], cache: Path, python_bookie: bool = True) -> None:
    """Build (or keep, when unchanged) the project's images: base, JRE, one Apache BookKeeper image per version
    (jars from ``cache/bookkeeper/<version>/lib``), ZooKeeper on the first of them, and bkspark's bookie."""
    if not versions:
        raise LocalClusterError("name at least one Apache BookKeeper version (its jars hold ZooKeeper's server too)")
    builder = _Builder(docker_client(), repo)
    base_hash = builder.base()
    jre_hash = builder.image(JRE_IMAGE, repo / "docker" / "jre", base_hash)
    bookkeeper_hashes = [builder.bookkeeper(jre_hash, v, cache / "bookkeeper" / v / "lib") for v in versions]
    builder.image(PROJECT_ZOOKEEPER, repo / "docker" / "zookeeper", bookkeeper_hashes[0],
                  buildargs={"BOOKKEEPER": project_bookkeeper(versions[0])})
    if python_bookie:
        builder.python_bookie(base_hash)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bkspark.testing", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the project's images (cached by content hash)")
    b.add_argument("--repo", type=Path, default=Path.cwd(), help="the bkspark checkout (its docker/ directory)")
    b.add_argument("--cache", type=Path, default=None, help="the jar cache (default $BKSPARK_CACHE or REPO/.cache)")
    b.add_argument("--bookkeeper", nargs="+", required=True, metavar="VERSION",
                   help="Apache BookKeeper versions (ZooKeeper's image is built on the first)")
    b.add_argument("--no-python-bookie", action="store_true")
    sub.add_parser("resolve", help="print the images `auto` picks for --version").add_argument("--version",
                                                                                              default="4.17.3")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            cache = args.cache or Path(os.environ.get("BKSPARK_CACHE") or args.repo / ".cache")
            build(args.repo.resolve(), args.bookkeeper, cache, python_bookie=not args.no_python_bookie)
        else:
            print(resolve(args.version))
    except LocalClusterError as exc:
        print(f"bkspark: {exc}", file=sys.stderr)
        return 1
    return 0

