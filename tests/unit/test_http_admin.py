"""The bookie's admin HTTP endpoint (aiohttp underneath): routes, status codes, limits, one request per connection."""

from __future__ import annotations

import asyncio

from bookie_server.http_admin import MAX_BODY, AdminHttpServer, json_body


async def _exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read until the server closes: (status, headers, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)  # returns only because the server closes the connection
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _request(method: str, path: str, body: bytes = b"") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def test_routes_statuses_and_limits() -> None:
    async def body() -> None:
        seen: list[bytes] = []

        async def echo(payload: bytes) -> tuple[int, str, bytes]:
            seen.append(payload)
            return json_body({"length": len(payload)})

        async def broken(payload: bytes) -> tuple[int, str, bytes]:
            raise RuntimeError("boom")

        async def text(payload: bytes) -> tuple[int, str, bytes]:
            return 200, "text/plain; charset=utf-8", b"OK\n"

        server = AdminHttpServer("127.0.0.1", 0)
        server.route("PUT", "/echo", echo)
        server.route("GET", "/broken", broken)
        server.route("GET", "/heartbeat", text)
        await server.start()
        try:
            assert server.port != 0
            status, headers, payload = await _exchange(server.port, _request("PUT", "/echo?x=1", b'{"a":1}'))
            assert (status, payload, seen) == (200, b'{"length": 7}', [b'{"a":1}'])
            assert headers["content-type"].startswith("application/json") and headers["connection"] == "close"
            status, headers, payload = await _exchange(server.port, _request("GET", "/heartbeat"))
            assert (status, payload) == (200, b"OK\n") and headers["content-type"] == "text/plain; charset=utf-8"
            assert (await _exchange(server.port, _request("GET", "/nowhere")))[0] == 404
            assert (await _exchange(server.port, _request("GET", "/echo")))[0] == 405
            status, headers, _ = await _exchange(server.port, _request("GET", "/broken"))
            assert status == 500 and headers["connection"] == "close"
            assert (await _exchange(server.port, _request("PUT", "/echo", b"x" * (MAX_BODY + 1))))[0] == 413
            assert len(seen) == 1  # the oversized body never reached the handler
            assert (await _exchange(server.port, b"NOT HTTP AT ALL\r\n\r\n"))[0] == 400
        finally:
            await server.stop()

    asyncio.run(body())
