"""The committed Java vectors (tests/vectors/java-<version>.json) still equal what VectorGen prints today.

tests/unit/test_java_vectors.py checks bkspark.protocol against those files; this test checks that the files
were produced by the Java program and not edited by hand: it runs tools/java VectorGen on each version's real
jars and compares the whole document. Nothing in VectorGen's output depends on time, randomness or the
machine, so the comparison is exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.java_bookkeeper import BK_VERSIONS, JavaTools

pytestmark = [pytest.mark.integration, pytest.mark.compat]

VECTOR_DIR = Path(__file__).resolve().parents[1] / "vectors"
COMMITTED = {p.stem.removeprefix("java-"): p for p in sorted(VECTOR_DIR.glob("java-*.json"))}


def test_every_harness_version_has_committed_vectors() -> None:
    assert set(COMMITTED) == set(BK_VERSIONS)


@pytest.mark.parametrize("version", sorted(COMMITTED))
def test_vectorgen_output_equals_committed_file(version: str, java_tools: JavaTools, tmp_path: Path) -> None:
    out = tmp_path / f"java-{version}.json"
    proc = java_tools.run(version, "bkspark.tools.VectorGen", "--out", str(out), timeout=300)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    fresh = out.read_text(encoding="utf-8")
    committed = COMMITTED[version].read_text(encoding="utf-8")
    doc = json.loads(fresh)
    assert doc["bookkeeper_version"] == version
    if fresh != committed:
        old = json.loads(committed)
        changed = sorted(k for k in set(doc) | set(old) if doc.get(k) != old.get(k))
        pytest.fail(
            f"VectorGen on {version} no longer prints the committed tests/vectors/java-{version}.json "
            f"(sections that differ: {changed}); regenerate it (see tests/unit/test_java_vectors.py) and review"
        )
