"""SASL DIGEST-MD5 (RFC 2831) as BookKeeper's ``sasl`` auth plugin runs it: sans-IO, bytes in, bytes out.

BookKeeper's ``SASLClientProviderFactory`` / ``SASLBookieAuthProviderFactory`` choose DIGEST-MD5 when
the JAAS login has no Kerberos principal (docs/security.md).  The tokens travel as the ``payload`` of
AUTH messages whose ``authPluginName`` is ``"sasl"`` (v2 opcode 3 or v3 ``authRequest``):

1. client -> bookie: an empty token (DIGEST-MD5 has no initial response);
2. bookie -> client: the digest challenge (``realm="bookkeeper"``, a fresh ``nonce``, ``qop="auth"``);
3. client -> bookie: the digest response, made with ``digest-uri="bookkeeper/bookkeeper"``;
4. bookie -> client: ``rspauth=...``, the bookie's proof that it knows the password too.

The bookie then accepts only user names that match ``saslJaasClientAllowedIds`` (a Java regular
expression matched against the whole name; default ``.*bookkeeper.*``) and whose authorization id,
if any, is their own name.  The client side is pure-sasl's DIGEST-MD5 mechanism (the one kazoo uses);
the bookie side is written here, since pure-sasl has none.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from collections.abc import Mapping

from bkspark.config.secrets import Secret
from bkspark.errors import AuthenticationError, ProtocolError

__all__ = [
    "PLUGIN_NAME",
    "SASL_PROTOCOL",
    "SASL_HOST",
    "DEFAULT_ALLOWED_IDS",
    "DigestMd5Server",
    "DigestMd5Client",
    "parse_directives",
]

#: ``SaslConstants.PLUGIN_NAME``: the ``authPluginName`` of every SASL AUTH message.
PLUGIN_NAME = "sasl"
#: ``SASL_BOOKKEEPER_PROTOCOL`` and ``SASL_MD5_DUMMY_HOSTNAME``: digest-uri is ``bookkeeper/bookkeeper``.
SASL_PROTOCOL = "bookkeeper"
SASL_HOST = "bookkeeper"
#: ``JAAS_CLIENT_ALLOWED_IDS_DEFAULT``.
DEFAULT_ALLOWED_IDS = ".*bookkeeper.*"

_MAX_TOKEN = 4096


def parse_directives(token: bytes) -> dict[str, bytes]:
    """``key=value`` / ``key="quoted"`` pairs of a DIGEST-MD5 token (RFC 2831 §7.1 grammar, backslash escapes)."""
    if len(token) > _MAX_TOKEN:
        raise ProtocolError("DIGEST-MD5 token too long", size=len(token))
    out: dict[str, bytes] = {}
    i, n = 0, len(token)
    while i < n:
        while i < n and token[i : i + 1] in (b" ", b"\t", b",", b"\r", b"\n"):
            i += 1
        if i >= n:
            break
        eq = token.find(b"=", i)
        if eq < 0:
            raise ProtocolError("malformed DIGEST-MD5 token: directive without '='")
        key = token[i:eq].strip().decode("ascii", "replace").lower()
        i = eq + 1
        if i < n and token[i : i + 1] == b'"':
            i += 1
            value = bytearray()
            while i < n and token[i : i + 1] != b'"':
                if token[i : i + 1] == b"\\" and i + 1 < n:
                    i += 1
                value += token[i : i + 1]
                i += 1
            if i >= n:
                raise ProtocolError("malformed DIGEST-MD5 token: unterminated quoted string")
            i += 1
            out[key] = bytes(value)
        else:
            end = token.find(b",", i)
            end = n if end < 0 else end
            out[key] = token[i:end].strip()
            i = end
    return out


def _h(data: bytes) -> bytes:
    return hashlib.md5(data).digest()


def _hex(data: bytes) -> bytes:
    return hashlib.md5(data).hexdigest().encode("ascii")


def _response_value(
    user: bytes, realm: bytes, password: bytes, nonce: bytes, cnonce: bytes, nc: bytes, qop: bytes,
    digest_uri: bytes, authzid: bytes | None, method: bytes,
) -> bytes:
    """RFC 2831 §2.1.2.1: the ``response`` (method ``AUTHENTICATE``) or ``rspauth`` (method empty) value."""
    a1 = _h(user + b":" + realm + b":" + password) + b":" + nonce + b":" + cnonce
    if authzid:
        a1 += b":" + authzid
    a2 = method + b":" + digest_uri
    return _hex(_hex(a1) + b":" + nonce + b":" + nc + b":" + cnonce + b":" + qop + b":" + _hex(a2))


def _quote(value: bytes) -> bytes:
    return b'"' + value.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


class DigestMd5Server:
    """The bookie's side of one DIGEST-MD5 exchange (one per connection)."""

    def __init__(
        self,
        credentials: Mapping[str, Secret],
        allowed_ids: str = DEFAULT_ALLOWED_IDS,
        realm: str = SASL_HOST,
    ) -> None:
        self._credentials = credentials
        self._allowed = re.compile(allowed_ids)
        self._realm = realm.encode("utf-8")
        self._nonce: bytes | None = None
        self.complete = False
        #: The authenticated user name once :attr:`complete`.
        self.user: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's token: the challenge first, then ``rspauth``.

        Raises :class:`AuthenticationError` for wrong credentials or a refused user.
        """
        if self.complete:
            raise AuthenticationError("SASL exchange already complete")
        if self._nonce is None:
            self._nonce = base64.b64encode(secrets.token_bytes(30))
            return (
                b"realm=" + _quote(self._realm) + b",nonce=" + _quote(self._nonce)
                + b',qop="auth",charset=utf-8,algorithm=md5-sess'
            )
        d = parse_directives(token)
        for key in ("username", "nonce", "cnonce", "nc", "response", "digest-uri"):
            if key not in d:
                raise AuthenticationError("DIGEST-MD5 response lacks a required directive", directive=key)
        if d["nonce"] != self._nonce:
            raise AuthenticationError("DIGEST-MD5 response for another nonce")
        if d.get("nc") != b"00000001":
            raise AuthenticationError("DIGEST-MD5 nonce count must be 1", nc=d.get("nc"))
        qop = d.get("qop", b"auth")
        if qop != b"auth":
            raise AuthenticationError("only qop=auth is offered", qop=qop)
        expected_uri = f"{SASL_PROTOCOL}/{SASL_HOST}".encode()
        if d["digest-uri"] != expected_uri:
            raise AuthenticationError("DIGEST-MD5 digest-uri mismatch", got=d["digest-uri"], expected=expected_uri)
        utf8 = d.get("charset", b"").lower() == b"utf-8"
        enc = "utf-8" if utf8 else "latin-1"
        username = d["username"].decode("utf-8" if utf8 else "latin-1")
        realm = d.get("realm", self._realm)
        authzid = d.get("authzid")
        secret = self._credentials.get(username)
        if secret is None:
            raise AuthenticationError("unknown SASL user", user=username)
        try:
            password = str(secret.reveal()).encode(enc)
        except UnicodeEncodeError:
            password = str(secret.reveal()).encode("utf-8")
        expected = _response_value(
            username.encode(enc), realm, password, self._nonce, d["cnonce"], d["nc"], qop,
            d["digest-uri"], authzid, b"AUTHENTICATE",
        )
        if not secrets.compare_digest(expected, d["response"].lower()):
            raise AuthenticationError("wrong SASL password", user=username)
        if authzid and authzid.decode("utf-8", "replace") != username:
            raise AuthenticationError("SASL authorization id differs from the user name", user=username)
        if not self._allowed.fullmatch(username):
            raise AuthenticationError(
                "SASL user not allowed by saslJaasClientAllowedIds", user=username, pattern=self._allowed.pattern
            )
        self.complete = True
        self.user = username
        rspauth = _response_value(
            username.encode(enc), realm, password, self._nonce, d["cnonce"], d["nc"], qop,
            d["digest-uri"], authzid, b"",
        )
        return b"rspauth=" + rspauth


class DigestMd5Client:
    """The client's side of one DIGEST-MD5 exchange, on pure-sasl's mechanism."""

    def __init__(self, username: str, password: Secret) -> None:
        try:
            from puresasl.client import SASLClient
        except ImportError as exc:  # declared in pyproject.toml; a clear message if an install lacks it
            raise AuthenticationError("SASL needs the pure-sasl package (pip install pure-sasl)") from exc
        self.username = username
        self._client = SASLClient(
            SASL_HOST, service=SASL_PROTOCOL, mechanism="DIGEST-MD5", username=username,
            password=str(password.reveal()),
        )
        self.complete = False

    def initial(self) -> bytes:
        """The first token: empty (DIGEST-MD5 has no initial response; Java sends ``new byte[0]``)."""
        return b""

    def evaluate(self, challenge: bytes) -> bytes | None:
        """The answer to the bookie's token, or None once the bookie's ``rspauth`` has been checked."""
        from puresasl import SASLError, SASLProtocolException

        if "rspauth" in parse_directives(challenge):
            try:
                self._client.process(challenge)
            except (SASLError, SASLProtocolException) as exc:
                raise AuthenticationError("the bookie failed to prove it knows the SASL password", error=str(exc)) from None
            self.complete = True
            return None
        try:
            return bytes(self._client.process(challenge))
        except (SASLError, SASLProtocolException) as exc:
            raise AuthenticationError("cannot answer the bookie's DIGEST-MD5 challenge", error=str(exc)) from None
