"""SASL GSSAPI (Kerberos V5, RFC 4752) as BookKeeper's ``sasl`` auth plugin runs it, over python-gssapi.

Java's ``SASLClientProviderFactory`` / ``SASLBookieAuthProviderFactory`` choose GSSAPI instead of
DIGEST-MD5 when the JAAS login of their section yields a Kerberos principal (a ``Krb5LoginModule``
section). The tokens travel in the same AUTH messages as DIGEST-MD5's (docs/security.md, "Kerberos"):

1. client -> bookie: the GSS-API context's first token (an AP-REQ for ``bookkeeper/<host>@REALM``, where
   ``<host>`` is the host part of the bookie's address as the client connects to it, ``127.0.0.1`` or a
   name, not canonicalised, and REALM the client's own realm: Java's ``SaslClientState`` does the same);
2. bookie -> client: the bookie's answer (an AP-REP: we always ask the bookie to prove itself); the
   client answers with an empty token once its context is established;
3. bookie -> client: a wrapped 4-byte offer (security layers, maximum buffer); client -> bookie: a
   wrapped choice (layer 1, "no security layer", then the authorization id: the client's own principal).
   The bookie sends nothing after that (Java's ``SaslServer`` returns null): the client is done when it
   has sent its choice.

The bookie accepts a client whose authorization id equals its authenticated principal and whose principal
matches ``saslJaasClientAllowedIds`` (whole-string match, as Java's ``Pattern.matches``). Only the
"no security layer" option is offered and taken, as between Java's client and bookie: TLS protects
the connection where it must be.

The GSS-API library (MIT Kerberos through the ``gssapi`` package, the ``kerberos`` extra) talks to the
KDC; :attr:`GssapiClient.may_block` tells the caller to step it off the event loop.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bkspark.errors import AuthenticationError, InvalidOptionError

__all__ = [
    "KRB5_LOGIN_MODULE",
    "KRB5_CONF_KEY",
    "use_krb5_conf",
    "SERVICE_NAME_KEY",
    "DEFAULT_SERVICE_NAME",
    "KerberosLogin",
    "GssapiClient",
    "GssapiServer",
    "gssapi_module",
    "ZK_SASL_MECHANISM",
    "zookeeper_sasl_mechanism",
]

KRB5_LOGIN_MODULE = "com.sun.security.auth.module.Krb5LoginModule"
#: Java reads the service name from the JVM property ``bookkeeper.sasl.servicename``; bkspark from the
#: configuration key of the same name.
SERVICE_NAME_KEY = "bookkeeper.sasl.servicename"
DEFAULT_SERVICE_NAME = "bookkeeper"

#: Java's JVM property naming the Kerberos configuration; bkspark's key of the same name sets MIT Kerberos'
#: ``KRB5_CONFIG`` for the process (a Spark executor's Python worker is started before any option is read).
KRB5_CONF_KEY = "java.security.krb5.conf"
_KRB5_ENV = "KRB5_CONFIG"

#: RFC 4752 §3.1: the security-layer bit for "no security layer".
_NO_SECURITY_LAYER = 1


def gssapi_module() -> Any:
    """The ``gssapi`` package, or a clear error naming the extra that brings it."""
    try:
        import gssapi
    except ImportError as exc:
        raise AuthenticationError(
            "Kerberos (SASL GSSAPI) needs the gssapi package: pip install 'bkspark[kerberos]' "
            "(it builds against MIT Kerberos: Debian's libkrb5-dev)",
            error=str(exc),
        ) from None
    return gssapi


def use_krb5_conf(path: str | None) -> None:
    """Point this process's Kerberos library at ``path`` (``java.security.krb5.conf``), as Java's system property does.

    MIT Kerberos reads ``$KRB5_CONFIG`` whenever it makes a context. A process has one: a second, different
    path is an error, never a silent switch under a running client.
    """
    if not path:
        return
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise InvalidOptionError("the Kerberos configuration file does not exist", key=KRB5_CONF_KEY, path=path)
    current = os.environ.get(_KRB5_ENV)
    if current and os.path.abspath(current) != path:
        raise InvalidOptionError(
            f"{KRB5_CONF_KEY} names another Kerberos configuration than this process's ${_KRB5_ENV}",
            key=KRB5_CONF_KEY, path=path, current=current,
        )
    os.environ[_KRB5_ENV] = path


def _java_bool(value: Any, default: bool) -> bool:
    """A JAAS option as ``Krb5LoginModule`` reads it: ``"true"`` in any case is true, anything else false."""
    if value is None:
        return default
    return str(value).strip().lower() == "true"


@dataclass(frozen=True)
class KerberosLogin:
    """A ``Krb5LoginModule`` JAAS section's options, read as Java reads them.

    ``useKeyTab=true`` with ``keyTab`` and ``principal``: credentials from the keytab (an initiator's
    tickets live in a private in-memory cache). ``useTicketCache=true``: tickets from ``ticketCache``, or
    the default cache (``$KRB5CCNAME``). ``storeKey`` is what a server needs to accept contexts: a bookie
    section without a keytab is refused.
    """

    principal: str | None
    keytab: str | None
    ticket_cache: str | None
    use_keytab: bool
    use_ticket_cache: bool
    store_key: bool
    section: str

    @classmethod
    def from_options(cls, section: str, options: Mapping[str, Any]) -> "KerberosLogin":
        use_keytab = _java_bool(options.get("useKeyTab"), False)
        login = cls(
            principal=str(options["principal"]) if options.get("principal") else None,
            keytab=str(options["keyTab"]) if options.get("keyTab") else None,
            ticket_cache=str(options["ticketCache"]) if options.get("ticketCache") else None,
            use_keytab=use_keytab,
            use_ticket_cache=_java_bool(options.get("useTicketCache"), False),
            store_key=_java_bool(options.get("storeKey"), False),
            section=section,
        )
        if use_keytab and not login.keytab:
            raise InvalidOptionError("JAAS Krb5LoginModule section has useKeyTab=true but no keyTab", section=section)
        if not use_keytab and not login.use_ticket_cache:
            raise InvalidOptionError(
                "JAAS Krb5LoginModule section needs useKeyTab=true (with keyTab and principal) or "
                "useTicketCache=true: bkspark never prompts for a password",
                section=section,
            )
        return login

    def initiator_credentials(self) -> Any:
        """Credentials to start contexts with (a client's), acquired now; a typed error when there are none."""
        gssapi = gssapi_module()
        store: dict[str, str] = {}
        if self.use_keytab:
            store["client_keytab"] = str(self.keytab)
            # Tickets got from the keytab stay in this process: a cache no other program reads or clobbers.
            store["ccache"] = f"MEMORY:bkspark-{uuid.uuid4().hex}"
        elif self.ticket_cache:
            store["ccache"] = self.ticket_cache if ":" in self.ticket_cache else f"FILE:{self.ticket_cache}"
        name = gssapi.Name(self.principal, gssapi.NameType.kerberos_principal) if self.principal else None
        try:
            creds = gssapi.Credentials(name=name, usage="initiate", store=store or None)
            if not self.use_keytab:
                _ = creds.lifetime  # an expired cache fails here, not at the first bookie
        except gssapi.exceptions.GSSError as exc:
            raise AuthenticationError(
                "cannot get Kerberos credentials", section=self.section, principal=self.principal,
                error=_gss_message(exc),
            ) from None
        return creds

    def acceptor_credentials(self) -> Any:
        """Credentials to accept contexts with (a bookie's), from the keytab."""
        gssapi = gssapi_module()
        if not self.keytab:
            raise InvalidOptionError(
                "a bookie's Krb5LoginModule section needs useKeyTab=true and keyTab", section=self.section
            )
        name = gssapi.Name(self.principal, gssapi.NameType.kerberos_principal) if self.principal else None
        try:
            return gssapi.Credentials(name=name, usage="accept", store={"keytab": self.keytab})
        except gssapi.exceptions.GSSError as exc:
            raise InvalidOptionError(
                "cannot read the bookie's Kerberos key from its keytab", section=self.section,
                principal=self.principal, keytab=self.keytab, error=_gss_message(exc),
            ) from None


def _gss_message(exc: Exception) -> str:
    """GSS-API's own words, on one line (``gen_message`` holds the major and minor status texts)."""
    try:
        text = exc.gen_message()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - the message is best effort
        text = str(exc)
    return " ".join(str(text).split())


def _wrap_error(what: str, exc: Exception, **context: Any) -> AuthenticationError:
    return AuthenticationError(what, error=_gss_message(exc), **context)


class GssapiClient:
    """The client's side of one GSSAPI exchange with a bookie (one per connection)."""

    #: Stepping may talk to the KDC (a service ticket): run it off the event loop.
    may_block = True

    def __init__(self, credentials: Any, service: str, host: str) -> None:
        gssapi = gssapi_module()
        self._gssapi = gssapi
        self.service_principal = f"{service}/{host}"
        try:
            self.username = str(credentials.name)
            # As Java's SaslClientState: ``<service>/<host>`` in the client's own realm, the host exactly as the
            # bookie's address names it (no canonicalisation, whatever krb5.conf says).
            realm = self.username.rpartition("@")[2]
            target = gssapi.Name(
                f"{service}/{host}@{realm}" if realm else f"{service}/{host}", gssapi.NameType.kerberos_principal
            )
            self._ctx = gssapi.SecurityContext(
                name=target, creds=credentials, usage="initiate",
                flags=gssapi.RequirementFlag.mutual_authentication,
            )
        except gssapi.exceptions.GSSError as exc:
            raise _wrap_error("cannot start a Kerberos exchange", exc, service=self.service_principal) from None
        self.complete = False

    def initial(self) -> bytes:
        """The first token: the context's AP-REQ (GSSAPI has an initial response)."""
        try:
            return bytes(self._ctx.step(None) or b"")
        except self._gssapi.exceptions.GSSError as exc:
            raise _wrap_error(
                "cannot get a Kerberos ticket for the bookie", exc, service=self.service_principal, user=self.username
            ) from None

    def evaluate(self, challenge: bytes) -> bytes | None:
        """The answer to the bookie's token; after the security-layer choice :attr:`complete` is true."""
        if self.complete:
            return None
        try:
            if not self._ctx.complete:
                return bytes(self._ctx.step(challenge) or b"")
            offer = bytes(self._ctx.unwrap(challenge).message)
            if len(offer) != 4:
                raise AuthenticationError("malformed GSSAPI security-layer offer from the bookie", size=len(offer))
            if not offer[0] & _NO_SECURITY_LAYER:
                raise AuthenticationError(
                    "the bookie requires a GSSAPI security layer; bkspark offers none (use TLS)", layers=offer[0]
                )
            choice = bytes([_NO_SECURITY_LAYER, 0, 0, 0]) + self.username.encode("utf-8")
            answer = bytes(self._ctx.wrap(choice, encrypt=False).message)
        except self._gssapi.exceptions.GSSError as exc:
            raise _wrap_error(
                "Kerberos exchange with the bookie failed", exc, service=self.service_principal, user=self.username
            ) from None
        self.complete = True
        return answer


class GssapiServer:
    """The bookie's side of one GSSAPI exchange (one per connection, event-loop thread)."""

    may_block = False  # accepting uses the keytab only, never the KDC

    def __init__(self, credentials: Any, allowed_ids: str) -> None:
        gssapi = gssapi_module()
        self._gssapi = gssapi
        self._allowed = re.compile(allowed_ids)
        self._ctx = gssapi.SecurityContext(creds=credentials, usage="accept")
        self._offered = False
        self._await_empty = False
        self.complete = False
        #: True when the exchange failed at the client's last token (see :meth:`evaluate`).
        self.refused_after_client_completed = False
        #: The client's principal (``name@REALM``) once :attr:`complete`.
        self.user: str | None = None

    def _offer(self) -> bytes:
        self._offered = True
        # Layers: "no security layer" only; maximum buffer 0 (no layer, so no wrapped messages follow).
        return bytes(self._ctx.wrap(bytes([_NO_SECURITY_LAYER, 0, 0, 0]), encrypt=False).message)

    def evaluate(self, token: bytes) -> bytes | None:
        """The answer to the client's token; None once the exchange is complete (nothing is sent then)."""
        if self.complete:
            raise AuthenticationError("SASL exchange already complete")
        errors = self._gssapi.exceptions.GSSError
        try:
            if not self._ctx.complete:
                out = self._ctx.step(token)
                if not self._ctx.complete:
                    return bytes(out or b"")
                if out:
                    self._await_empty = True  # the client answers our AP-REP with an empty token
                    return bytes(out)
                return self._offer()
            if self._await_empty:
                self._await_empty = False
                return self._offer()
            if not self._offered:
                raise AuthenticationError("GSSAPI token out of order")
            choice = bytes(self._ctx.unwrap(token).message)
        except errors as exc:
            raise _wrap_error("Kerberos authentication of the client failed", exc) from None
        # From here on the client holds itself authenticated (it sent its last token): a refusal leaves the
        # connection open and unauthenticated, so that its requests get EUA, as from Java's bookie.
        self.refused_after_client_completed = True
        if len(choice) < 4 or not choice[0] & _NO_SECURITY_LAYER:
            raise AuthenticationError("the client chose a GSSAPI security layer that was not offered")
        principal = str(self._ctx.initiator_name)
        authzid = choice[4:].decode("utf-8", "replace")
        if authzid and authzid != principal:
            raise AuthenticationError(
                "SASL authorization id differs from the Kerberos principal", user=principal, authzid=authzid
            )
        if not self._allowed.fullmatch(principal):
            raise AuthenticationError(
                "SASL user not allowed by saslJaasClientAllowedIds", user=principal, pattern=self._allowed.pattern
            )
        self.refused_after_client_completed = False
        self.complete = True
        self.user = principal
        return None


#: The name under which :func:`zookeeper_sasl_mechanism` registers bkspark's GSSAPI with pure-sasl (kazoo's SASL
#: library). ZooKeeper's SASL has no mechanism negotiation (the server's JAAS ``Server`` section decides), so the
#: name only chooses the client side; a name of our own leaves pure-sasl's ``GSSAPI`` (pykerberos) alone.
ZK_SASL_MECHANISM = "GSSAPI-BKSPARK"


def zookeeper_sasl_mechanism() -> str:
    """Register (once) pure-sasl's mechanism for ZooKeeper GSSAPI over :class:`GssapiClient`; its name for kazoo.

    kazoo runs ``puresasl.client.SASLClient(host=<the server's host>, mechanism=..., service=..., **props)`` and
    steps it until it is complete; the ``credentials`` and ``canonicalize`` props come through kazoo's
    ``sasl_options``. ZooKeeper's server answers the last token with an empty one, which ends kazoo's loop.
    """
    import puresasl.mechanisms as mechanisms

    if ZK_SASL_MECHANISM not in mechanisms.mechanisms:

        class _ZooKeeperGssapi(mechanisms.Mechanism):  # type: ignore[misc]
            name = ZK_SASL_MECHANISM
            score = 0  # never chosen by negotiation, only by name
            allows_anonymous = False
            uses_plaintext = False
            active_safe = True

            def __init__(self, sasl: Any, credentials: Any = None, canonicalize: bool = True, **_props: Any) -> None:
                super().__init__(sasl)
                host = str(sasl.host)
                if canonicalize:
                    # Java's ZooKeeper client names the server zookeeper/<canonical host name> by default
                    # (zookeeper.sasl.client.canonicalize.hostname=true): its reverse look-up.
                    import socket

                    try:
                        host = socket.getfqdn(host)
                    except OSError:
                        pass
                self._client: GssapiClient | None = GssapiClient(credentials, str(sasl.service), host)
                self._started = False
                self.complete = False

            def process(self, challenge: bytes | None = None) -> bytes | None:
                assert self._client is not None
                if not self._started:
                    self._started = True
                    return self._client.initial()
                answer = self._client.evaluate(bytes(challenge or b""))
                self.complete = self._client.complete
                return answer

            def dispose(self) -> None:
                self._client = None

        mechanisms.mechanisms[ZK_SASL_MECHANISM] = _ZooKeeperGssapi
    return ZK_SASL_MECHANISM
