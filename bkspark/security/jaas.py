"""JAAS configuration files, read as Java reads them for BookKeeper's SASL plugin and ZooKeeper's DIGEST-MD5.

A JVM names its file with ``-Djava.security.auth.login.config=PATH``; bkspark takes the same path from
the configuration key ``java.security.auth.login.config`` (or the environment variable
``BKSPARK_JAAS_CONFIG``).  The sections BookKeeper reads (docs/security.md):

* ``BookKeeper`` (``saslJaasClientSectionName``): a client's ``username`` and ``password``;
* ``Auditor`` (``saslJaasAuditorSectionName``): the same for system clients (auditor, shell admin tools);
* ``Bookie`` (``saslJaasBookieSectionName``): the users a bookie accepts, as ``user_<name>="password"``;
* ``Client``: kazoo's credentials for a ZooKeeper that requires SASL (ZooKeeper's own section name).

DIGEST-MD5 credentials come from ``org.apache.zookeeper.server.auth.DigestLoginModule`` sections;
a ``com.sun.security.auth.module.Krb5LoginModule`` section (``BookKeeper``, ``Auditor``, ``Bookie``, and
ZooKeeper's ``Client``) is read by :func:`kerberos_login` (SASL GSSAPI, docs/security.md "Kerberos").
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bkspark.config.secrets import Secret
from bkspark.errors import InvalidOptionError
from bkspark.security.kerberos import KerberosLogin

__all__ = [
    "JAAS_CONFIG_KEY",
    "JAAS_CONFIG_ENV",
    "JaasEntry",
    "parse_jaas",
    "load_jaas",
    "jaas_path",
    "client_credentials",
    "bookie_credentials",
    "kerberos_login",
]

JAAS_CONFIG_KEY = "java.security.auth.login.config"
JAAS_CONFIG_ENV = "BKSPARK_JAAS_CONFIG"

_TOKEN = re.compile(r'\s*(?:(//[^\n]*|/\*.*?\*/)|("(?:[^"\\]|\\.)*")|([{};=])|([^\s{};="]+))', re.S)


@dataclass(frozen=True)
class JaasEntry:
    """One login module line of a section: its class, flag and options (values as :class:`Secret` for passwords)."""

    module: str
    flag: str
    options: Mapping[str, Any]


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip():
                # The offset only: the text around it may hold a password.
                raise InvalidOptionError("cannot parse the JAAS configuration", offset=pos)
            break
        pos = m.end()
        if m.group(1):
            continue
        if m.group(2):
            out.append(m.group(2))
        else:
            out.append(m.group(3) or m.group(4))
    return out


def _unquote(token: str) -> str:
    if token.startswith('"'):
        return re.sub(r"\\(.)", r"\1", token[1:-1])
    return token


def parse_jaas(text: str) -> dict[str, list[JaasEntry]]:
    """Sections of a JAAS file; password-like option values come back as :class:`Secret`."""
    toks = _tokens(text)
    sections: dict[str, list[JaasEntry]] = {}
    i = 0

    def expect(tok: str) -> None:
        nonlocal i
        if i >= len(toks) or toks[i] != tok:
            raise InvalidOptionError("malformed JAAS configuration", expected=tok, got=toks[i] if i < len(toks) else "end")
        i += 1

    while i < len(toks):
        name = toks[i]
        i += 1
        expect("{")
        entries: list[JaasEntry] = []
        while i < len(toks) and toks[i] != "}":
            module = toks[i]
            flag = toks[i + 1] if i + 1 < len(toks) else ""
            i += 2
            options: dict[str, Any] = {}
            while i < len(toks) and toks[i] != ";":
                key = toks[i]
                expect_eq = toks[i + 1] if i + 1 < len(toks) else ""
                if expect_eq != "=" or i + 2 >= len(toks):
                    raise InvalidOptionError("malformed JAAS option", section=name, option=key)
                value = _unquote(toks[i + 2])
                i += 3
                options[key] = Secret(value) if key == "password" or key.startswith("user_") else value
            expect(";")
            entries.append(JaasEntry(module, flag, options))
        expect("}")
        if i < len(toks) and toks[i] == ";":
            i += 1
        sections[name] = entries
    return sections


def jaas_path(conf: Mapping[str, Any]) -> str | None:
    """The JAAS file named by the configuration (any case) or ``$BKSPARK_JAAS_CONFIG``."""
    for k, v in conf.items():
        if str(k).lower() == JAAS_CONFIG_KEY and v:
            return str(v)
    return os.environ.get(JAAS_CONFIG_ENV) or None


def load_jaas(path: str) -> dict[str, list[JaasEntry]]:
    """Read and parse a JAAS file."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse_jaas(f.read())
    except OSError as exc:
        raise InvalidOptionError("cannot read the JAAS configuration", path=path, error=exc.strerror) from None


def _is_kerberos(entry: JaasEntry) -> bool:
    return "principal" in entry.options or "Krb5LoginModule" in entry.module


def _entries(path: str, name: str) -> list[JaasEntry]:
    sections = load_jaas(path)
    if name not in sections:
        raise InvalidOptionError(
            f"no '{name}' section in the JAAS configuration", path=path, sections=sorted(sections)
        )
    return sections[name]


def _section(path: str, name: str) -> list[JaasEntry]:
    """A DIGEST-MD5 section's entries; a Kerberos one is an error here (:func:`kerberos_login` reads those)."""
    entries = _entries(path, name)
    for entry in entries:
        if _is_kerberos(entry):
            raise InvalidOptionError(
                f"JAAS section '{name}' is a Kerberos (GSSAPI) one, where DIGEST-MD5 credentials "
                "(org.apache.zookeeper.server.auth.DigestLoginModule: username and password) are read",
                section=name,
                module=entry.module,
            )
    return entries


def kerberos_login(path: str, section: str) -> KerberosLogin | None:
    """The section's ``Krb5LoginModule`` options, or None when it holds DIGEST-MD5 credentials."""
    for entry in _entries(path, section):
        if _is_kerberos(entry):
            return KerberosLogin.from_options(section, entry.options)
    return None


def client_credentials(path: str, section: str) -> tuple[str, Secret]:
    """``(username, password)`` of a client section (``BookKeeper``, ``Auditor``, ``Client``)."""
    for entry in _section(path, section):
        user, password = entry.options.get("username"), entry.options.get("password")
        if user and isinstance(password, Secret):
            return str(user), password
    raise InvalidOptionError(f"JAAS section '{section}' has no username/password", path=path)


def bookie_credentials(path: str, section: str) -> dict[str, Secret]:
    """``user -> password`` of a bookie section (``user_<name>="password"`` options)."""
    users: dict[str, Secret] = {}
    for entry in _section(path, section):
        for key, value in entry.options.items():
            if key.startswith("user_") and isinstance(value, Secret):
                users[key[len("user_") :]] = value
    if not users:
        raise InvalidOptionError(f"JAAS section '{section}' lists no user_<name> entries", path=path)
    return users
