"""One home for the version (bkspark/__init__.py): the installed metadata, both console scripts and the changelog."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

import bkspark
from bkspark import cli
from bookie_server.__main__ import main as bookie_main

REPO = Path(__file__).resolve().parents[2]


def test_the_package_metadata_reads_the_version_from_bkspark() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", bkspark.__version__)
    assert importlib.metadata.version("bkspark") == bkspark.__version__
    assert 'dynamic = ["version"]' in (REPO / "pyproject.toml").read_text()


@pytest.mark.parametrize("program, main", [("bkspark", cli.main), ("bookie-server", bookie_main)])
def test_both_console_scripts_print_it(program: str, main: object, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["--version"])  # type: ignore[operator]
    except SystemExit as exc:  # bookie-server's argparse exits itself
        code = exc.code
    assert code == 0 and capsys.readouterr().out.strip() == f"{program} {bkspark.__version__}"


def test_the_changelog_has_the_version_and_no_release_is_claimed() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert f"## {bkspark.__version__} (unreleased)" in changelog
    readme = (REPO / "README.md").read_text()
    assert "pip install bkspark " not in readme and "pip install bkspark\n" not in readme
