"""Which auth plugin a client or bookie runs, from BookKeeper's keys (``clientAuthProviderFactoryClass``,
``bookieAuthProviderFactoryClass``), and the security bundle a connection needs (TLS and SASL).

Only BookKeeper's SASL factories are implemented (DIGEST-MD5, and GSSAPI when the JAAS section is a
Kerberos one: bkspark/security/kerberos.py); any other factory class is an error at start, never a silent
connection without authentication (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bkspark.config.secrets import Secret
from bkspark.config.typed import lookup
from bkspark.errors import InvalidOptionError
from bkspark.protocol.sasl import DEFAULT_ALLOWED_IDS, SASL_HOST, DigestMd5Client, DigestMd5Server
from bkspark.security import jaas
from bkspark.security.kerberos import (
    DEFAULT_SERVICE_NAME,
    KRB5_CONF_KEY,
    SERVICE_NAME_KEY,
    GssapiClient,
    GssapiServer,
    KerberosLogin,
    use_krb5_conf,
)
from bkspark.security.tls import TlsContextProvider, TlsSettings

__all__ = [
    "CLIENT_SASL_FACTORY",
    "BOOKIE_SASL_FACTORY",
    "AUTH_KEYS",
    "ClientSasl",
    "BookieSasl",
    "ClientSecurity",
    "BookieSecurity",
]

CLIENT_SASL_FACTORY = "org.apache.bookkeeper.sasl.SASLClientProviderFactory"
BOOKIE_SASL_FACTORY = "org.apache.bookkeeper.sasl.SASLBookieAuthProviderFactory"

#: Every auth key we read (BookKeeper's names plus the JAAS file), for the configuration-key registry.
AUTH_KEYS: tuple[str, ...] = (
    "clientAuthProviderFactoryClass",
    "bookieAuthProviderFactoryClass",
    "saslJaasClientSectionName",
    "saslJaasAuditorSectionName",
    "saslJaasBookieSectionName",
    "saslJaasClientAllowedIds",
    "clientRole",
    SERVICE_NAME_KEY,
    KRB5_CONF_KEY,
    jaas.JAAS_CONFIG_KEY,
)


def _jaas_file(conf: Mapping[str, Any], what: str) -> str:
    path = jaas.jaas_path(conf)
    if path is None:
        raise InvalidOptionError(
            f"{what} needs a JAAS configuration: set {jaas.JAAS_CONFIG_KEY} (or ${jaas.JAAS_CONFIG_ENV})"
        )
    return path


def _sasl_factory(conf: Mapping[str, Any], key: str, expected: str, side: str) -> bool:
    """Whether ``key`` turns SASL on; an error for any class but BookKeeper's (never a silent no-auth)."""
    factory = lookup(conf, key)
    if factory is None:
        return False
    if str(factory).strip() != expected:
        raise InvalidOptionError(
            f"unsupported {side} auth provider: bkspark implements {expected} only", key=key, value=str(factory)
        )
    return True


@dataclass(frozen=True)
class ClientSasl:
    """A client's SASL login (from its JAAS section): DIGEST-MD5 credentials, or a Kerberos login (GSSAPI)."""

    username: str
    password: Secret | None
    section: str
    kerberos: KerberosLogin | None = None
    service_name: str = DEFAULT_SERVICE_NAME
    #: The Kerberos credentials, acquired at the first connection and shared by the later ones.
    _credentials: list[Any] = field(default_factory=list, compare=False, repr=False)

    @property
    def mechanism(self) -> str:
        return "GSSAPI" if self.kerberos is not None else "DIGEST-MD5"

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> "ClientSasl | None":
        if not _sasl_factory(conf, "clientAuthProviderFactoryClass", CLIENT_SASL_FACTORY, "client"):
            return None
        system = str(lookup(conf, "clientRole", "")).strip().lower() == "system"
        section = str(
            lookup(conf, "saslJaasAuditorSectionName", "Auditor")
            if system
            else lookup(conf, "saslJaasClientSectionName", "BookKeeper")
        )
        path = _jaas_file(conf, "SASL")
        login = jaas.kerberos_login(path, section)
        if login is not None:
            use_krb5_conf(lookup(conf, KRB5_CONF_KEY))
            service = str(lookup(conf, SERVICE_NAME_KEY, DEFAULT_SERVICE_NAME)).strip() or DEFAULT_SERVICE_NAME
            return cls(login.principal or "", None, section, login, service)
        user, password = jaas.client_credentials(path, section)
        return cls(user, password, section)

    def new_exchange(self, host: str = SASL_HOST) -> DigestMd5Client | GssapiClient:
        """The mechanism for one connection to the bookie at ``host`` (its reverse-resolved name, for GSSAPI).

        GSSAPI credentials are acquired here (a keytab read, or a ticket cache checked): call it off the
        event loop when :attr:`mechanism` is GSSAPI.
        """
        if self.kerberos is None:
            assert self.password is not None
            return DigestMd5Client(self.username, self.password)
        if not self._credentials:
            self._credentials.append(self.kerberos.initiator_credentials())
        return GssapiClient(self._credentials[0], self.service_name, host)


@dataclass(frozen=True)
class BookieSasl:
    """The users a bookie accepts (from its JAAS section), or its Kerberos key; and the allowed-ids pattern."""

    users: Mapping[str, Secret]
    allowed_ids: str
    section: str
    #: The bookie's acceptor credentials (from its keytab) when its section is a Kerberos one.
    kerberos_credentials: Any = None

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> "BookieSasl | None":
        if not _sasl_factory(conf, "bookieAuthProviderFactoryClass", BOOKIE_SASL_FACTORY, "bookie"):
            return None
        section = str(lookup(conf, "saslJaasBookieSectionName", "Bookie"))
        path = _jaas_file(conf, "SASL")
        allowed = str(lookup(conf, "saslJaasClientAllowedIds", DEFAULT_ALLOWED_IDS))
        try:
            DigestMd5Server({}, allowed)
        except Exception as exc:  # re.error
            raise InvalidOptionError("bad saslJaasClientAllowedIds pattern", error=str(exc)) from None
        login = jaas.kerberos_login(path, section)
        if login is not None:
            use_krb5_conf(lookup(conf, KRB5_CONF_KEY))
            return cls({}, allowed, section, login.acceptor_credentials())
        return cls(jaas.bookie_credentials(path, section), allowed, section)

    def new_exchange(self) -> DigestMd5Server | GssapiServer:
        """The mechanism for one connection."""
        if self.kerberos_credentials is not None:
            return GssapiServer(self.kerberos_credentials, self.allowed_ids)
        return DigestMd5Server(self.users, self.allowed_ids)


@dataclass(frozen=True)
class ClientSecurity:
    """What every client connection does before its first request: START_TLS, then SASL."""

    tls: TlsContextProvider | None = None
    sasl: ClientSasl | None = None
    start_tls_timeout: float = 10.0

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> "ClientSecurity":
        settings = TlsSettings.from_conf(conf, server_side=False)
        return cls(
            TlsContextProvider(settings) if settings is not None else None,
            ClientSasl.from_conf(conf),
            settings.start_tls_timeout if settings is not None else 10.0,
        )

    @property
    def enabled(self) -> bool:
        return self.tls is not None or self.sasl is not None


@dataclass(frozen=True)
class BookieSecurity:
    """What a bookie requires of its connections: an optional TLS upgrade, and SASL before any request."""

    tls: TlsContextProvider | None = None
    sasl: BookieSasl | None = None

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> "BookieSecurity":
        settings = TlsSettings.from_conf(conf, server_side=True)
        return cls(TlsContextProvider(settings) if settings is not None else None, BookieSasl.from_conf(conf))
