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
from bkspark.datasource.writer import NO_LEDGER, BookKeeperWriter, LedgerCommitMessage, _payloads
from bkspark.errors import MetadataError

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
    assert _payloads(batch, 0, True) == ["é".encode(), b"", b"b"]
    batch = pa.RecordBatch.from_arrays([pa.array([b"\x00", None], pa.binary())], names=["payload"])
    assert _payloads(batch, 0, False) == [b"\x00", b""]


class _FakeRegistry:
    def __init__(self, registered: list[tuple[int, int]], previous: list[tuple[int, int]]) -> None:
        self.registered = registered
        self.previous = previous
        self.committed: list[tuple[int, int]] | None = None
        self.forgotten: list[str] = []

    def commit(self, name: str, ledgers, *, replace: bool):  # type: ignore[no-untyped-def]
        self.committed = list(ledgers)
        return None, (list(self.previous) if replace else [])

    def job_ledgers(self, job_id: str) -> list[tuple[int, int]]:
        return list(self.registered)

    def forget_job(self, job_id: str) -> None:
        self.forgotten.append(job_id)


class _FakeClient:
    def __init__(self) -> None:
        self.deleted: list[tuple[int, int]] = []

    def delete_ledger(self, ledger_id: int, scope_id: int = 0) -> None:
        self.deleted.append((scope_id, ledger_id))


def _writer(overwrite: bool, registry: _FakeRegistry, client: _FakeClient) -> BookKeeperWriter:
    writer = BookKeeperWriter(parse_write_options({"metadataserviceuri": URI, "dataset": "d"}), 0, False, overwrite)
    assert pickle.loads(pickle.dumps(writer)).job_id == writer.job_id  # no client on it: it ships to executors
    writer._client = lambda: client  # type: ignore[method-assign]
    writer._registry = lambda bk: registry  # type: ignore[method-assign]
    return writer


def _message(ledger_id: int, partition: int, attempt: int = 0) -> LedgerCommitMessage:
    return LedgerCommitMessage(0, ledger_id, 10, 100, partition, attempt)


def test_commit_keeps_committed_ledgers_and_deletes_other_attempts_and_replaced_ones() -> None:
    registry = _FakeRegistry(registered=[(0, 5), (0, 6), (0, 7)], previous=[(0, 1), (0, 2)])
    client = _FakeClient()
    writer = _writer(True, registry, client)
    # Partition 1's first attempt (ledger 6) failed; partition 2 was empty; one task was killed (None).
    writer.commit([_message(5, 0), _message(7, 1, attempt=1), _message(NO_LEDGER, 2), None])
    assert registry.committed == [(0, 5), (0, 7)]
    assert client.deleted == [(0, 6), (0, 1), (0, 2)]
    assert registry.forgotten == [writer.job_id]


def test_abort_deletes_every_ledger_of_the_job() -> None:
    registry = _FakeRegistry(registered=[(0, 5), (0, 6)], previous=[(0, 1)])
    client = _FakeClient()
    writer = _writer(False, registry, client)
    writer.abort([_message(5, 0), None, _message(NO_LEDGER, 2)])
    assert registry.committed is None
    assert client.deleted == [(0, 5), (0, 6)]
    assert registry.forgotten == [writer.job_id]
    assert pickle.loads(pickle.dumps(_message(5, 0))) == _message(5, 0)
