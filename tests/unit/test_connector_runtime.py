"""The connector's runtime pieces without Spark or servers: client settings, the ZooKeeper probe, the choice of
reader by planner, Arrow payloads, and the writer's commit/abort bookkeeping (on fakes)."""

from __future__ import annotations

import importlib.machinery
import pickle
import socket
import sys
import types

import pyarrow as pa
import pytest

from bkspark.client.conf import ClientConf
from bkspark.datasource.clients import _zk_hosts, check_zookeeper_reachable, client_conf
from bkspark.datasource.options import parse_write_options
from bkspark.datasource.reader import BookKeeperPushdownReader, BookKeeperReader
from bkspark.datasource.schema import spark_schema
from bkspark.datasource.source import PUSHDOWN_PLANNER_MODULE, BookKeeperDataSource
from bkspark.datasource.writer import NO_LEDGER, BookKeeperWriter, LedgerCommitMessage, _committed_ledgers, _payloads
from bkspark.errors import MetadataError
from tests.harness.deadline import GENEROUS, finishes_within

URI = "zk+hierarchical://127.0.0.1:2181/ledgers"


def test_lower_cased_client_options_reach_the_client_under_its_own_names() -> None:
    conf = client_conf(
        (("readentrytimeoutsec", "7"), ("usev2wireprotocol", "false"), ("minnumracksperwritequorum", "2")),
        batch_read_enabled=False,
    )
    assert conf == {"readEntryTimeoutSec": "7", "useV2WireProtocol": "false", "minnumracksperwritequorum": "2",
                    "batch_read_enabled": False}
    parsed = ClientConf.from_mapping(conf)
    assert (parsed.readEntryTimeoutSec, parsed.useV2WireProtocol, parsed.batchReadEnabled) == (7.0, False, False)
    assert parsed.extra == {"minnumracksperwritequorum": "2"}


def test_zookeeper_hosts_of_a_metadata_service_uri() -> None:
    assert _zk_hosts("zk+hierarchical://a:2181;b:2182,c/ledgers") == [("a", 2181), ("b", 2182), ("c", 2181)]
    assert _zk_hosts("zk://127.0.0.1:1/x") == [("127.0.0.1", 1)]


def test_the_zookeeper_probe_fails_fast_on_a_closed_port_and_passes_on_a_listening_one() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        port = listening.getsockname()[1]
        check_zookeeper_reachable(f"zk+hierarchical://127.0.0.1:{port}/ledgers")
    with pytest.raises(MetadataError, match=rf"\[BOOKKEEPER_ZOOKEEPER_UNREACHABLE\] cannot reach ZooKeeper at 127\.0\.0\.1:{port}"):
        check_zookeeper_reachable(f"zk+hierarchical://127.0.0.1:{port}/ledgers")


def _reader_in_process_started_as(module: str | None, monkeypatch: pytest.MonkeyPatch) -> object:
    """Call ``reader()`` in a process whose ``__main__`` was started as ``python -m module`` (as Spark's planners are)."""
    main = types.ModuleType("__main__")
    main.__spec__ = None if module is None else importlib.machinery.ModuleSpec(module, None)  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", main)
    source = BookKeeperDataSource({"metadataserviceuri": URI, "ledgers": "1"})
    return source.reader(spark_schema())


def test_reader_has_push_filters_only_in_the_pushdown_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    pushdown = _reader_in_process_started_as(PUSHDOWN_PLANNER_MODULE, monkeypatch)
    assert type(pushdown) is BookKeeperPushdownReader
    # Forked from Spark's daemon, which imports the planner module by name:
    monkeypatch.setitem(sys.modules, PUSHDOWN_PLANNER_MODULE, types.ModuleType(PUSHDOWN_PLANNER_MODULE))
    assert type(_reader_in_process_started_as("pyspark.daemon", monkeypatch)) is BookKeeperPushdownReader
    monkeypatch.delitem(sys.modules, PUSHDOWN_PLANNER_MODULE)
    from pyspark.sql.datasource import DataSourceReader

    for module in ("pyspark.sql.worker.plan_data_source_read", None):
        plain = _reader_in_process_started_as(module, monkeypatch)
        assert type(plain) is BookKeeperReader
        # What Spark checks before failing with DATA_SOURCE_PUSHDOWN_DISABLED:
        assert getattr(plain.pushFilters, "__func__", None) is DataSourceReader.pushFilters  # type: ignore[attr-defined]
        assert pickle.loads(pickle.dumps(plain)).options == plain.options  # type: ignore[attr-defined]


def test_the_pushdown_planner_module_is_the_one_pyspark_ships() -> None:
    """The module name the switch looks for exists in the PySpark installed, and runs as a planner."""
    import importlib.util

    spec = importlib.util.find_spec(PUSHDOWN_PLANNER_MODULE)
    assert spec is not None and spec.origin is not None
    with open(spec.origin, encoding="utf-8") as handle:
        assert 'if __name__ == "__main__":' in handle.read()


def test_arrow_payloads_strings_as_utf8_and_nulls_as_empty_entries() -> None:
    batch = pa.RecordBatch.from_arrays([pa.array(["é", None, "b"]), pa.array([1, 2, 3])], names=["payload", "n"])
    packed, size = _payloads(batch, 0, True)
    assert (list(packed), size) == (["é".encode(), b"", b"b"], 3)  # the entries and their bytes
    batch = pa.RecordBatch.from_arrays([pa.array([b"\x00", None], pa.binary())], names=["payload"])
    packed, size = _payloads(batch, 0, False)
    assert (list(packed), size) == ([b"\x00", b""], 1)


def test_commit_messages_pickle_and_name_only_the_ledgers_of_tasks_that_wrote() -> None:
    """What commit/abort act on (their protocol is tested against real servers in test_connector_commit.py)."""
    writer = BookKeeperWriter(parse_write_options({"metadataserviceuri": URI, "dataset": "d"}), 0, False, True)
    assert pickle.loads(pickle.dumps(writer)).job_id == writer.job_id  # no client on it: it ships to executors
    message = LedgerCommitMessage(0, 5, 10, 100, 0, 0)
    assert pickle.loads(pickle.dumps(message)) == message
    empty = LedgerCommitMessage(0, NO_LEDGER, 0, 0, 2, 0)
    assert _committed_ledgers([message, None, empty, LedgerCommitMessage(3, 7, 1, 1, 1, 1)]) == [(0, 5), (3, 7)]


def test_a_zookeeper_port_that_opens_no_session_is_unreachable_too() -> None:
    """docs/connector.md: BOOKKEEPER_ZOOKEEPER_UNREACHABLE also when the TCP probe passes but no session opens
    (here a socket that accepts and never answers), after the client's zkTimeout."""
    from bkspark.datasource.clients import get_client

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        uri = f"zk+hierarchical://127.0.0.1:{silent.getsockname()[1]}/ledgers"
        with pytest.raises(MetadataError, match=r"^\[BOOKKEEPER_ZOOKEEPER_UNREACHABLE\] cannot open a ZooKeeper session"):
            get_client(uri, {"zkTimeout": "1"})


def test_the_zookeeper_probe_gives_a_silent_server_5_seconds_then_tries_the_next() -> None:
    """docs/connector.md, "Process model": ZooKeeper is probed with a TCP connect, 5 s per server. A server whose
    accept queue is full drops the connect's SYNs (it hangs, as a host behind a firewall does): the probe waits 5 s
    for it and then reaches the second server of the URI (well before its budget, here 600 s, runs out)."""
    import time

    from bkspark.datasource.clients import wait_zookeeper_reachable

    with socket.socket() as full, socket.socket() as queued, socket.socket() as listening:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        queued.connect(full.getsockname())  # takes the one place in its accept queue
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        uri = f"zk+hierarchical://127.0.0.1:{full.getsockname()[1]},127.0.0.1:{listening.getsockname()[1]}/ledgers"
        started = time.monotonic()
        finishes_within(GENEROUS, lambda: wait_zookeeper_reachable(uri, budget=600.0))
        assert time.monotonic() - started >= 4.8  # it gave the silent server its 5 s


class _ScriptedReadHandle:
    """A read handle whose ``read_batches`` returns the given entry id runs (what a faulty read could give)."""

    last_add_confirmed = 3

    def __init__(self, *runs: range) -> None:
        self.runs = runs

    def read_batches(self, first: int, last: int, **options: object) -> object:
        for run in self.runs:
            yield pa.RecordBatch.from_arrays(
                [pa.array(list(run), pa.int64()), pa.array([b"e%d" % i for i in run], pa.binary())],
                names=["entry_id", "payload"])


@pytest.mark.parametrize("runs", [(range(0, 2), range(3, 5)), (range(0, 2),), (range(1, 5),)],
                         ids=["a-gap-of-the-right-length", "too-few", "shifted"])
def test_a_read_that_returns_other_than_the_slices_consecutive_entries_is_a_no_such_entry_error(
    runs: tuple[range, ...]
) -> None:
    """docs/connector.md, "Partitions": the entry ids of a batch are a numpy range, so a read that returns anything
    but the slice's consecutive entries must fail, not label an entry with another's id."""
    from bkspark.datasource.options import parse_read_options
    from bkspark.datasource.planning import split_ledger
    from bkspark.errors import NoSuchEntryError

    reader = BookKeeperReader(parse_read_options({"metadataserviceuri": URI, "ledgers": "7"}))
    (part,) = split_ledger(0, 7, 0, 3, 100)
    rows = [batch for batch in reader._read_slice(_ScriptedReadHandle(range(0, 2), range(2, 4)), part)]
    assert [i for b in rows for i in b.column("entry_id").to_pylist()] == [0, 1, 2, 3]
    with pytest.raises(NoSuchEntryError, match="ledger 7"):
        list(reader._read_slice(_ScriptedReadHandle(*runs), part))
