"""bkspark.testing.images: which images a cluster runs (the one option and its auto rule) and the registry probe,
with a fake engine and loopback sockets: these run without a container engine."""

from __future__ import annotations

import socket

import docker.errors
import pytest

from bkspark.devcluster.ports import free_port
from bkspark.errors import LocalClusterError
from bkspark.testing import images


class FakeImages:
    def __init__(self, present: set[str]) -> None:
        self.present = present

    def get(self, name: str) -> object:
        if name not in self.present:
            raise docker.errors.ImageNotFound(name)
        return object()


class FakeEngine:
    def __init__(self, *present: str) -> None:
        self.images = FakeImages(set(present))


OFFICIAL = {"zookeeper:3.9", "apache/bookkeeper:4.17.3"}
PROJECT = {"bkspark/zookeeper:3.9.3", "bkspark/bookkeeper:4.17.3"}


def test_the_option_names_the_source_and_auto_prefers_images_the_engine_has(monkeypatch) -> None:
    monkeypatch.setattr(images, "registry_reachable", lambda *a, **k: pytest.fail("probed a registry"))
    monkeypatch.delenv(images.IMAGES_ENV, raising=False)
    assert images.resolve("4.17.3", "official", FakeEngine()).bookkeeper == "apache/bookkeeper:4.17.3"
    assert images.resolve("4.17.3", "project", FakeEngine()).zookeeper == "bkspark/zookeeper:3.9.3"
    assert images.resolve("4.17.3", None, FakeEngine(*OFFICIAL, *PROJECT)).source == images.OFFICIAL
    assert images.resolve("4.17.3", None, FakeEngine(*PROJECT)).source == images.PROJECT
    monkeypatch.setenv(images.IMAGES_ENV, "project")
    assert images.resolve("4.17.3", None, FakeEngine(*OFFICIAL)).source == images.PROJECT
    with pytest.raises(ValueError, match="expected one of auto, official, project"):
        images.resolve("4.17.3", "dockerhub", FakeEngine())


def test_auto_without_local_images_asks_the_registry_once_and_says_what_to_build(monkeypatch) -> None:
    monkeypatch.delenv(images.IMAGES_ENV, raising=False)
    monkeypatch.setattr(images, "registry_reachable", lambda *a, **k: True)
    assert images.resolve("4.17.3", "auto", FakeEngine()).source == images.OFFICIAL
    monkeypatch.setattr(images, "registry_reachable", lambda *a, **k: False)
    with pytest.raises(LocalClusterError, match=r"make containers CONTAINER_BK_VERSIONS=4\.16\.6"):
        images.resolve("4.16.6", "auto", FakeEngine(*PROJECT))  # built for another version only


def test_the_registry_probe_answers_from_a_listening_or_a_closed_loopback_port() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert images.registry_reachable(f"127.0.0.1:{server.getsockname()[1]}", timeout=5.0)
    assert not images.registry_reachable(f"127.0.0.1:{free_port()}", timeout=5.0)
