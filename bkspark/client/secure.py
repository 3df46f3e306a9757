"""The client's connection handshake with a secured bookie: START_TLS, then SASL, before any request.

As Java's ``PerChannelBookieClient`` / ``AuthHandler.ClientSideHandler`` (docs/security.md):

1. TLS: a v3 ``START_TLS`` request, even on a v2 connection; on EOK the same TCP connection is
   upgraded (``loop.start_tls``) within ``startTLSTimeoutSecs``.  EBADREQ means the bookie has no TLS
   configured: an error, never a silent fallback to plain text.
2. SASL: AUTH messages (v2 opcode 3 on a v2 connection, v3 ``authRequest`` on a v3 one) with plugin
   name ``sasl`` until the DIGEST-MD5 or GSSAPI exchange completes.  A bookie without authentication
   answers ``AuthDisabledPlugin``, which counts as authenticated (as in Java), with a WARNING.  GSSAPI
   names the bookie ``bookkeeper/<host>`` with the host of its address as given (Java's client does
   the same); its steps (which may ask the KDC for a ticket) run off the event loop.  The exchange ends when the bookie's last token is checked (DIGEST-MD5's
   ``rspauth``) or when the client has sent its last one (GSSAPI's security-layer choice, which the
   bookie does not answer).

The pool publishes a connection only after this returns, so no request is ever sent before it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from bkspark.client.connection import V2, BookieConnection
from bkspark.errors import AuthenticationError, BKError, MalformedFrameError, TlsHandshakeError
from bkspark.protocol import v2, v3
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
from bkspark.protocol.sasl import PLUGIN_NAME
from bkspark.security.auth import ClientSecurity
from bkspark.security.tls import handshake_hint

__all__ = ["secure_connection"]

log = logging.getLogger(__name__)


async def secure_connection(conn: BookieConnection, security: ClientSecurity, host: str, timeout: float) -> None:
    """Run the handshake on a fresh connection; raises a :class:`SecurityError` subclass and aborts it on failure."""
    try:
        if security.tls is not None:
            await _start_tls(conn, security, host)
        if security.sasl is not None:
            await asyncio.wait_for(_sasl(conn, security, host), timeout)
    except asyncio.TimeoutError:
        what = "TLS upgrade" if security.tls is not None and not conn.tls else "SASL authentication"
        error: BKError = (TlsHandshakeError if what == "TLS upgrade" else AuthenticationError)(
            f"{what} with bookie timed out"
            + ("" if what == "TLS upgrade" else " (a Java bookie stays silent after a wrong password)"),
            bookie_id=conn.bookie_id,
        )
        conn.abort(error)
        raise error from None
    except BKError as exc:
        conn.abort(exc)
        raise
    finally:
        conn.end_handshake()


async def _start_tls(conn: BookieConnection, security: ClientSecurity, host: str) -> None:
    assert security.tls is not None
    timeout = security.start_tls_timeout
    txn = conn.next_txn_id()
    conn.send_raw(v3.encode_request(v3.start_tls_request(txn)))
    body = await asyncio.wait_for(conn.next_handshake_frame(), timeout)
    try:
        response = v3.decode_response(body)
    except MalformedFrameError:
        raise TlsHandshakeError("bookie answered START_TLS with something else", bookie_id=conn.bookie_id) from None
    if response.header.operation != pb.START_TLS or response.status != pb.EOK:
        raise TlsHandshakeError(
            "bookie refused START_TLS (EBADREQ: it has no TLS configured)"
            if response.status == pb.EBADREQ
            else "bookie refused START_TLS",
            bookie_id=conn.bookie_id,
            status=pb.StatusCode.Name(response.status) if response.status in pb.StatusCode.values() else response.status,
        )
    log.info("initiate TLS", extra={"bookie_id": conn.bookie_id})
    loop = asyncio.get_running_loop()
    ctx = security.tls.context()
    try:
        await conn.upgrade_tls(loop, ctx, host, timeout)
    except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
        reason = str(exc) or type(exc).__name__
        hint = handshake_hint(reason, server_side=False)
        raise TlsHandshakeError("TLS handshake with bookie failed" + hint, bookie_id=conn.bookie_id, error=reason) from None


async def _sasl(conn: BookieConnection, security: ClientSecurity, host: str) -> None:
    assert security.sasl is not None
    loop = asyncio.get_running_loop()
    if security.sasl.mechanism == "GSSAPI":
        mech: Any = await loop.run_in_executor(None, security.sasl.new_exchange, host)
    else:
        mech = security.sasl.new_exchange()

    async def step(fn: Callable[..., bytes | None], *args: bytes) -> bytes | None:
        if getattr(mech, "may_block", False):
            return await loop.run_in_executor(None, fn, *args)
        return fn(*args)

    token: bytes | None = await step(mech.initial)
    while token is not None:
        if conn.version == V2:
            conn.send_raw(v2.encode_auth_request(PLUGIN_NAME, token))
        else:
            conn.send_raw(v3.encode_request(v3.auth_request(conn.next_txn_id(), PLUGIN_NAME, token)))
        if mech.complete:
            break  # GSSAPI: the security-layer choice is the last token, and the bookie does not answer it
        try:
            body = await conn.next_handshake_frame()
            while _late_start_tls_answer(body):
                # A Java bookie with SASL answers START_TLS a second time, with EIO, when its TLS handshake
                # ends before the SASL exchange (BookieRequestProcessor.processStartTLSRequestV3); the Java
                # client drops it as unmatched, and so do we.
                body = await conn.next_handshake_frame()
        except BKError as exc:
            raise AuthenticationError(
                "bookie closed the connection during SASL authentication (wrong user name or password?)",
                bookie_id=conn.bookie_id,
                user=security.sasl.username,
            ) from exc
        name, payload = _auth_payload(conn, body)
        if name == v2.AUTH_DISABLED_PLUGIN_NAME:
            log.warning(
                "bookie %s does not authenticate clients (it answered AuthDisabledPlugin): this connection goes on "
                "without SASL, as Java's client does; the bookie proved no password",
                conn.bookie_id,
            )
            return
        if name != PLUGIN_NAME:
            raise AuthenticationError("bookie runs another auth plugin", bookie_id=conn.bookie_id, plugin=name)
        token = await step(mech.evaluate, payload)
    log.info(
        "connection to bookie %s authenticated as %s (%s)", conn.bookie_id, security.sasl.username,
        security.sasl.mechanism,
    )


def _late_start_tls_answer(body: bytes) -> bool:
    if not body or body[0] != 0x0A:  # a v3 Response starts with its header (field 1); a v2 one with version 0-2
        return False
    try:
        return v3.decode_response(body).header.operation == pb.START_TLS
    except MalformedFrameError:
        return False


def _auth_payload(conn: BookieConnection, body: bytes) -> tuple[str, bytes]:
    if conn.version == V2:
        response = v2.decode_response(body)
        if not isinstance(response, v2.AuthResponse):
            raise AuthenticationError("bookie answered AUTH with another response", bookie_id=conn.bookie_id)
        return response.auth_plugin_name, response.payload
    resp = v3.decode_response(body)
    if resp.status != pb.EOK:
        raise AuthenticationError(
            "bookie refused the SASL credentials (EUA: wrong user name or password, or user not allowed)",
            bookie_id=conn.bookie_id,
        )
    return resp.authResponse.authPluginName, bytes(resp.authResponse.payload)
