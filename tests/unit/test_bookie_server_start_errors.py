"""``bookie-server`` that cannot start: one plain line on stderr and exit status 1, never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bkspark.protocol.cookie import Cookie
from bookie_server.registration import write_dir_cookie


def _bookie_server(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable, "-m", "bookie_server",
        "--journalDirectories", str(tmp_path / "j"), "--ledgerDirectories", str(tmp_path / "l"),
        "--advertisedAddress", "127.0.0.1", "-D", "bindAddress=127.0.0.1", "-D", "journalSyncData=false",
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input="")


def _assert_one_plain_error_line(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("bookie-server: error: cannot start: "), result.stderr
    for fragment in fragments:
        assert fragment in last, last
    assert "Traceback" not in result.stderr and '"exc"' not in result.stderr


def test_a_cookie_mismatch_is_one_line(tmp_path: Path) -> None:
    # The directories carry the cookie of another bookie (bookie-a), as if it had run there.
    cookie = Cookie.generate("bookie-a", [str(tmp_path / "j")], [str(tmp_path / "l")])
    for directory in (tmp_path / "j", tmp_path / "l"):
        write_dir_cookie(directory, cookie)
    result = _bookie_server(tmp_path, "--bookieId", "bookie-b", "--bookiePort", "0")
    _assert_one_plain_error_line(result, "bookie-b")


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = _bookie_server(tmp_path, "--bookiePort", str(port))
    _assert_one_plain_error_line(result, "OSError", "in use")


def test_an_unreachable_zookeeper_is_one_line_and_debug_adds_the_traceback(tmp_path: Path) -> None:
    """docs/bookie.md, "Operations", Logs: ZooKeeper unreachable is one plain line naming the metadata service, exit
    status 1; ``--log-level DEBUG`` adds the traceback (as a JSON log record), still ending with that one line (the
    other tests here show that without DEBUG there is no traceback).  The start waits ``zkTimeout`` (2 s here) for
    ZooKeeper, as Apache BookKeeper's bookie does."""
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    uri = f"zk+hierarchical://127.0.0.1:{port}/ledgers"
    # A deadline below the fixed 30 s it must not wait, generous for a 2 s zkTimeout and a loaded machine's start.
    result = _bookie_server(
        tmp_path, "--bookiePort", "0", "--metadataServiceUri", uri, "--log-level", "DEBUG", "-D", "zkTimeout=2000",
        timeout=25,
    )
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("bookie-server: error: cannot start: ") and f"ZooKeeper of {uri}" in last, last
    records = [line for line in result.stderr.splitlines() if '"bookie failed to start"' in line]
    assert len(records) == 1 and "Traceback" in records[0] and '"exc"' in records[0], result.stderr[-2000:]


def test_a_misspelled_security_key_stops_the_bookie_in_one_line(tmp_path: Path) -> None:
    """docs/security.md, "Nothing silently ignored": a key one edit from a security key is not run without --
    the bookie does not start in plain text; the line names the key it probably meant."""
    result = _bookie_server(
        tmp_path, "--bookiePort", "0", "-D", "tlsProviderFactoryClas=org.apache.bookkeeper.tls.TLSContextFactory"
    )
    _assert_one_plain_error_line(result, "'tlsProviderFactoryClas'", "'tlsProviderFactoryClass'")
    assert not (tmp_path / "j").exists() or not any((tmp_path / "j").rglob("*"))  # nothing written before the check
