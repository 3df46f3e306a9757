"""The bookie process without ZooKeeper: HTTP admin, local cookies, disk threshold, CLI, logs."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
from pathlib import Path

import pytest

from bkspark.errors import CookieMismatchError
from bookie_server.__main__ import JsonFormatter, main
from bookie_server import app as app_module
from bookie_server.app import BookieApp
from bkspark.config.bookie import BookieConfig, load_conf
from tests.harness.inprocess_bookie import bookie_conf


def conf_for(tmp_path: Path, **extra: object) -> BookieConfig:
    return bookie_conf(
        tmp_path,
        **{
            "advertisedAddress": "127.0.0.1",
            "httpServerEnabled": "true",
            "httpServerHost": "127.0.0.1",
            "httpServerPort": 0,
            **extra,
        },
    )


async def http(port: int, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    data = await reader.read()
    writer.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), payload


def test_http_admin_and_readonly_switch(tmp_path: Path) -> None:
    async def body() -> None:
        app = BookieApp(conf_for(tmp_path))
        await app.start()
        try:
            assert app.http is not None
            port = app.http.port
            assert await http(port, "GET", "/heartbeat") == (200, b"OK\n")
            status, payload = await http(port, "GET", "/api/v1/bookie/state")
            assert status == 200 and json.loads(payload)["readOnly"] is False
            status, payload = await http(port, "GET", "/api/v1/bookie/info")
            assert json.loads(payload)["totalSpace"] > 0
            status, payload = await http(port, "GET", "/api/v1/bookie/state/readonly")
            assert (status, json.loads(payload)) == (200, {"readOnly": False})
            status, payload = await http(port, "PUT", "/api/v1/bookie/state/readonly", b'{"readOnly": true}')
            assert (status, json.loads(payload)) == (200, {"readOnly": True})
            assert app.bookie.readonly
            status, payload = await http(port, "GET", "/api/v1/bookie/state/readonly")
            assert (status, json.loads(payload)) == (200, {"readOnly": True})
            assert (await http(port, "PUT", "/api/v1/bookie/state/readonly", b"nonsense"))[0] == 400
            assert (await http(port, "GET", "/nowhere"))[0] == 404
            assert (await http(port, "DELETE", "/heartbeat"))[0] == 405
            assert (await http(port, "PUT", "/api/v1/bookie/gc"))[0] == 400  # no metadata service
            status, payload = await http(port, "GET", "/metrics")
            assert b"bookie_SERVER_STATUS 0.0" in payload
            assert b'bookkeeper_server_BATCH_READ_ENTRY_REQUEST_bucket{le="5.0",success="true"}' in payload
            # Garbage on the HTTP port is answered 400, the server lives on.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"\x00\x01garbage\r\n\r\n")
            assert b" 400 " in await reader.read()
            writer.close()
            assert await http(port, "GET", "/heartbeat") == (200, b"OK\n")
        finally:
            await app.stop()

    asyncio.run(body())


def test_local_cookie_mismatch_refuses_to_start(tmp_path: Path) -> None:
    async def start_stop(conf: BookieConfig) -> None:
        app = BookieApp(conf)
        try:
            await app.start()
        finally:
            await app.stop()

    asyncio.run(start_stop(conf_for(tmp_path, bookieId="local-1")))
    assert (tmp_path / "l" / "current" / "VERSION").read_text().startswith("5\n")
    with pytest.raises(CookieMismatchError, match="bookieHost"):
        asyncio.run(start_stop(conf_for(tmp_path, bookieId="local-2")))
    with pytest.raises(CookieMismatchError, match="journalDir"):
        asyncio.run(start_stop(conf_for(tmp_path, bookieId="local-1", journalDirectories=str(tmp_path / "j2"))))
    asyncio.run(start_stop(conf_for(tmp_path, bookieId="local-1")))  # unchanged config: fine


def test_disk_threshold_enters_and_leaves_readonly(tmp_path: Path) -> None:
    async def body() -> None:
        app = BookieApp(conf_for(tmp_path, diskUsageThreshold=0.9, diskUsageLwmThreshold=0.8))
        await app.start()
        try:
            changes: list[bool] = []
            app.bookie.on_state_change = changes.append
            usage = {"value": (1000, 50)}  # 95 % used
            app.bookie.storage.disk_usage = lambda: usage["value"]  # type: ignore[method-assign]
            app.bookie.check_disks()
            assert app.bookie.readonly and changes == [True]
            usage["value"] = (1000, 150)  # 85 %: between the marks, stays read-only
            app.bookie.check_disks()
            assert app.bookie.readonly
            usage["value"] = (1000, 300)  # 70 %
            app.bookie.check_disks()
            assert not app.bookie.readonly and changes == [True, False]
        finally:
            await app.stop()

    asyncio.run(body())


def test_a_full_disk_refuses_recovery_adds_too_and_an_admin_switch_does_not(tmp_path: Path) -> None:
    """docs/bookie.md, "Protocol coverage": high-priority (recovery) adds are still taken when the bookie is read-only
    by its admin, not when the disk is full, and ``availableForHighPriorityWrites`` says which (Java's
    ``BookieStateManager``)."""
    from bkspark.protocol import v3
    from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
    from tests.unit.test_bookie_server import KEY, Conn, make_entry

    recovery = v3.FLAG_HIGH_PRIORITY | v3.FLAG_RECOVERY_ADD

    async def body() -> None:
        app = BookieApp(conf_for(tmp_path / "a", diskUsageThreshold=0.9, diskUsageLwmThreshold=0.8))
        await app.start()
        try:
            assert app.http is not None and app.server is not None
            app.bookie.storage.disk_usage = lambda: (1000, 50)  # type: ignore[method-assign]  # 95 % used
            app.bookie.check_disks()
            state = json.loads((await http(app.http.port, "GET", "/api/v1/bookie/state"))[1])
            assert (state["readOnly"], state["availableForHighPriorityWrites"]) == (True, False)
            c = await Conn.open(app.server.port)
            resp = await c.v3(v3.add_request(1, 1, 0, KEY, make_entry(1, 0, b"r"), recovery))
            assert v3.response_status(resp) == pb.EREADONLY
            assert v3.response_status(await c.v3(v3.add_request(2, 1, 0, KEY, make_entry(1, 0, b"p")))) == pb.EREADONLY
            # The admin's switch on top changes nothing: the disk is still full.
            app.bookie.set_readonly(True)
            resp = await c.v3(v3.add_request(3, 1, 0, KEY, make_entry(1, 0, b"r"), recovery))
            assert v3.response_status(resp) == pb.EREADONLY
            # Room again (under the low mark): read-only by the admin alone, recovery adds taken, plain ones not.
            app.bookie.storage.disk_usage = lambda: (1000, 500)  # type: ignore[method-assign]
            app.bookie.check_disks()
            state = json.loads((await http(app.http.port, "GET", "/api/v1/bookie/state"))[1])
            assert (state["readOnly"], state["availableForHighPriorityWrites"]) == (True, True)
            resp = await c.v3(v3.add_request(4, 1, 0, KEY, make_entry(1, 0, b"r"), recovery))
            assert v3.response_status(resp) == pb.EOK
            assert v3.response_status(await c.v3(v3.add_request(5, 1, 1, KEY, make_entry(1, 1, b"p")))) == pb.EREADONLY
            c.close()
        finally:
            await app.stop()

    asyncio.run(body())


def test_with_read_only_mode_disabled_a_fault_stops_the_bookie_as_javas_does(tmp_path: Path) -> None:
    """docs/bookie.md, configuration table, "read-only switches": with ``readOnlyModeEnabled=false`` a full disk
    does not turn the bookie read-only and leave it serving: it asks to stop with Apache BookKeeper's exit status
    (``ExitCode.BOOKIE_EXCEPTION``, 5), adds get EREADONLY meanwhile, and its state stays "writable" for the
    registration (it is removed by the stop, not moved). Full at the start, it does not start. The admin's switch
    cannot turn it read-only (HTTP 400, Java's words), nor a forced read-only bookie writable;
    ``forceReadOnlyBookie=true`` with ``readOnlyModeEnabled=false`` is refused as a configuration."""
    from bkspark.errors import BookieIOError, InvalidOptionError
    from bkspark.protocol import v3
    from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
    from bookie_server.app import EXIT_READ_ONLY_MODE_DISABLED
    from tests.unit.test_bookie_server import KEY, Conn, make_entry

    async def body() -> None:
        app = BookieApp(conf_for(tmp_path / "b", diskUsageThreshold=0.9, readOnlyModeEnabled="false"))
        await app.start()
        changes: list[bool] = []
        try:
            assert app.server is not None and app.http is not None
            status, payload = await http(app.http.port, "PUT", "/api/v1/bookie/state/readonly", b'{"readOnly": true}')
            assert (status, payload) == (400, b"Bookie is disabled ReadOnly mode, cannot transit to readOnly mode\n")
            assert not app.bookie.readonly and not app.stop_requested.is_set()
            app.bookie.on_state_change = changes.append
            app.bookie.storage.disk_usage = lambda: (1000, 10)  # type: ignore[method-assign]  # 99 % used
            app.bookie.check_disks()
            assert app.stop_requested.is_set() and app.exit_status == EXIT_READ_ONLY_MODE_DISABLED == 5
            assert changes == []  # no move to available/readonly: the stop unregisters
            c = await Conn.open(app.server.port)
            assert v3.response_status(await c.v3(v3.add_request(1, 1, 0, KEY, make_entry(1, 0, b"p")))) == pb.EREADONLY
            c.close()
        finally:
            await app.stop()

        full = BookieApp(conf_for(tmp_path / "c", diskUsageThreshold=0.9, readOnlyModeEnabled="false"))
        full.bookie.storage.disk_usage = lambda: (1000, 10)  # type: ignore[method-assign]
        with pytest.raises(BookieIOError, match="readOnlyModeEnabled=false: not starting"):
            await full.start()
        await full.stop()

        forced = BookieApp(conf_for(tmp_path / "d", forceReadOnlyBookie="true"))
        await forced.start()
        try:
            assert forced.http is not None and forced.bookie.readonly
            status, payload = await http(forced.http.port, "PUT", "/api/v1/bookie/state/readonly", b'{"readOnly": false}')
            assert (status, payload) == (400, b"Bookie is in forceReadOnly mode, cannot transit to writable mode\n")
            assert forced.bookie.readonly
        finally:
            await forced.stop()

    asyncio.run(body())
    with pytest.raises(InvalidOptionError, match="forceReadOnlyBookie=true needs readOnlyModeEnabled=true"):
        conf_for(tmp_path / "e", forceReadOnlyBookie="true", readOnlyModeEnabled="false")


def test_a_java_bookies_conf_file_works_as_is(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """docs/bookie.md: the conf file uses ``bk_server.conf``'s key names, keys this bookie does not use are accepted
    (logged, never an error), so a Java bookie's file works as is: the one the tests' Java bookies run with
    (tests/harness/java_bookkeeper.py) starts a Python bookie, whose settings are the file's."""
    from tests.harness.java_bookkeeper import bookie_conf as java_bookie_conf, write_properties

    values = java_bookie_conf(
        port=0, metadata_service_uri="", journal_dir=tmp_path / "j", ledger_dir=tmp_path / "l", journal_sync_data=False
    )
    values.pop("metadataServiceUri")  # no ZooKeeper in a unit test
    values.update(bindAddress="127.0.0.1", bookieId="java-file-bookie")
    # Keys of Apache BookKeeper's shipped bk_server.conf that bkspark does not know at all.
    values.update(compactionRateByEntries=1000, majorCompactionMaxTimeMillis=0, prometheusStatsHttpPort=8000)
    path = write_properties(tmp_path / "bk_server.conf", values)
    conf = load_conf(path)
    assert (conf.dbStorage_writeCacheMaxSizeMb, conf.logSizeLimit, conf.diskUsageThreshold) == (16, 64 << 20, 0.99)
    assert (conf.numReadWorkerThreads, conf.flushInterval, conf.allowLoopback) == (2, 1000, True)
    assert {"ledgerStorageClass", "journalPreAllocSizeMB", "dbStorage_rocksDB_blockSize"} <= set(conf.extra)

    async def body() -> None:
        app = BookieApp(conf)
        await app.start()
        try:
            assert app.server is not None and app.server.port > 0 and not app.bookie.readonly
        finally:
            await app.stop()

    with caplog.at_level(logging.INFO, logger="bkspark"):
        asyncio.run(body())
    assert "ledgerStorageClass" in caplog.text  # told, not refused
    assert "unknown bookie configuration key 'compactionRateByEntries' is ignored" in caplog.text


def test_the_disks_are_checked_every_disk_check_interval(tmp_path: Path) -> None:
    """docs/bookie.md, configuration table: the disk-full read-only mode is checked every ``diskCheckInterval`` ms
    by the running bookie, without anything asking (the test above calls ``check_disks`` itself)."""

    async def body() -> None:
        app = BookieApp(conf_for(tmp_path, diskUsageThreshold=0.9, diskUsageLwmThreshold=0.8, diskCheckInterval=100))
        await app.start()
        try:
            assert not app.bookie.readonly
            app.bookie.storage.disk_usage = lambda: (1000, 20)  # type: ignore[method-assign]  # 98 % used
            for _ in range(40):
                if app.bookie.readonly:
                    break
                await asyncio.sleep(0.05)
            assert app.bookie.readonly
            app.bookie.storage.disk_usage = lambda: (1000, 500)  # type: ignore[method-assign]
            for _ in range(40):
                if not app.bookie.readonly:
                    break
                await asyncio.sleep(0.05)
            assert not app.bookie.readonly
        finally:
            await app.stop()

    asyncio.run(body())


def test_cli_rejects_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-D", "noequals"]) == 2
    assert main(["--conf", str(tmp_path / "missing.conf")]) == 2
    bad = tmp_path / "bad.conf"
    bad.write_text("bookiePort=notaport\n")
    assert main(["--conf", str(bad)]) == 2
    assert "bookiePort" in capsys.readouterr().err


def test_json_log_lines() -> None:
    record = logging.LogRecord("bookie_server.x", logging.INFO, __file__, 1, "hello %s", ("world",), None)
    record.port = 3181
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "hello world" and line["port"] == 3181 and line["level"] == "INFO"


def test_client_connections_have_nagle_off(tmp_path: Path) -> None:
    """As Java bookies (serverTcpNoDelay): a small response never waits for the client's delayed ACK."""
    import socket

    async def body() -> None:
        app = BookieApp(conf_for(tmp_path, httpServerEnabled="false"))
        await app.start()
        try:
            assert app.server is not None
            reader, writer = await asyncio.open_connection("127.0.0.1", app.conf.bookiePort)
            try:
                for _ in range(100):
                    if app.server.connections:
                        break
                    await asyncio.sleep(0.01)
                (conn,) = app.server.connections
                sock = conn.transport.get_extra_info("socket")
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            finally:
                writer.close()
        finally:
            await app.stop()

    asyncio.run(body())


def test_a_running_bookie_process_tunes_the_garbage_collector(tmp_path: Path) -> None:
    """run() (what `python -m bookie_server` runs) freezes what start-up made and raises the first threshold, once
    the bookie serves (docs/bookie.md, "Python's garbage collector"); a SIGTERM still stops it with status 0."""
    before = gc.get_threshold()

    async def main() -> int:
        task = asyncio.create_task(app_module.run(conf_for(tmp_path)))
        for _ in range(500):
            if gc.get_threshold() == app_module.GC_THRESHOLDS or task.done():
                break
            await asyncio.sleep(0.01)
        assert gc.get_threshold() == app_module.GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
        os.kill(os.getpid(), signal.SIGTERM)
        return await asyncio.wait_for(task, 30)

    try:
        assert asyncio.run(main()) == 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_an_embedded_bookie_leaves_its_processs_garbage_collector_alone(tmp_path: Path) -> None:
    """docs/bookie.md, "Python's garbage collector": only ``run()`` tunes the collector; a bookie started inside
    another process (``BookieApp``, the tests' in-process bookies) changes neither its thresholds nor its frozen set."""
    before = (gc.get_threshold(), gc.get_freeze_count())

    async def main() -> None:
        app = BookieApp(conf_for(tmp_path))
        await app.start()
        try:
            assert (gc.get_threshold(), gc.get_freeze_count()) == before
        finally:
            await app.stop()

    asyncio.run(main())
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
