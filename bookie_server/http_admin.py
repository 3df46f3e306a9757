"""The bookie's small HTTP endpoint on ``httpServerPort`` (no web framework).

Routes, shaped like Apache BookKeeper's HTTP service:

* ``GET /heartbeat`` -> ``OK``;
* ``GET /metrics`` -> Prometheus text (prometheus_client's exposition);
* ``GET /api/v1/bookie/info`` -> ``{"freeSpace": .., "totalSpace": ..}``;
* ``GET /api/v1/bookie/state`` -> ``{"running", "readOnly", "shuttingDown", "availableForHighPriorityWrites"}``;
* ``PUT /api/v1/bookie/state/readonly`` with ``{"readOnly": true|false}`` -> admin read-only switch;
* ``PUT /api/v1/bookie/gc`` -> run one garbage-collection round now.

It runs on the bookie's event loop with ``asyncio.start_server``: one request
per connection, bodies capped at 64 KiB, errors answered with a status code.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["AdminHttpServer", "Route"]

log = logging.getLogger("bookie_server.http")

Route = Callable[[bytes], Awaitable[tuple[int, str, bytes]]]
_MAX_BODY = 64 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error"}


def json_body(value: Any) -> tuple[int, str, bytes]:
    """A 200 JSON answer."""
    return 200, "application/json", json.dumps(value).encode("utf-8")


class AdminHttpServer:
    """Dispatch ``(method, path)`` to coroutines returning ``(status, content type, body)``."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.routes: dict[tuple[str, str], Route] = {}
        self._server: asyncio.base_events.Server | None = None

    def route(self, method: str, path: str, handler: Route) -> None:
        """Register a handler."""
        self.routes[(method, path)] = handler

    async def start(self) -> None:
        """Listen (port 0 picks a free one)."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        status, ctype, body = 400, "text/plain", b"bad request\n"
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            lines = head.decode("latin-1").split("\r\n")
            method, target, _version = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    key, value = line.split(":", 1)
                    headers[key.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0") or 0)
            if length > _MAX_BODY:
                raise ValueError("body too large")
            payload = await asyncio.wait_for(reader.readexactly(length), 10) if length else b""
            path = target.split("?", 1)[0]
            handler = self.routes.get((method, path))
            if handler is None:
                known = any(p == path for _m, p in self.routes)
                status, ctype, body = (405 if known else 404), "text/plain", b"not found\n"
            else:
                status, ctype, body = await handler(payload)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ValueError):
            pass
        except Exception:
            log.exception("HTTP handler failed")
            status, ctype, body = 500, "text/plain", b"internal error\n"
        try:
            reason = _REASONS.get(status, "OK")
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode("latin-1")
                + body
            )
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
