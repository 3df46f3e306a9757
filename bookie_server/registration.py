"""Cluster membership in ZooKeeper: cookies, registration, read-only mode (BP-41).

Mirrors the Java bookie (``ZKRegistrationManager``, ``LegacyCookieValidation``):

* the cluster must be initialised (``<root>/INSTANCEID`` exists);
* cookies: the cookie built from our configuration must equal the one in
  ``<root>/cookies/<bookieId>`` and in every journal/ledger directory's
  ``current/VERSION``.  A brand-new bookie (no cookie anywhere, empty
  directories) stamps them; any mismatch refuses to start with a message
  naming the field.  The cookie stores the *BookieId*, not the address, so a
  bookie with a custom ``bookieId`` may come back on another host or port;
  one whose id is the legacy ``host:port`` gets a new identity if the port
  changes, and its old cookie no longer matches (as in Java);
* registration: an ephemeral ``<root>/available/<bookieId>`` holding the
  BookieServiceInfo (protobuf) with the ``bookie-rpc`` endpoint at
  ``advertisedAddress:bookiePort``, the ``httpserver`` endpoint when HTTP is
  on, and the property ``bkspark.extensions``.  Read-only mode registers
  ``available/readonly/<bookieId>`` first, then removes the writable node.
  A node left by our previous (crashed) session is waited out as Java does.
* after a ZooKeeper session expiry the registration is re-created.

All calls block (kazoo); the async side calls them in an executor.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from bkspark.config.bookie import BookieConfig
from bkspark.errors import BadMetadataError, CookieMismatchError, InvalidOptionError, MetadataError
from bkspark.metadata.retry import ZK_AUTH_FAILURES, reconnect_forever, zk_error
from bkspark.metadata.znodes import Outcome, ZkClient, Znodes, on_session_lost
from bkspark.protocol import service_info as si
from bkspark.protocol import zk_paths
from bkspark.protocol.bookie_id import BookieId
from bkspark.protocol.cookie import VERSION_FILENAME, Cookie
from bkspark.protocol.layout import LedgerLayout, parse_metadata_service_uri
from bkspark.protocol.service_info import BATCH_READ_V3_EXTENSION, EXTENSIONS_PROPERTY, SCOPE_IDS_EXTENSION
from bkspark.security.tls import tls_enabled
from bkspark.security.zk import ZkSecurity

__all__ = [
    "Registration",
    "EXTENSIONS",
    "check_local_cookies",
    "dirs_for_cookies",
    "dir_is_empty",
    "write_dir_cookie",
]

log = logging.getLogger("bookie_server.registration")

#: The v3 extensions this bookie advertises under EXTENSIONS_PROPERTY (docs/extensions.md), comma-separated.
EXTENSIONS = ",".join((SCOPE_IDS_EXTENSION, BATCH_READ_V3_EXTENSION))


def dirs_for_cookies(conf: BookieConfig) -> list[Path]:
    """Every directory that holds a ``current/VERSION`` cookie (journal and ledger dirs)."""
    seen: list[Path] = []
    for d in [*conf.journalDirectories, *conf.ledgerDirectories]:
        path = Path(d)
        if path not in seen:
            seen.append(path)
    return seen


def _read_dir_cookie(directory: Path) -> Cookie | None:
    path = directory / "current" / VERSION_FILENAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return Cookie.parse(data)
    except BadMetadataError as exc:
        raise CookieMismatchError(f"cookie file {path} cannot be parsed: {exc}") from exc


def dir_is_empty(directory: Path) -> bool:
    """True when ``<directory>/current`` is absent or empty (a brand-new bookie directory)."""
    current = directory / "current"
    if not current.exists():
        return True
    return not any(current.iterdir())


def write_dir_cookie(directory: Path, cookie: Cookie) -> None:
    """Write ``current/VERSION`` atomically (temp file, fsync, rename)."""
    current = directory / "current"
    current.mkdir(parents=True, exist_ok=True)
    tmp = current / (VERSION_FILENAME + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(cookie.serialize())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, current / VERSION_FILENAME)


def check_local_cookies(conf: BookieConfig, master: Cookie, *, stamp_allowed: bool) -> tuple[list[Path], list[Cookie]]:
    """Verify directory cookies against ``master``; return (dirs without a cookie, cookies found)."""
    missing: list[Path] = []
    found: list[Cookie] = []
    for directory in dirs_for_cookies(conf):
        cookie = _read_dir_cookie(directory)
        if cookie is None:
            missing.append(directory)
            continue
        try:
            master.verify(cookie)
        except CookieMismatchError as exc:
            raise CookieMismatchError(
                f"cookie in {directory / 'current' / VERSION_FILENAME} does not match this bookie's configuration: "
                f"{exc}. Refusing to start (was the directory used by another bookie, or the config changed?)"
            ) from exc
        found.append(cookie)
    if missing and not stamp_allowed:
        raise CookieMismatchError(
            f"directories without a cookie: {[str(m) for m in missing]}; this is neither a new bookie "
            "nor an unchanged one. Refusing to start."
        )
    return missing, found


class Registration:
    """One bookie's ZooKeeper session: cookies, registration znodes, layout, GC look-ups."""

    def __init__(self, conf: BookieConfig) -> None:
        if not conf.metadataServiceUri:
            raise InvalidOptionError("metadataServiceUri is not set")
        self.conf = conf
        uri = parse_metadata_service_uri(conf.metadataServiceUri)
        self.root = uri.root
        self.uri_scheme = uri.scheme
        self.bookie_id = str(BookieId.parse(conf.bookie_id()))
        # Reconnect forever, at most 5 s apart: a bookie outlives ZooKeeper outages.
        self.zk = ZkClient(
            hosts=uri.connect_string,
            timeout=max(conf.zkTimeout, 1000) / 1000.0,
            connection_retry=reconnect_forever(max_delay=5.0),
            **ZkSecurity.from_conf(conf.extra).kazoo_kwargs(),  # credentials and ACLs: docs/security.md
        )
        self.nodes = Znodes(self.zk)
        self._lock = threading.RLock()
        self._registered = False
        self._readonly = False
        self._service_info = b""
        self._closing = False

    # -- session ------------------------------------------------------------------------
    def start(self, timeout: float | None = None) -> None:
        """Connect and check that the cluster is initialised.  The connection gets ``timeout`` seconds, by default
        ``zkTimeout``: Apache BookKeeper's bookie waits its session timeout for ZooKeeper, then fails the start."""
        on_session_lost(self.zk, self._on_session_lost, self._on_session_renewed)
        try:
            self.zk.start(timeout=max(self.conf.zkTimeout, 1000) / 1000.0 if timeout is None else timeout)
            initialised = self.nodes.stat(zk_paths.instance_id_path(self.root))
        except ZK_AUTH_FAILURES as exc:
            raise zk_error(exc, uri=self.conf.metadataServiceUri) from None
        if not initialised:
            raise MetadataError(
                f"BookKeeper cluster not initialised at {self.root} (no INSTANCEID): "
                "run `bkspark shell --metadata-service-uri URI initnewcluster` first"
            )

    def close(self) -> None:
        """Unregister (if registered) and end the session."""
        self._closing = True
        try:
            self.unregister()
        finally:
            self.zk.stop()
            self.zk.close()

    def _on_session_lost(self) -> None:  # kazoo's event thread
        log.warning("ZooKeeper session lost; will register again when connected")

    def _on_session_renewed(self) -> None:  # kazoo's event thread: never block it
        if not self._closing:
            threading.Thread(target=self._reregister, name="bookie-reregister", daemon=True).start()

    def _reregister(self) -> None:
        try:
            with self._lock:
                if self._registered:
                    self._create_registration(self._readonly)
            log.info("registered again after session loss")
        except Exception:
            log.exception("re-registration failed")

    # -- cluster facts ------------------------------------------------------------------
    def instance_id(self) -> str:
        """The cluster's INSTANCEID."""
        found = self.nodes.get(zk_paths.instance_id_path(self.root))
        if found is None:
            raise MetadataError(f"no INSTANCEID under {self.root}")
        return found[0].decode("utf-8")

    def layout(self) -> LedgerLayout:
        """The cluster's LAYOUT (raises :class:`MetadataError` when absent)."""
        found = self.nodes.get(zk_paths.layout_path(self.root))
        if found is None:
            raise MetadataError(f"no LAYOUT under {self.root}")
        return LedgerLayout.parse(found[0])

    # -- cookies ------------------------------------------------------------------------
    def check_cookies(self) -> Cookie:
        """Verify (or, for a new bookie, stamp) the ZooKeeper and directory cookies."""
        master = Cookie.generate(
            self.bookie_id, self.conf.journalDirectories, self.conf.ledgerDirectories, self.instance_id()
        )
        path = zk_paths.cookie_path(self.root, self.bookie_id)
        found = self.nodes.get(path)
        zk_cookie = None if found is None else Cookie.parse(found[0])
        if zk_cookie is not None:
            try:
                master.verify(zk_cookie)
            except CookieMismatchError as exc:
                raise CookieMismatchError(
                    f"cookie of {self.bookie_id} in ZooKeeper ({path}) does not match this bookie's "
                    f"configuration: {exc}. Refusing to start."
                ) from exc
        missing, _found = check_local_cookies(self.conf, master, stamp_allowed=zk_cookie is None)
        if missing:
            if zk_cookie is not None:
                raise CookieMismatchError(
                    f"directories without a cookie: {[str(m) for m in missing]} while ZooKeeper has one for "
                    f"{self.bookie_id}; refusing to start (storage expansion is not supported)"
                )
            not_empty = [str(m) for m in missing if not dir_is_empty(m)]
            if not_empty:
                raise CookieMismatchError(
                    f"new bookie {self.bookie_id} but these directories already hold data: {not_empty}; "
                    "refusing to start"
                )
            for directory in missing:
                write_dir_cookie(directory, master)
            self.nodes.ensure_path(zk_paths.cookies_path(self.root))
            if self.nodes.create(path, master.serialize()) is Outcome.NODE_EXISTS:
                raise CookieMismatchError(f"another bookie stamped {path} concurrently")
            log.info("stamped new cookies for %s", self.bookie_id)
        elif zk_cookie is None:
            raise CookieMismatchError(
                f"cookie for {self.bookie_id} is not stored in ZooKeeper ({path}) but the directories have one; "
                "refusing to start"
            )
        return master

    # -- registration -------------------------------------------------------------------
    def service_info(self, port: int, http_port: int | None) -> bytes:
        """Our BookieServiceInfo: bookie-rpc endpoint, http endpoint, extension property."""
        host = self.conf.advertised_host()
        # BookieService.publishInfo: extension "tls" when a TLS provider factory is configured.
        tls = ("tls",) if tls_enabled(self.conf.extra) else ()
        endpoints = [si.Endpoint("bookie", host, port, si.BOOKIE_RPC, (), tls)]
        if http_port is not None:
            endpoints.append(si.Endpoint("httpserver", host, http_port, si.HTTP))
        info = si.BookieServiceInfo(tuple(endpoints), {EXTENSIONS_PROPERTY: EXTENSIONS})
        return si.serialize(info)

    def register(self, port: int, http_port: int | None, readonly: bool) -> None:
        """Create the registration znode (writable or read-only)."""
        with self._lock:
            self._service_info = self.service_info(port, http_port)
            self._readonly = readonly
            self._create_registration(readonly)
            self._registered = True
        log.info("registered %s (%s)", self.bookie_id, "read-only" if readonly else "writable")

    def _path(self, readonly: bool) -> str:
        return zk_paths.bookie_registration_path(self.root, self.bookie_id, readonly)

    def _create_ephemeral(self, path: str) -> None:
        deadline = time.monotonic() + max(self.conf.zkTimeout, 1000) / 1000.0 * 2
        while self.nodes.create(path, self._service_info, makepath=True, ephemeral=True) is not Outcome.OK:
            stat = self.nodes.stat(path)
            if stat is None:
                continue  # gone meanwhile: create it again
            if self.nodes.owns(stat):
                if self.nodes.set(path, self._service_info) is not None:
                    return
                continue  # gone meanwhile: create it again
            if time.monotonic() >= deadline:
                raise MetadataError(
                    f"{path} is held by another ZooKeeper session: is bookie {self.bookie_id} already running?"
                ) from None
            # Left by our previous incarnation: wait for its session to expire (as Java does).
            time.sleep(0.5)

    def _delete(self, path: str) -> None:
        stat = self.nodes.stat(path)
        if stat is not None and self.nodes.owns(stat):
            self.nodes.delete(path)

    def _create_registration(self, readonly: bool) -> None:
        if readonly:
            self.nodes.ensure_path(zk_paths.readonly_path(self.root))
            self._create_ephemeral(self._path(True))
            self._delete(self._path(False))
        else:
            self._create_ephemeral(self._path(False))
            self._delete(self._path(True))

    def set_readonly(self, readonly: bool) -> None:
        """Move the registration between ``available`` and ``available/readonly``."""
        with self._lock:
            self._readonly = readonly
            if self._registered:
                self._create_registration(readonly)
        log.info("bookie %s is now %s", self.bookie_id, "read-only" if readonly else "writable")

    def unregister(self) -> None:
        """Remove our registration znodes (clean shutdown)."""
        with self._lock:
            if not self._registered:
                return
            self._registered = False
            if self.zk.connected:
                self._delete(self._path(False))
                self._delete(self._path(True))
