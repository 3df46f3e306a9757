"""ZooKeeper authentication and ACLs for every kazoo client bkspark opens (client, bookie, shell, auditor).

* ``zkEnableSecurity=true``: znodes are created with ZooKeeper's ``CREATOR_ALL_ACL`` (all rights to the
  authenticated creator only), else ``OPEN_ACL_UNSAFE`` -- BookKeeper's ``ZkUtils.getACLs``.
* SASL (DIGEST-MD5, or GSSAPI when the section is a ``Krb5LoginModule`` one): as a Java ZooKeeper client, from
  the JAAS file's ``Client`` section (the section name can be changed with ``zookeeper.sasl.clientconfig``);
  ``zookeeper.sasl.client=false`` turns it off. With Kerberos the server is ``zookeeper/<canonical host>@REALM``
  (``zookeeper.sasl.client.username`` and ``zookeeper.sasl.client.canonicalize.hostname``, Java's names), and
  with ``zkEnableSecurity`` the znodes a client creates get ZooKeeper's ``sasl`` ACL of its principal.
* digest: ``zkDigestAuthPath`` names a file holding ``user:password`` (bkspark's key: BookKeeper itself
  has none), added with ``addauth digest`` on every session.

See docs/security.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bkspark.config.secrets import Secret, read_password_file
from bkspark.config.typed import flag, lookup
from bkspark.errors import InvalidOptionError
from bkspark.security import jaas
from bkspark.security.kerberos import KRB5_CONF_KEY, KerberosLogin, use_krb5_conf, zookeeper_sasl_mechanism

__all__ = ["ZK_SECURITY_KEYS", "ZkSecurity"]

ZK_SECURITY_KEYS: tuple[str, ...] = (
    "zkEnableSecurity",
    "zkDigestAuthPath",
    "zookeeper.sasl.clientconfig",
    "zookeeper.sasl.client",
    "zookeeper.sasl.client.username",
    "zookeeper.sasl.client.canonicalize.hostname",
)


@dataclass(frozen=True)
class ZkSecurity:
    """Credentials and ACL policy of a kazoo client (secrets held as :class:`Secret`)."""

    enable_acls: bool = False
    sasl_user: str | None = None
    sasl_password: Secret | None = field(default=None, repr=False)
    digest: Secret | None = field(default=None, repr=False)
    #: A Kerberos ``Client`` section (GSSAPI), the server's service name and whether its host is canonicalised.
    kerberos: KerberosLogin | None = None
    kerberos_service: str = "zookeeper"
    canonicalize_host: bool = True

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> "ZkSecurity":
        enable = flag(conf, "zkEnableSecurity", False)
        digest = None
        path = lookup(conf, "zkDigestAuthPath")
        if path:
            digest = read_password_file(str(path))
            if ":" not in str(digest.reveal()):
                raise InvalidOptionError("zkDigestAuthPath must hold 'user:password'", path=str(path))
        user = password = None
        jaas_file = jaas.jaas_path(conf)
        sasl_on = flag(conf, "zookeeper.sasl.client", True)
        login = None
        if jaas_file and sasl_on:
            section = str(lookup(conf, "zookeeper.sasl.clientconfig", "Client"))
            if section in jaas.load_jaas(jaas_file):
                login = jaas.kerberos_login(jaas_file, section)
                if login is None:
                    user, password = jaas.client_credentials(jaas_file, section)
                else:
                    use_krb5_conf(lookup(conf, KRB5_CONF_KEY))
                    user = login.principal
        return cls(
            enable, user, password, digest, login,
            str(lookup(conf, "zookeeper.sasl.client.username", "zookeeper")),
            flag(conf, "zookeeper.sasl.client.canonicalize.hostname", True),
        )

    def kazoo_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``KazooClient`` (auth_data, sasl_options, default_acl)."""
        from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE

        kwargs: dict[str, Any] = {"default_acl": list(CREATOR_ALL_ACL if self.enable_acls else OPEN_ACL_UNSAFE)}
        if self.digest is not None:
            kwargs["auth_data"] = [("digest", str(self.digest.reveal()))]
        if self.kerberos is not None:
            # Credentials now (a keytab read, or a ticket cache checked): a typed error here, not a kazoo retry loop.
            kwargs["sasl_options"] = {
                "mechanism": zookeeper_sasl_mechanism(),
                "service": self.kerberos_service,
                "credentials": self.kerberos.initiator_credentials(),
                "canonicalize": self.canonicalize_host,
            }
        elif self.sasl_user is not None and self.sasl_password is not None:
            kwargs["sasl_options"] = {
                "mechanism": "DIGEST-MD5",
                "username": self.sasl_user,
                "password": str(self.sasl_password.reveal()),
            }
        return kwargs

    @property
    def authenticated(self) -> bool:
        return self.digest is not None or self.sasl_user is not None or self.kerberos is not None
