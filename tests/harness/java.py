"""Java for the harness: :mod:`bkspark.devcluster.java`, plus where this checkout is."""

from pathlib import Path

from bkspark.devcluster.java import JVM_OPTS, java_executable

__all__ = ["JVM_OPTS", "java_executable", "repo_root"]


def repo_root() -> Path:
    """The bkspark checkout this harness belongs to."""
    return Path(__file__).resolve().parents[2]
