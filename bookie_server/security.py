"""The bookie's side of TLS and SASL, per connection, as Java's bookie does it (docs/security.md).

* START_TLS (v3): without TLS configured, EBADREQ.  With TLS, the EOK answer leaves in the clear and
  the same connection is upgraded (``loop.start_tls(server_side=True)``); requests that arrived behind
  START_TLS before the upgrade wait in the connection's backlog and are served after it.  A client that never sends START_TLS is still
  served in plain text, as a Java bookie does.
* SASL (``bookieAuthProviderFactoryClass``): until the DIGEST-MD5 or GSSAPI exchange completes, only AUTH and
  START_TLS pass (``AuthHandler.ServerSideHandler``): a v2 add or read gets EUA, any other v2 request
  closes the connection, any other v3 request gets EUA.  Wrong credentials: EUA and close (v3), close (v2);
  a Kerberos principal refused at GSSAPI's last step (``saslJaasClientAllowedIds``) keeps the connection
  open and unauthenticated, so that the client's requests get EUA, as from Java's bookie.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from bkspark.errors import AuthenticationError, ProtocolError
from bkspark.protocol import v2, v3
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb
from bkspark.protocol.sasl import PLUGIN_NAME
from bkspark.security.auth import BookieSecurity
from bkspark.security.tls import handshake_hint

if TYPE_CHECKING:
    from bookie_server.server import _Connection

__all__ = ["ConnectionSecurity"]

log = logging.getLogger("bookie_server.security")


class ConnectionSecurity:
    """TLS and SASL state of one client connection (event-loop thread only)."""

    def __init__(self, security: BookieSecurity) -> None:
        self.security = security
        self._sasl = security.sasl.new_exchange() if security.sasl is not None else None
        self.authenticated = self._sasl is None
        #: True between START_TLS and the end of the TLS handshake: received bytes wait in :attr:`held`.
        self.upgrading = False
        self.held_data: list[bytes] = []  # bytes delivered while the handshake ran
        self.tls = False

    # -- the gate ----------------------------------------------------------------------
    def intercepts(self, request: Any) -> bool:
        """Whether this (parsed) request is ours: anything before authentication, and START_TLS."""
        return not self.authenticated or (type(request) is pb.Request and request.header.operation == pb.START_TLS)

    def handle(self, conn: "_Connection", request: Any) -> bool:
        """Handle an intercepted request; True when dispatching must stop (a TLS upgrade started)."""
        if type(request) is pb.Request:
            op = request.header.operation
            if op == pb.START_TLS and request.HasField("startTLSRequest"):
                self.start_tls(conn, request)
                return self.upgrading
            if self.authenticated:
                conn._handle_v3(request)  # a START_TLS without its sub-message: EBADREQ as usual
            elif op == pb.AUTH and request.HasField("authRequest"):
                self._auth(conn, request.authRequest.authPluginName, bytes(request.authRequest.payload), v3_request=request)
            else:
                conn._send_v3(v3.error_response(request, pb.EUA))
            return False
        if isinstance(request, v2.AuthRequest):
            self._auth(conn, request.auth_plugin_name, request.payload, v2_version=request.version)
        elif isinstance(request, v2.AddRequest):
            conn._send(v2.encode_add_response(v2.EUA, request.ledger_id, request.entry_id, request.version))
        elif isinstance(request, v2.ReadRequest):
            conn._send(v2.encode_read_response(v2.EUA, request.ledger_id, request.entry_id, b"", request.version))
        else:
            raise ProtocolError("request before authentication", peer=conn.peer)
        return False

    def _auth(
        self, conn: "_Connection", plugin: str, payload: bytes, *, v2_version: int | None = None, v3_request: Any = None
    ) -> None:
        assert self._sasl is not None
        try:
            if plugin != PLUGIN_NAME:
                raise AuthenticationError("client runs another auth plugin", plugin=plugin)
            answer = self._sasl.evaluate(payload)
        except (AuthenticationError, ProtocolError) as exc:
            conn.metrics.protocol_errors.inc()
            log.warning("SASL authentication of %s failed: %s", conn.peer, exc)
            if getattr(self._sasl, "refused_after_client_completed", False):
                return  # GSSAPI: the client sent its last token; its requests get EUA (Java's bookie does the same)
            if v3_request is not None:
                conn._send_v3(v3.error_response(v3_request, pb.EUA))
                conn._flush()
            conn.close()
            return
        if answer is None:
            pass  # GSSAPI's last step: Java's bookie sends nothing back either
        elif v3_request is not None:
            conn._send_v3(v3.auth_response(v3_request, PLUGIN_NAME, answer))
        else:
            conn._send(v2.encode_auth_response(PLUGIN_NAME, answer, v2_version if v2_version is not None else 2))
        if self._sasl.complete:
            self.authenticated = True
            log.info("client %s authenticated as %s", conn.peer, self._sasl.user)

    # -- START_TLS ----------------------------------------------------------------------
    def start_tls(self, conn: "_Connection", request: Any) -> None:
        """Answer START_TLS and upgrade; requests still in the connection's backlog are served after it."""
        provider = self.security.tls
        if provider is None or self.tls or self.upgrading:
            conn._send_v3(v3.start_tls_response(request, pb.EBADREQ))
            return
        conn._send_v3(v3.start_tls_response(request, pb.EOK))
        conn._flush()  # the answer leaves in the clear, before the handshake
        self.upgrading = True
        conn._spawn(self._upgrade(conn, provider.context(), provider.settings.start_tls_timeout))

    async def _upgrade(self, conn: "_Connection", ctx: Any, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        assert conn.transport is not None
        try:
            conn.transport = await loop.start_tls(
                conn.transport, conn, ctx, server_side=True, ssl_handshake_timeout=timeout
            )
        except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
            conn.metrics.protocol_errors.inc()
            reason = str(exc) or type(exc).__name__
            log.warning("TLS handshake with %s failed%s: %s", conn.peer, handshake_hint(reason, server_side=True), reason)
            conn.closed = True
            transport = conn.transport
            if transport is not None:
                transport.abort()
            return
        self.tls = True
        self.upgrading = False
        log.info("TLS handshake with %s done", conn.peer)
        conn._reading_paused = False  # start_tls resumed reading on the new transport
        conn._drain()  # requests that came behind START_TLS
        data, self.held_data = self.held_data, []
        if data and not conn.closed:
            conn.data_received(b"".join(data))
