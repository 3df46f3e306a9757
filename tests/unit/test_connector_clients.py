"""The per-worker client cache never holds a Python worker's exit on a client that cannot close."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def test_interpreter_exit_does_not_wait_for_a_stuck_client() -> None:
    script = textwrap.dedent(
        """
        import time
        import bkspark.datasource.clients as clients

        class StuckClient:
            def close(self):
                time.sleep(120)  # e.g. a ZooKeeper session whose server is gone

        clients._CLIENTS[("zk+hierarchical://127.0.0.1:1/ledgers", ())] = StuckClient()
        clients.EXIT_CLOSE_TIMEOUT = 0.5
        """
    )
    # A hang here would run into the timeout (far below the stuck close's 120 s) and fail the test.
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_eviction_follows_the_errors_flag() -> None:
    """A cached client goes after an error flagged ``invalidates_client``, and stays after any other."""
    import bkspark.datasource.clients as clients
    from bkspark.errors import BookieUnavailableError, DigestMismatchError, MetadataVersionError

    class Client:
        closed = False

        def close(self) -> None:
            self.closed = True

    uri, conf = "zk+hierarchical://127.0.0.1:1/ledgers", {"x": "1"}
    client = Client()
    clients._CLIENTS[clients._key(uri, conf)] = client
    try:
        clients.evict_if_stale(uri, conf, MetadataVersionError("lost a race"))
        clients.evict_if_stale(uri, conf, DigestMismatchError("bad copy"))
        clients.evict_if_stale(uri, conf, ValueError("not ours"))
        assert clients._CLIENTS.get(clients._key(uri, conf)) is client and not client.closed
        clients.evict_if_stale(uri, conf, BookieUnavailableError("gone"))
        assert clients._key(uri, conf) not in clients._CLIENTS and client.closed
    finally:
        clients._CLIENTS.pop(clients._key(uri, conf), None)


def test_clients_are_cached_per_connection_settings() -> None:
    """docs/connector.md, "Process model": one client per worker and connection settings, whatever their order;
    other settings are another client (here: a ZooKeeper nobody listens on, refused after its zkTimeout)."""
    import bkspark.datasource.clients as clients
    from bkspark.errors import MetadataError

    uri = "zk+hierarchical://127.0.0.1:1/ledgers"
    conf = {"zkTimeout": "0.3", "readEntryTimeoutSec": "7"}
    cached = object()
    clients._CLIENTS[clients._key(uri, conf)] = cached
    try:
        assert clients.get_client(uri, dict(reversed(conf.items()))) is cached
        with pytest.raises(MetadataError, match="BOOKKEEPER_ZOOKEEPER_UNREACHABLE"):
            clients.get_client(uri, {**conf, "readEntryTimeoutSec": "8"})
    finally:
        clients._CLIENTS.pop(clients._key(uri, conf), None)
