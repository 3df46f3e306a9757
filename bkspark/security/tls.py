"""TLS settings and ``ssl.SSLContext``s built from BookKeeper's own configuration keys.

What Apache BookKeeper's ``TLSContextFactory`` does, and so what we do
(docs/security.md):

* TLS is on when ``tlsProviderFactoryClass`` names ``org.apache.bookkeeper.tls.TLSContextFactory``;
  ``tlsProvider`` (``JDK`` or ``OpenSSL``) only picks Java's engine: both mean Python's ``ssl`` here.
* Client: always verifies the bookie's chain against ``tlsTrustStore``; checks the name only with
  ``tlsHostnameVerificationEnabled=true`` (default false); presents ``tlsCertificatePath`` +
  ``tlsKeyStore`` only with ``tlsClientAuthentication=true``.  The deprecated ``clientKeyStore*`` /
  ``clientTrustStore*`` keys win over ``tlsKeyStore*`` / ``tlsTrustStore*`` on a client.
* Bookie: presents ``tlsCertificatePath`` + ``tlsKeyStore``; with ``tlsClientAuthentication=true``
  requires a client certificate signed by ``tlsTrustStore``.
* Key and trust stores: ``PEM`` (the private key in PKCS#8, optionally encrypted with the password in
  ``tlsKeyStorePasswordPath``), or ``JKS``/``PKCS12`` converted by :mod:`bkspark.security.stores` (the
  optional extra ``bkspark[tls-stores]``; without it, an error at start naming the extra).
* ``tlsCertFilesRefreshDurationSeconds`` > 0: the files are checked for changes at most that often and
  the context is rebuilt when one changed (certificate rotation without a restart).
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bkspark.config.secrets import Secret, read_password_file
from bkspark.config.typed import flag, lookup
from bkspark.errors import InvalidOptionError, SecurityError
from bkspark.security import stores

__all__ = ["TLS_FACTORY_CLASS", "TlsSettings", "TlsContextProvider", "TLS_KEYS", "tls_enabled", "handshake_hint"]

TLS_FACTORY_CLASS = "org.apache.bookkeeper.tls.TLSContextFactory"
_PROVIDERS = ("JDK", "OPENSSL")
_STORE_TYPES = ("PEM", "JKS", "PKCS12")
_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}

#: Every TLS key we read (BookKeeper's names); used by the configuration-key registry.
TLS_KEYS: tuple[str, ...] = (
    "tlsProviderFactoryClass",
    "tlsProvider",
    "tlsKeyStoreType",
    "tlsKeyStore",
    "tlsKeyStorePasswordPath",
    "tlsCertificatePath",
    "tlsTrustStoreType",
    "tlsTrustStore",
    "tlsTrustStorePasswordPath",
    "tlsClientAuthentication",
    "tlsHostnameVerificationEnabled",
    "tlsEnabledProtocols",
    "tlsEnabledCipherSuites",
    "tlsCertFilesRefreshDurationSeconds",
    "clientKeyStoreType",
    "clientKeyStore",
    "clientKeyStorePasswordPath",
    "clientTrustStoreType",
    "clientTrustStore",
    "clientTrustStorePasswordPath",
    "startTLSTimeoutSecs",
)


def handshake_hint(reason: str, *, server_side: bool) -> str:
    """What a failed TLS handshake's OpenSSL reason means for the user, as a parenthesised hint ("" if unknown)."""
    upper = reason.upper()
    if server_side:
        if "UNKNOWN_CA" in upper or "BAD_CERTIFICATE" in upper or "CERTIFICATE_UNKNOWN" in upper:
            return " (the client refused this bookie's certificate: it is not signed by a CA in the client's trust store)"
        if "CERTIFICATE_VERIFY_FAILED" in upper:
            return " (the client's certificate is not signed by a CA in tlsTrustStore)"
        if "PEER_DID_NOT_RETURN_A_CERTIFICATE" in upper:
            return " (tlsClientAuthentication=true: the client presented no certificate)"
        if "CONNECTIONRESETERROR" in upper or "CONNECTION RESET" in upper:
            # Python's asyncio, a bkspark client among them, closes a refused handshake without sending an alert.
            return (" (the client closed the connection during the handshake without saying why: a bkspark client"
                    " does so when this bookie's certificate is not signed by a CA in its trust store)")
        return ""
    if "CERTIFICATE_VERIFY_FAILED" in upper:
        return " (the bookie's certificate is not signed by a CA in tlsTrustStore, or its name does not match)"
    if "CERTIFICATE_REQUIRED" in upper or "CERTIFICATE REQUIRED" in upper:
        return " (the bookie requires a client certificate: set tlsClientAuthentication, tlsCertificatePath, tlsKeyStore)"
    if "UNKNOWN_CA" in upper:
        return " (the bookie refused the client certificate: it is not signed by a CA in the bookie's tlsTrustStore)"
    return ""


def tls_enabled(conf: Mapping[str, Any]) -> bool:
    """Whether the configuration names a TLS provider factory (what Java tests to turn TLS on)."""
    return lookup(conf, "tlsProviderFactoryClass") is not None


@dataclass(frozen=True)
class TlsSettings:
    """The TLS part of a client or bookie configuration (file paths only: no secret is held here)."""

    server_side: bool
    trust_store: str | None = None
    trust_store_password_path: str | None = None
    certificate_path: str | None = None
    key_store: str | None = None
    key_store_password_path: str | None = None
    client_authentication: bool = False
    hostname_verification: bool = False
    protocols: tuple[str, ...] = ()
    refresh_seconds: float = 0.0
    start_tls_timeout: float = 10.0
    provider: str = "JDK"
    key_store_type: str = "PEM"
    trust_store_type: str = "PEM"
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], *, server_side: bool) -> "TlsSettings | None":
        """The settings when ``tlsProviderFactoryClass`` is set, else None; an error for what we cannot honour."""
        factory = lookup(conf, "tlsProviderFactoryClass")
        if factory is None:
            return None
        factory = str(factory).strip()
        if factory != TLS_FACTORY_CLASS:
            raise InvalidOptionError(
                f"unsupported TLS provider factory: only {TLS_FACTORY_CLASS} is implemented by bkspark",
                key="tlsProviderFactoryClass",
                value=factory,
            )
        provider = str(lookup(conf, "tlsProvider", "OpenSSL")).strip().upper()
        if provider not in _PROVIDERS:
            raise InvalidOptionError("tlsProvider must be JDK or OpenSSL", key="tlsProvider", value=provider)

        def pick(client_key: str, key: str) -> Any:
            # ClientConfiguration: the deprecated client* key first, then the tls* key.
            return (None if server_side else lookup(conf, client_key)) or lookup(conf, key)

        for client_key, key in (("clientKeyStoreType", "tlsKeyStoreType"), ("clientTrustStoreType", "tlsTrustStoreType")):
            store_type = str(pick(client_key, key) or "JKS").strip().upper()
            if store_type not in _STORE_TYPES:
                raise InvalidOptionError("unknown key store type", key=key, value=store_type)
        key_type = str(pick("clientKeyStoreType", "tlsKeyStoreType") or "JKS").strip().upper()
        trust_type = str(pick("clientTrustStoreType", "tlsTrustStoreType") or "JKS").strip().upper()
        client_auth = flag(conf, "tlsClientAuthentication", False)
        needs_key = server_side or client_auth
        needs_trust = not server_side or client_auth
        if needs_key and key_type in stores.JAVA_STORE_TYPES:
            stores.require_store_support(key_type, "tlsKeyStoreType")
        if needs_trust and trust_type in stores.JAVA_STORE_TYPES:
            stores.require_store_support(trust_type, "tlsTrustStoreType")
        if lookup(conf, "tlsEnabledCipherSuites") is not None:
            raise InvalidOptionError(
                "tlsEnabledCipherSuites is not supported by bkspark (Java and OpenSSL name suites differently); "
                "remove it to use Python's default suites",
                key="tlsEnabledCipherSuites",
            )
        protocols = tuple(p.strip() for p in str(lookup(conf, "tlsEnabledProtocols", "")).split(",") if p.strip())
        for proto in protocols:
            if proto not in _PROTOCOLS:
                raise InvalidOptionError("unsupported TLS protocol (TLSv1.2, TLSv1.3)", key="tlsEnabledProtocols", value=proto)
        try:
            refresh = float(lookup(conf, "tlsCertFilesRefreshDurationSeconds", 0))
            timeout = float(lookup(conf, "startTLSTimeoutSecs", 10))
        except (TypeError, ValueError) as exc:
            raise InvalidOptionError("not a number", error=str(exc)) from None
        settings = cls(
            server_side=server_side,
            trust_store=pick("clientTrustStore", "tlsTrustStore"),
            trust_store_password_path=pick("clientTrustStorePasswordPath", "tlsTrustStorePasswordPath"),
            certificate_path=lookup(conf, "tlsCertificatePath"),
            key_store=pick("clientKeyStore", "tlsKeyStore"),
            key_store_password_path=pick("clientKeyStorePasswordPath", "tlsKeyStorePasswordPath"),
            client_authentication=client_auth,
            hostname_verification=flag(conf, "tlsHostnameVerificationEnabled", False),
            protocols=protocols,
            refresh_seconds=refresh,
            start_tls_timeout=timeout if timeout > 0 else 10.0,
            provider=provider,
            key_store_type=key_type,
            trust_store_type=trust_type,
        )
        settings._check_files()
        return settings

    def _check_files(self) -> None:
        needs_key = self.server_side or self.client_authentication
        needs_trust = not self.server_side or self.client_authentication
        required = []
        if needs_key:
            if self.key_store_type == "PEM":  # a JKS/PKCS12 key store holds the certificate chain itself
                required.append(("tlsCertificatePath", self.certificate_path))
            required.append(("tlsKeyStore", self.key_store))
        if needs_trust:
            required.append(("tlsTrustStore", self.trust_store))
        for key, path in required:
            if not path:
                raise InvalidOptionError(f"{key} is required for this TLS set-up", key=key)
            if not os.path.isfile(path):
                raise InvalidOptionError("TLS file not found", key=key, path=path)

    def _paths(self) -> list[str]:
        return [
            p
            for p in (
                self.trust_store,
                self.trust_store_password_path,
                self.certificate_path,
                self.key_store,
                self.key_store_password_path,
            )
            if p
        ]

    def build(self) -> ssl.SSLContext:
        """A fresh context from the files (raises :class:`SecurityError` naming the file that failed)."""
        purpose = ssl.PROTOCOL_TLS_SERVER if self.server_side else ssl.PROTOCOL_TLS_CLIENT
        ctx = ssl.SSLContext(purpose)
        if self.protocols:
            versions = sorted(_PROTOCOLS[p] for p in self.protocols)
            ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
        else:
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        needs_key = self.server_side or self.client_authentication
        needs_trust = not self.server_side or self.client_authentication
        if needs_key:
            password: Secret | None = None
            if self.key_store_password_path:
                password = read_password_file(self.key_store_password_path)
            if self.key_store_type in stores.JAVA_STORE_TYPES:
                stores.load_key_store_into(ctx, self.key_store, self.key_store_type, password)  # type: ignore[arg-type]
            else:
                try:
                    ctx.load_cert_chain(
                        self.certificate_path,  # type: ignore[arg-type]
                        self.key_store,
                        password=(password.reveal() if password is not None and password.reveal() else None),
                    )
                except (ssl.SSLError, OSError) as exc:
                    raise SecurityError(
                        "cannot load the TLS certificate and private key (PEM; PKCS#8 key; wrong key password?)",
                        certificate=self.certificate_path,
                        key=self.key_store,
                        error=str(exc),
                    ) from None
        if needs_trust:
            try:
                if self.trust_store_type in stores.JAVA_STORE_TYPES:
                    trust_password = None
                    if self.trust_store_password_path:
                        trust_password = read_password_file(self.trust_store_password_path)
                    ctx.load_verify_locations(
                        cadata=stores.trust_store_pem(self.trust_store, self.trust_store_type, trust_password)  # type: ignore[arg-type]
                    )
                else:
                    ctx.load_verify_locations(cafile=self.trust_store)
            except (ssl.SSLError, OSError) as exc:
                raise SecurityError(
                    f"cannot load the TLS trust store ({self.trust_store_type})", trust_store=self.trust_store, error=str(exc)
                ) from None
            ctx.verify_mode = ssl.CERT_REQUIRED
        elif self.server_side:
            ctx.verify_mode = ssl.CERT_NONE
        if not self.server_side:
            ctx.check_hostname = self.hostname_verification
        return ctx


class TlsContextProvider:
    """Hands out the current context; rebuilds it when a file changed (``tlsCertFilesRefreshDurationSeconds``)."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._ctx = settings.build()
        self._stamps = self._mtimes()
        self._checked = time.monotonic()

    def _mtimes(self) -> tuple[float, ...]:
        out = []
        for path in self.settings._paths():
            try:
                out.append(os.stat(path).st_mtime)
            except OSError:
                out.append(-1.0)
        return tuple(out)

    def context(self) -> ssl.SSLContext:
        """The context for the next handshake (any thread)."""
        refresh = self.settings.refresh_seconds
        if refresh > 0 and time.monotonic() - self._checked >= refresh:
            with self._lock:
                self._checked = time.monotonic()
                stamps = self._mtimes()
                if stamps != self._stamps:
                    try:
                        self._ctx = self.settings.build()
                        self._stamps = stamps
                    except SecurityError:
                        # Keep serving with the old context, as TLSContextFactory does on a failed reload.
                        pass
        return self._ctx
