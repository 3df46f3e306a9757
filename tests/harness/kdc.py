"""A real MIT Kerberos KDC for a test module: a realm of its own on 127.0.0.1, principals and keytabs.

Debian's ``krb5-kdc`` and ``krb5-admin-server`` provide ``kdb5_util``, ``kadmin.local`` and ``krb5kdc``
(the Makefile installs them where it runs as root). Everything lives in one directory: the database,
``krb5.conf`` (clients and JVMs read it through ``KRB5_CONFIG`` / ``-Djava.security.krb5.conf``) and
``kdc.conf``; the KDC listens on a free port, UDP and TCP, and is stopped by :meth:`Kdc.stop`.

``krb5.conf`` turns off every DNS look-up and canonicalisation: the realm's principals are exactly the
names the tests give them, on every machine (docs/security.md, "Kerberos").
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.ports import free_port

__all__ = ["Kdc", "kdc_available", "start_kdc", "REALM"]

REALM = "BKSPARK.TEST"
_TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")


def _which(tool: str) -> str | None:
    return shutil.which(tool) or next(
        (p for p in (f"/usr/sbin/{tool}", f"/usr/bin/{tool}") if os.access(p, os.X_OK)), None
    )


def kdc_available() -> str | None:
    """None when a KDC can be started here, else the one-line reason it cannot."""
    missing = [t for t in _TOOLS if _which(t) is None]
    if missing:
        return (
            f"MIT Kerberos tools missing ({', '.join(missing)}): `make setup` installs krb5-kdc, "
            "krb5-admin-server and krb5-user when it runs as root"
        )
    return None


@dataclass
class Kdc:
    """One running KDC and its realm; :meth:`principal` adds a principal and writes its keytab."""

    directory: Path
    port: int
    realm: str = REALM
    proc: subprocess.Popen[bytes] | None = None
    keytabs: dict[str, Path] = field(default_factory=dict)

    @property
    def krb5_conf(self) -> Path:
        return self.directory / "krb5.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment a Kerberos client process needs (MIT's library reads ``KRB5_CONFIG``)."""
        return {"KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.directory / "kdc.conf")}

    @property
    def jvm_args(self) -> list[str]:
        return [f"-Djava.security.krb5.conf={self.krb5_conf}", "-Dsun.security.krb5.disableReferrals=true"]

    def _admin(self, query: str) -> None:
        subprocess.run(
            [_which("kadmin.local") or "kadmin.local", "-r", self.realm, "-q", query],
            env={**os.environ, **self.env}, check=True, capture_output=True, timeout=60,
        )

    def principal(self, name: str, keytab: Path | None = None) -> Path:
        """Create ``name@REALM`` with a random key and export it to a keytab (its path is returned)."""
        full = name if "@" in name else f"{name}@{self.realm}"
        path = keytab or self.directory / (name.replace("/", "_") + ".keytab")
        self._admin(f"addprinc -randkey {full}")
        self._admin(f"ktadd -k {path} {full}")
        self.keytabs[full] = path
        return path

    def rekey(self, name: str) -> None:
        """Give ``name`` a new random key: keytabs written before no longer work (a "wrong keytab")."""
        full = name if "@" in name else f"{name}@{self.realm}"
        self._admin(f"cpw -randkey {full}")

    def kinit(self, name: str, keytab: Path, ccache: Path, lifetime: str | None = None) -> None:
        """A ticket cache for ``name`` from its keytab (``kinit -kt``), optionally short-lived."""
        full = name if "@" in name else f"{name}@{self.realm}"
        argv = [_which("kinit") or "kinit", "-c", f"FILE:{ccache}", "-kt", str(keytab)]
        if lifetime:
            argv += ["-l", lifetime]
        subprocess.run([*argv, full], env={**os.environ, **self.env}, check=True, capture_output=True, timeout=60)

    def start(self, timeout: float = 60.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        log = open(self.directory / "krb5kdc.out", "ab")
        self.proc = subprocess.Popen(
            [_which("krb5kdc") or "krb5kdc", "-n", "-r", self.realm, "-P", str(self.directory / "kdc.pid")],
            env={**os.environ, **self.env}, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"krb5kdc exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"krb5kdc did not listen on 127.0.0.1:{self.port}: {self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log_tail(self, lines: int = 30) -> str:
        text = ""
        for name in ("krb5kdc.out", "kdc.log"):
            p = self.directory / name
            if p.exists():
                text += "\n".join(p.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text


def _write_confs(d: Path, port: int, realm: str) -> None:
    (d / "krb5.conf").write_text(
        f"""[libdefaults]
 default_realm = {realm}
 dns_lookup_realm = false
 dns_lookup_kdc = false
 rdns = false
 dns_canonicalize_hostname = false
 udp_preference_limit = 1
 ticket_lifetime = 1h
 renew_lifetime = 0
 forwardable = false
 permitted_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
 default_tkt_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
 default_tgs_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96

[realms]
 {realm} = {{
  kdc = 127.0.0.1:{port}
 }}

[domain_realm]
 localhost = {realm}
 .localhost = {realm}
"""
    )
    (d / "kdc.conf").write_text(
        f"""[kdcdefaults]
 kdc_ports = {port}
 kdc_tcp_ports = {port}

[realms]
 {realm} = {{
  database_name = {d}/principal
  key_stash_file = {d}/stash
  acl_file = {d}/kadm5.acl
  max_life = 1h
  max_renewable_life = 0
  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
 }}

[logging]
 kdc = FILE:{d}/kdc.log
"""
    )
    (d / "kadm5.acl").write_text("")


def start_kdc(directory: Path, realm: str = REALM) -> Kdc:
    """Create a realm in ``directory`` and start its KDC (about a second)."""
    reason = kdc_available()
    if reason is not None:
        raise RuntimeError(reason)
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    _write_confs(directory, port, realm)
    kdc = Kdc(directory, port, realm)
    subprocess.run(
        [_which("kdb5_util") or "kdb5_util", "create", "-s", "-r", realm, "-P", "bkspark-test-master-key"],
        env={**os.environ, **kdc.env}, check=True, capture_output=True, timeout=120,
    )
    kdc.start()
    return kdc
