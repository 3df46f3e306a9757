"""Java key and trust stores (``JKS``, ``PKCS12``) turned into what Python's ``ssl`` reads (PEM).

Python's ``ssl`` reads PEM files only, so a ``tlsKeyStoreType`` / ``tlsTrustStoreType`` of ``JKS`` or
``PKCS12`` (and the ``clientKeyStoreType`` / ``clientTrustStoreType`` twins) is converted when a context is
built (docs/security.md):

* PKCS12 is read with ``cryptography``; JKS (and JCEKS) with ``pyjks``; both are the optional extra
  ``bkspark[tls-stores]``. Without it these store types are an error at start naming the extra.
* A ``JKS`` store that is really a PKCS12 file (what ``keytool`` writes by default since Java 9) is read as
  PKCS12, as Java's own JKS loader does (``keystore.type.compat``).
* The password comes from the ``*PasswordPath`` file; as in Java's ``TLSContextFactory`` it opens the store and
  the private key alike. A trust store without a password file is read without the integrity check.
* Trust certificates go to ``ssl`` in memory (``cadata``). The private key cannot (``load_cert_chain`` takes
  files only): it is written, encrypted with a one-time random password, to a ``0600`` file in a private
  ``0700`` directory, loaded, and deleted before :func:`load_key_store_into` returns.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import ssl
import tempfile
from typing import Any

from bkspark.config.secrets import Secret
from bkspark.errors import InvalidOptionError, SecurityError

__all__ = ["JAVA_STORE_TYPES", "STORES_EXTRA", "require_store_support", "load_key_store_into", "trust_store_pem"]

#: Store types read through the optional libraries (PEM is read by ``ssl`` itself).
JAVA_STORE_TYPES = ("JKS", "PKCS12")
STORES_EXTRA = "bkspark[tls-stores]"

_JKS_MAGICS = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS


def require_store_support(store_type: str, key: str) -> None:
    """An error at start when the library reading ``store_type`` is not installed."""
    modules = ("cryptography",) if store_type == "PKCS12" else ("cryptography", "jks")
    for module in modules:
        try:
            __import__(module)
        except ImportError:
            raise InvalidOptionError(
                f"{store_type} stores need the optional extra {STORES_EXTRA} "
                f"(pip install '{STORES_EXTRA}': cryptography and pyjks); or convert the store to PEM",
                key=key,
                value=store_type,
                missing=module,
            ) from None


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise SecurityError("cannot read the TLS store", path=path, error=exc.strerror) from None


def _password_text(password: Secret | None) -> str | None:
    if password is None:
        return None
    value = password.reveal()
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _is_jks(data: bytes) -> bool:
    return data[:4] in _JKS_MAGICS


def _wrong_password(path: str, what: str) -> SecurityError:
    return SecurityError(
        f"cannot open the {what}: wrong password (check its *PasswordPath file) or a damaged store", path=path
    )


def _load_pkcs12(data: bytes, path: str, password: str | None, what: str) -> tuple[Any, list[Any]]:
    """``(private key or None, [certificates])`` of a PKCS12 file, the key's own certificate first."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        bundle = pkcs12.load_pkcs12(data, password.encode("utf-8") if password is not None else None)
    except ValueError:
        raise _wrong_password(path, what) from None
    certs = [bundle.cert.certificate] if bundle.cert is not None else []
    certs += [c.certificate for c in bundle.additional_certs]
    return bundle.key, certs


def _load_jks(data: bytes, path: str, password: str | None, what: str, *, want_key: bool) -> tuple[Any, list[Any]]:
    import jks
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_der_private_key

    try:
        store = jks.KeyStore.loads(data, password, try_decrypt_keys=want_key and password is not None)
    except (jks.util.KeystoreSignatureException, jks.util.DecryptionFailureException, jks.util.BadPaddingException):
        raise _wrong_password(path, what) from None
    except jks.util.KeystoreException as exc:
        raise SecurityError(f"cannot read the {what} (JKS)", path=path, error=str(exc)) from None
    if want_key:
        for alias, entry in sorted(store.private_keys.items()):
            if not entry.is_decrypted():
                raise SecurityError(
                    f"the private key of the {what} is not readable with the store password "
                    "(Java's TLSContextFactory uses one password for both)",
                    path=path,
                    alias=alias,
                )
            key = load_der_private_key(entry.pkey_pkcs8, password=None)
            return key, [x509.load_der_x509_certificate(der) for _kind, der in entry.cert_chain]
        return None, []
    return None, [x509.load_der_x509_certificate(e.cert) for _a, e in sorted(store.certs.items())]


def _load(path: str, store_type: str, password: Secret | None, what: str, *, want_key: bool) -> tuple[Any, list[Any]]:
    data = _read(path)
    text = _password_text(password)
    if store_type == "JKS" and _is_jks(data):
        return _load_jks(data, path, text, what, want_key=want_key)
    return _load_pkcs12(data, path, text, what)


def trust_store_pem(path: str, store_type: str, password: Secret | None) -> str:
    """The trusted certificates of a JKS/PKCS12 trust store, as PEM text for ``load_verify_locations(cadata=)``."""
    from cryptography.hazmat.primitives.serialization import Encoding

    key, certs = _load(path, store_type, password, "TLS trust store", want_key=False)
    if key is not None:
        certs = certs[1:]  # a key entry's own certificate is not a trust anchor (Java: trusted entries only)
    if not certs:
        raise SecurityError("the TLS trust store holds no trusted certificate", path=path, type=store_type)
    return "".join(c.public_bytes(Encoding.PEM).decode("ascii") for c in certs)


def load_key_store_into(ctx: ssl.SSLContext, path: str, store_type: str, password: Secret | None) -> None:
    """Load the private key and certificate chain of a JKS/PKCS12 key store into ``ctx``.

    The key passes through a temporary file (``ssl`` reads keys from files only): encrypted with a one-time
    password, mode 0600 in a 0700 directory, deleted before returning whatever happens.
    """
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, Encoding, PrivateFormat

    key, chain = _load(path, store_type, password, "TLS key store", want_key=True)
    if key is None or not chain:
        raise SecurityError("the TLS key store holds no private key with its certificate", path=path, type=store_type)
    one_time = secrets.token_urlsafe(32).encode("ascii")
    pem = b"".join(c.public_bytes(Encoding.PEM) for c in chain)
    pem += key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(one_time))
    tmpdir = tempfile.mkdtemp(prefix="bkspark-tls-")  # 0700
    try:
        tmp = os.path.join(tmpdir, "key.pem")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        try:
            ctx.load_cert_chain(tmp, tmp, password=one_time)
        except ssl.SSLError as exc:
            raise SecurityError("cannot use the key of the TLS key store", path=path, error=str(exc)) from None
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmpdir)
