"""examples/user_project as its users would run it: its own pytest session, its own conftest.py naming
bkspark.testing.pytest_plugin, a Spark pipeline tested against the plugin's container cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bkspark.testing.pytest_plugin import REQUIRED_ENV, engine_or_skip

pytestmark = [pytest.mark.containers, pytest.mark.integration]

PROJECT = Path(__file__).resolve().parents[2] / "examples" / "user_project"


def test_a_user_project_tests_its_spark_pipeline_with_the_fixture() -> None:
    engine_or_skip()
    env = dict(os.environ, **{REQUIRED_ENV: "1"})
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=PROJECT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "1 passed" in proc.stdout, proc.stdout[-3000:]
