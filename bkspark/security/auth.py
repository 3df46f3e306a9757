"""Which auth plugin a client or bookie runs, from BookKeeper's keys (``clientAuthProviderFactoryClass``,
``bookieAuthProviderFactoryClass``), and the security bundle a connection needs (TLS and SASL).

Only BookKeeper's SASL factories are implemented (DIGEST-MD5); any other factory class is an error at
start, never a silent connection without authentication (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bkspark.config.secrets import Secret
from bkspark.config.typed import lookup
from bkspark.errors import InvalidOptionError
from bkspark.protocol.sasl import DEFAULT_ALLOWED_IDS, DigestMd5Client, DigestMd5Server
from bkspark.security import jaas
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
    """A client's DIGEST-MD5 credentials (from its JAAS section)."""

    username: str
    password: Secret
    section: str

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
        user, password = jaas.client_credentials(_jaas_file(conf, "SASL"), section)
        return cls(user, password, section)

    def new_exchange(self) -> DigestMd5Client:
        """The mechanism for one connection."""
        return DigestMd5Client(self.username, self.password)


@dataclass(frozen=True)
class BookieSasl:
    """The users a bookie accepts (from its JAAS section) and the allowed-ids pattern."""

    users: Mapping[str, Secret]
    allowed_ids: str
    section: str

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> "BookieSasl | None":
        if not _sasl_factory(conf, "bookieAuthProviderFactoryClass", BOOKIE_SASL_FACTORY, "bookie"):
            return None
        section = str(lookup(conf, "saslJaasBookieSectionName", "Bookie"))
        users = jaas.bookie_credentials(_jaas_file(conf, "SASL"), section)
        allowed = str(lookup(conf, "saslJaasClientAllowedIds", DEFAULT_ALLOWED_IDS))
        try:
            DigestMd5Server(users, allowed)
        except Exception as exc:  # re.error
            raise InvalidOptionError("bad saslJaasClientAllowedIds pattern", error=str(exc)) from None
        return cls(users, allowed, section)

    def new_exchange(self) -> DigestMd5Server:
        """The mechanism for one connection."""
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
