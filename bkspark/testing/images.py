"""Which container images a BookKeeper cluster runs, and building the project's own (docs/testing.md).

Two sources of images, one option (:data:`IMAGES_ENV`, or ``images=`` of the cluster) to choose:

* ``official``: ``zookeeper:3.9`` and ``apache/bookkeeper:<version>`` from an image registry;
* ``project``: images built here from the Dockerfiles of ``docker/`` on a local Debian base (``debootstrap`` and
  ``docker import``), so that nothing is pulled: ``bkspark/zookeeper:<ZOOKEEPER_VERSION>``,
  ``bkspark/bookkeeper:<version>``;
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
from concurrent.futures import ThreadPoolExecutor
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
#: The ZooKeeper of the project's image (its jars from Maven Central: docker/zookeeper/pom.xml), the version
#: Apache BookKeeper 4.17 is built with.
ZOOKEEPER_VERSION = "3.9.3"
PROJECT_ZOOKEEPER = f"bkspark/zookeeper:{ZOOKEEPER_VERSION}"
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

    def base_hash(self) -> str:
        return _hash_files([os.environ.get("BKSPARK_DEBIAN_SUITE", "bookworm")], [self.docker_dir / "base.sh"])

    def base(self) -> str:
        """The Debian base: docker/base.sh (debootstrap + docker import)."""
        content = self.base_hash()
        if _label(self.client, BASE_IMAGE) != content:
            self.log(f"bkspark: building {BASE_IMAGE} (debootstrap)")
            subprocess.run(["bash", str(self.docker_dir / "base.sh"), BASE_IMAGE, f"{HASH_LABEL}={content}"],
                           check=True)
        return content

    def _docker_build(self, name: str, context: Path, content: str) -> None:
        self.log(f"bkspark: building {name}")
        try:
            self.client.images.build(path=str(context), tag=name, rm=True, forcerm=True, network_mode="host",
                                     labels={HASH_LABEL: content}, pull=False)
        except Exception as exc:  # docker.errors.BuildError carries the build log
            log = "".join(str(chunk.get("stream", chunk.get("error", ""))) for chunk in getattr(exc, "build_log", []))
            raise LocalClusterError(f"building {name} failed: {exc}\n{log[-4000:]}") from exc

    def image(self, name: str, context: Path, parent_hash: str, extra: Sequence[str] = ()) -> str:
        """``docker build`` of ``context`` (its Dockerfile) as ``name`` unless its hash is unchanged."""
        content = _hash_files([parent_hash, *extra], _files(context))
        if _label(self.client, name) != content:
            self._docker_build(name, context, content)
        return content

    def jars_image(self, name: str, context_dir: Path, lib: Path, parent_hash: str, what: str) -> str:
        """An image of ``context_dir``'s files plus ``lib/`` (hard links of ``lib``'s jars)."""
        jars = sorted(lib.glob("*.jar"))
        if not jars:
            raise LocalClusterError(f"{lib} holds no jars ({what})")
        with tempfile.TemporaryDirectory(prefix="bkspark-image-") as tmp:
            context = Path(tmp)
            for path in _files(context_dir):
                _place(path, context / path.name)
            (context / "lib").mkdir()
            for jar in jars:
                _place(jar, context / "lib" / jar.name)
            manifest = [f"{j.name}:{j.stat().st_size}" for j in jars]
            return self.image(name, context, parent_hash, manifest)

    def zookeeper_jars(self, cache: Path) -> Path:
        """``cache/zookeeper/<version>/lib``: ZooKeeper's server and runtime jars, resolved by Maven once."""
        lib = cache / "zookeeper" / ZOOKEEPER_VERSION / "lib"
        if (lib / ".ok").is_file():
            return lib
        self.log(f"bkspark: resolving Apache ZooKeeper {ZOOKEEPER_VERSION}'s jars (Maven)")
        staging = lib.with_name("lib.new")
        shutil.rmtree(staging, ignore_errors=True)
        proc = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(self.docker_dir / "zookeeper" / "pom.xml"),
             f"-Dzookeeper.version={ZOOKEEPER_VERSION}", "dependency:copy-dependencies",
             f"-DoutputDirectory={staging}"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise LocalClusterError(f"Maven could not resolve Apache ZooKeeper {ZOOKEEPER_VERSION}:\n"
                                    f"{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
        shutil.rmtree(lib, ignore_errors=True)
        staging.rename(lib)
        (lib / ".ok").touch()
        return lib

    def python_bookie_hash(self, base_hash: str) -> str:
        """The hash of bkspark's bookie image: its Dockerfile, the base's hash, and this checkout's sources (not
        the wheels: a wheel built again differs in its timestamps)."""
        sources = sorted(p for d in ("bkspark", "bookie_server") for p in (self.repo / d).rglob("*")
                         if p.is_file() and p.suffix in {".py", ".c", ".h", ".proto"})
        sources += [self.repo / "pyproject.toml", self.repo / "setup.py"]
        dockerfile = self.docker_dir / "python-bookie" / "Dockerfile"
        return _hash_files([base_hash, *(str(p.relative_to(self.repo)) for p in sources)], [dockerfile, *sources])

    def python_wheels(self, wheels: Path) -> None:
        """``pip wheel`` of this checkout and its dependencies into ``wheels`` (no engine needed: it runs while
        the base is made)."""
        self.log("bkspark: pip wheel (bkspark and its dependencies) for the python-bookie image")
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels), str(self.repo)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise LocalClusterError(f"pip wheel failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")

    def python_bookie(self, context: Path, content: str) -> None:
        """bkspark's bookie image from ``context`` (the wheels already there)."""
        shutil.copy2(self.docker_dir / "python-bookie" / "Dockerfile", context / "Dockerfile")
        self._docker_build(python_bookie_image(), context, content)


def build(repo: Path, versions: Sequence[str], cache: Path, python_bookie: bool = True) -> None:
    """Build (or keep, when unchanged) the project's images: base, JRE, ZooKeeper, one Apache BookKeeper image
    per version (jars from ``cache/bookkeeper/<version>/lib``: `make jars`), and bkspark's bookie.

    bkspark's bookie is built beside the Java images: its wheels while the base is made, its image while the JRE
    is installed (on two cores, one waits on the network or the disk while the other computes)."""
    builder = _Builder(docker_client(), repo)
    python_hash = builder.python_bookie_hash(builder.base_hash())
    python_needed = python_bookie and _label(builder.client, python_bookie_image()) != python_hash
    with tempfile.TemporaryDirectory(prefix="bkspark-py-image-") as tmp, ThreadPoolExecutor(2) as pool:
        context = Path(tmp)
        wheels = pool.submit(builder.python_wheels, context / "wheels") if python_needed else None
        base_hash = builder.base()
        python_image = None
        if wheels is not None:
            python_builder = _Builder(docker_client(), repo)  # a client of its own: docker-py's is not shared

            def python_image_after_wheels() -> None:
                try:
                    wheels.result()
                    python_builder.python_bookie(context, python_hash)
                finally:
                    python_builder.client.close()

            python_image = pool.submit(python_image_after_wheels)
        jre_hash = builder.image(JRE_IMAGE, repo / "docker" / "jre", base_hash)
        builder.jars_image(PROJECT_ZOOKEEPER, repo / "docker" / "zookeeper", builder.zookeeper_jars(cache),
                           jre_hash, f"Apache ZooKeeper {ZOOKEEPER_VERSION}")
        for version in versions:
            builder.jars_image(project_bookkeeper(version), repo / "docker" / "bookkeeper",
                               cache / "bookkeeper" / version / "lib", jre_hash,
                               f"Apache BookKeeper {version}: run `make jars BK_VERSIONS={version}`")
        if python_image is not None:
            python_image.result()
    builder.client.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bkspark.testing", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the project's images (cached by content hash)")
    b.add_argument("--repo", type=Path, default=Path.cwd(), help="the bkspark checkout (its docker/ directory)")
    b.add_argument("--cache", type=Path, default=None, help="the jar cache (default $BKSPARK_CACHE or REPO/.cache)")
    b.add_argument("--bookkeeper", nargs="*", default=[], metavar="VERSION", help="Apache BookKeeper versions")
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

