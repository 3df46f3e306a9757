"""README.md's Python examples, taken from the README itself and run against a real cluster, so they cannot rot.

Every fenced ```python block runs, in order, in one namespace (the README's blocks build on each other: the first
defines ``spark`` and ``uri``), with the README's example URI replaced by this test cluster's. The cluster holds
what the first example expects of "a cluster that already holds ledgers": closed ledgers written by a
BookKeeper client with CRC32C and the password ``secret``.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest

from bkspark.client import BookKeeper
from tests.harness.python_bookie import PythonBookieCluster
from tests.integration.test_connector_spark import spark  # noqa: F401 - the Spark fixture
from tests.integration.test_connector_standalone import py_cluster  # noqa: F401 - three Python bookies, own root

pytestmark = [pytest.mark.integration]

README = Path(__file__).resolve().parents[2] / "README.md"
#: The URI the README's examples use; replaced by the test cluster's.
README_URI = "zk+hierarchical://127.0.0.1:2181/ledgers"


#: Spark gives a streaming source's Python runner a fixed 10 s to connect back to the JVM (PythonWorkerFactory's
#: simple worker; no setting changes it): on a 2-core machine at a load average of 25 to 30 its start-up took
#: longer, and the query failed with this before reading anything. Only that failure runs the block again.
CONNECT_BACK_TIMEOUT = "Python worker failed to connect back"
CONNECT_BACK_ATTEMPTS = 3


def _all_python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)


def is_pulsar_block(block: str) -> bool:
    """The Pulsar example reads a topic: tests/integration/test_pulsar_read.py runs it against a real broker."""
    return '.option("topic"' in block


def python_blocks(text: str) -> list[str]:
    """The fenced ```python blocks of a Markdown text, in order, but the Pulsar example."""
    return [b for b in _all_python_blocks(text) if not is_pulsar_block(b)]


def pulsar_blocks(text: str) -> list[str]:
    return [b for b in _all_python_blocks(text) if is_pulsar_block(b)]


def test_the_readme_has_its_examples() -> None:
    assert len(pulsar_blocks(README.read_text())) == 1, "README.md: the Pulsar example"
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 4, "README.md: the three Spark examples and the client's"
    assert README_URI in blocks[0]
    assert "readStream" in blocks[1] and "dataset" in blocks[2] and "BookKeeper(" in blocks[3]


def test_the_readme_examples_run_against_a_cluster(py_cluster: PythonBookieCluster, spark: Any) -> None:  # noqa: F811
    uri = py_cluster.metadata_service_uri
    existing: dict[int, list[bytes]] = {}
    with BookKeeper(uri) as bk:  # the "existing cluster": ledgers some other BookKeeper client wrote
        for n in range(2):
            ledger = bk.create_ledger(ensemble_size=2, write_quorum_size=2, ack_quorum_size=2,
                                      digest_type="CRC32C", password=b"secret")
            payloads = [b"log %d.%d" % (n, i) for i in range(4)]
            for payload in payloads:
                ledger.append(payload)
            ledger.close()
            existing[ledger.ledger_id] = payloads
    assert all(0 <= lid <= 1000 for lid in existing), existing  # the README's range holds them

    namespace: dict[str, Any] = {"__name__": "readme"}
    printed = io.StringIO()
    for number, block in enumerate(python_blocks(README.read_text()), 1):
        code = compile(block.replace(README_URI, uri), f"README.md python block {number}", "exec")
        for attempt in range(1, CONNECT_BACK_ATTEMPTS + 1):
            try:
                with contextlib.redirect_stdout(printed):
                    exec(code, namespace)  # noqa: S102 - the README's own examples are what is under test
                break
            except Exception as exc:  # noqa: BLE001 - only Spark's connect-back timeout is tried again
                if CONNECT_BACK_TIMEOUT not in str(exc) or attempt == CONNECT_BACK_ATTEMPTS:
                    raise
        if number == 1:  # the ledgers the cluster held, every entry of them (before later blocks add ledgers)
            assert namespace["uri"] == uri
            rows = namespace["logs"].select("ledger_id", "entry_id", "payload").collect()
            assert {(r.ledger_id, r.entry_id): bytes(r.payload) for r in rows} == {
                (lid, i): payload for lid, payloads in existing.items() for i, payload in enumerate(payloads)
            }
        if number == 2:
            assert namespace["query"].exception() is None
            progress = namespace["query"].recentProgress
            assert sum(p["numInputRows"] for p in progress) == sum(len(p) for p in existing.values())

    lines = printed.getvalue().splitlines()
    assert "1000" in lines  # events.count() of the written dataset
    assert lines[-1] == "[b'hello 0', b'hello 1', b'hello 2']"  # the client example's read
