"""Shell commands that create and delete ledgers, failing between their steps, against real ZooKeeper and bookies.

A bookie killed with SIGKILL stays registered until its ZooKeeper session expires (``zkTimeout``): a client
still places ledgers on it, and its first write to it fails. That makes "created, then failed" certain.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bkspark import cli
from bkspark.metadata.store import ZkMetadataStore
from tests.harness.python_bookie import PythonBookieCluster

pytestmark = pytest.mark.integration

#: The dead bookie's registration outlives the test's steps by far.
BOOKIE_SESSION_MS = 60_000


def test_simpletest_that_fails_after_creating_its_ledger_deletes_it(
    zk_root: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``simpletest`` creates a ledger, writes, reads and deletes it; a write that fails must not leave the ledger
    behind (nothing names it, and no context says when it may go: the audit could never report it)."""
    uri = zk_root.metadata_service_uri
    with PythonBookieCluster(uri, tmp_path, bookies=1, conf_overrides={"zkTimeout": BOOKIE_SESSION_MS}) as cluster:
        cluster.start_all()
        cluster.kill(0)
        assert cluster.registered() == cluster.bookie_ids
        capsys.readouterr()
        started = time.monotonic()
        code = cli.main(["shell", "--metadata-service-uri", uri, "simpletest", "-e", "1", "-w", "1", "-a", "1", "-n", "10"])
        out, err = capsys.readouterr()
        assert time.monotonic() - started < BOOKIE_SESSION_MS / 1000 / 2, "the bookie's registration expired meanwhile"
        assert code == 1 and out.startswith("Ledger ID: "), (out, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        with ZkMetadataStore(uri) as store:
            assert list(store.list_ledgers(0)) == []
