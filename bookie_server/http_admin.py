"""The bookie's small HTTP endpoint on ``httpServerPort``, served by aiohttp.

Routes, shaped like Apache BookKeeper's HTTP service:

* ``GET /heartbeat`` -> ``OK``;
* ``GET /metrics`` -> Prometheus text (prometheus_client's exposition);
* ``GET /api/v1/bookie/info`` -> ``{"freeSpace": .., "totalSpace": ..}``;
* ``GET /api/v1/bookie/state`` -> ``{"running", "readOnly", "shuttingDown", "availableForHighPriorityWrites"}``;
* ``PUT /api/v1/bookie/state/readonly`` with ``{"readOnly": true|false}`` -> admin read-only switch;
* ``PUT /api/v1/bookie/gc`` (optional ``{"forceMajor": .., "forceMinor": ..}``) -> run one garbage-collection
  round now, with a compaction when forced or due.

The state-changing routes (every route but a GET) need ``Authorization: Bearer <token>`` when a token is set
(``httpAdminTokenPath``), and, on a bookie with any authentication configured (``token_required``: SASL, TLS
client certificates or ZooKeeper auth, :func:`bookie_server.security.authentication_configured`), always: there,
without a token set they are refused with 401, so an admin port left open cannot turn a secured bookie read-only
(docs/security.md).

HTTP/1.1 parsing is aiohttp's (a well-kept server: this port is a security
surface), on the bookie's own event loop.  What stays ours is the small
contract the bookie registers its routes against: a handler takes the request
body and returns ``(status, content type, body)``.  One request per connection
(every answer says ``Connection: close``), bodies capped at 64 KiB (413
beyond), 404 for an unknown path, 405 for a known path with another method,
500 when a handler fails (logged).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

__all__ = ["AdminHttpServer", "Route", "json_body", "MAX_BODY"]

log = logging.getLogger("bookie_server.http")

Route = Callable[[bytes], Awaitable[tuple[int, str, bytes]]]
#: The largest request body accepted (the admin API takes small JSON documents).
MAX_BODY = 64 * 1024


def json_body(value: Any) -> tuple[int, str, bytes]:
    """A 200 JSON answer."""
    return 200, "application/json", json.dumps(value).encode("utf-8")


class AdminHttpServer:
    """Dispatch ``(method, path)`` to coroutines returning ``(status, content type, body)``.

    Runs on the event loop that calls :meth:`start` (the bookie's).
    """

    def __init__(
        self, host: str, port: int, write_token: bytes | None = None, *, token_required: bool = False
    ) -> None:
        self.host = host
        self.port = port
        self.routes: dict[tuple[str, str], Route] = {}
        #: Routes that change the bookie's state (every method but GET, and those registered as such): with a
        #: token, or with ``token_required``, they need ``Authorization: Bearer <token>``.
        self.state_changing: set[tuple[str, str]] = set()
        self._write_token = write_token
        #: The bookie has authentication configured: state-changing routes are never open (401 without a token set).
        self.token_required = token_required
        self._runner: web.AppRunner | None = None

    def route(self, method: str, path: str, handler: Route, *, state_changing: bool = False) -> None:
        """Register a handler (before :meth:`start`); any method but GET changes state whatever ``state_changing``
        says."""
        self.routes[(method, path)] = handler
        if state_changing or method != "GET":
            self.state_changing.add((method, path))

    async def start(self) -> None:
        """Listen (port 0 picks a free one)."""
        if self.token_required and self._write_token is None and self.state_changing:
            log.warning(
                "authentication is configured for this bookie and httpAdminTokenPath is not set: the admin HTTP "
                "server refuses its state-changing routes (401)"
            )
        app = web.Application(client_max_size=MAX_BODY, middlewares=[_close_after_answer])
        for (method, path), handler in self.routes.items():
            if (method, path) not in self.state_changing:
                app.router.add_route(method, path, _adapt(handler))
            elif self._write_token is None and self.token_required:
                app.router.add_route(method, path, _refuse_without_token)
            else:
                app.router.add_route(method, path, _adapt(handler, self._write_token))
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        await site.start()
        self._runner = runner
        self.port = runner.addresses[0][1]  # the port bound (port 0 asked for any)

    async def stop(self) -> None:
        """Stop listening and close open connections."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def _adapt(handler: Route, token: bytes | None = None) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An aiohttp handler around one of ours: body in, ``(status, type, body)`` out; with ``token``, a request
    without ``Authorization: Bearer <token>`` gets 401 (docs/security.md)."""

    async def serve(request: web.Request) -> web.StreamResponse:
        if token is not None:
            given = request.headers.get("Authorization", "").encode("utf-8", "replace")
            if not hmac.compare_digest(given, b"Bearer " + token):
                return web.Response(status=401, text="this route needs Authorization: Bearer <httpAdminTokenPath's token>\n")
        payload = await request.read()
        try:
            status, content_type, body = await handler(payload)
        except Exception:
            log.exception("HTTP handler failed", extra={"path": request.path})
            return web.Response(status=500, text="internal error\n")
        response = web.Response(status=status, body=body)
        response.content_type, _, charset = content_type.partition(";")
        if charset.strip().startswith("charset="):
            response.charset = charset.strip().removeprefix("charset=")
        return response

    return serve


async def _refuse_without_token(request: web.Request) -> web.StreamResponse:
    """A state-changing route of a bookie with authentication configured and no admin token set."""
    return web.Response(
        status=401,
        text="authentication is configured for this bookie: its state-changing admin routes need "
        "Authorization: Bearer <token>, and no token is set (httpAdminTokenPath)\n",
    )


@web.middleware
async def _close_after_answer(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """One request per connection, as before aiohttp: every answer, errors included, closes it."""
    try:
        response = await handler(request)
    except web.HTTPException as exc:  # 404, 405, 413 ... from aiohttp's router and body limit
        response = web.Response(status=exc.status, text=f"{exc.reason.lower()}\n")
    response.force_close()
    return response
