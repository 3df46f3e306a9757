"""What every ``bkspark shell`` command shares: options, ledger names, connections, output, progress.

Errors a user can cause (a bad flag value, an unknown ledger, an unreachable
ZooKeeper, someone else's malformed context) surface as :class:`ShellError`
or a :class:`~bkspark.errors.BKError`; ``bkspark.cli`` prints them as one line
on stderr and exits non-zero.  No command lets a traceback through.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from bkspark.errors import InvalidOptionError
from bkspark.properties import parse_properties
from bkspark.protocol.layout import MetadataServiceUri, parse_metadata_service_uri
from bkspark.protocol.ledger_name import parse_qualified_name, qualified_name
from bkspark.protocol.values import INT64_MAX, INT64_MIN
from bkspark.security.zk import ZkSecurity

if TYPE_CHECKING:
    from bkspark.metadata.store import ZkMetadataStore

__all__ = [
    "ENV_URI",
    "ShellError",
    "LedgerName",
    "add_common_options",
    "add_ledger_options",
    "resolve_ledger",
    "metadata_service_uri",
    "given_metadata_service_uri",
    "client_conf",
    "open_store",
    "open_zookeeper",
    "confirm",
    "read_answer",
    "open_client",
    "Output",
    "Progress",
    "parse_int",
]

ENV_URI = "BKSPARK_METADATA_SERVICE_URI"


class ShellError(Exception):
    """A user-facing failure of a shell command: printed as one line, exit status ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def parse_int(text: str, what: str, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    """A decimal integer within bounds, or a :class:`ShellError` naming ``what``."""
    try:
        value = int(str(text).strip(), 10)
    except (TypeError, ValueError):
        raise ShellError(f"bad {what} {text!r}: expected a decimal integer", 2) from None
    if not minimum <= value <= maximum:
        raise ShellError(f"bad {what} {value}: must be in [{minimum}, {maximum}]", 2)
    return value


def add_common_options(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``--metadata-service-uri``, ``--zk-timeout`` and ``--json``, accepted before or after the command name."""
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--metadata-service-uri",
        "--metadataServiceUri",
        dest="metadata_service_uri",
        default=default,
        metavar="URI",
        help=f"the cluster, e.g. zk+hierarchical://127.0.0.1:2181/ledgers (default: ${ENV_URI})",
    )
    parser.add_argument(
        "--zk-timeout",
        dest="zk_timeout",
        type=float,
        default=10.0 if top else argparse.SUPPRESS,
        metavar="SECONDS",
        help="ZooKeeper session/connect timeout (default 10)",
    )
    parser.add_argument(
        "--json", dest="json", action="store_true", default=False if top else argparse.SUPPRESS,
        help="machine-readable JSON output",
    )
    # Given before and after the command name, both lists count (the later ones win), so they get two dests.
    parser.add_argument(
        "--client-conf", "--conf-file", dest="client_conf_top" if top else "client_conf",
        default=None if top else argparse.SUPPRESS, metavar="FILE",
        help="a BookKeeper client configuration file (Java properties: key=value lines), e.g. client.conf",
    )
    parser.add_argument(
        "--conf", dest="conf_top" if top else "conf", action="append", default=[] if top else argparse.SUPPRESS,
        metavar="KEY=VALUE",
        help="one client configuration setting under BookKeeper's name (repeatable; overrides --client-conf), "
        "e.g. --conf ensemblePlacementPolicy=rackaware --conf networkTopologyScriptFileName=/etc/topology.sh",
    )


@dataclass(frozen=True)
class LedgerName:
    """A ledger named on the command line: BP-35 scope and id."""

    ledger_id: int
    scope_id: int = 0

    @property
    def label(self) -> str:
        """The id in scope 0, ``<id> (scope <s>, <qualified name>)`` elsewhere."""
        if self.scope_id == 0:
            return str(self.ledger_id)
        return f"{self.ledger_id} (scope {self.scope_id}, {qualified_name(self.scope_id, self.ledger_id)})"

    def to_json(self) -> dict[str, Any]:
        return {
            "ledgerId": self.ledger_id,
            "scopeId": self.scope_id,
            "qualifiedName": qualified_name(self.scope_id, self.ledger_id),
        }


def add_ledger_options(
    parser: argparse.ArgumentParser, *, positional: bool = True, flag: bool = True, scope_only: bool = False
) -> None:
    """The ledger arguments: ``LEDGER`` and/or ``-l/--ledgerid`` (Java's), plus BP-35's two flags."""
    if not scope_only:
        if positional:
            parser.add_argument("ledger", nargs="?", metavar="LEDGER", help="ledger id (decimal)")
        if flag:
            parser.add_argument("-l", "--ledgerid", "-ledgerid", dest="ledgerid", metavar="LEDGER", help="ledger id (decimal)")
    parser.add_argument(
        "--ledger-scope-id", "--ledgerScopeId", dest="ledger_scope_id", metavar="SCOPE",
        help="BP-35 scope id (the high 64 bits of a 128-bit ledger id; default 0)",
    )
    if not scope_only:
        parser.add_argument(
            "--ledger-qualified-name", "--ledgerQualifiedName", dest="ledger_qualified_name", metavar="HEX",
            help="BP-35 128-bit ledger name: 32 hex digits (scope then id), optionally 0x-prefixed or UUID-dashed",
        )


def resolve_scope(args: argparse.Namespace) -> int:
    """The ``--ledger-scope-id`` value (0 if absent)."""
    raw = getattr(args, "ledger_scope_id", None)
    return 0 if raw is None else parse_int(raw, "ledger scope id", INT64_MIN, INT64_MAX)


def resolve_ledger(args: argparse.Namespace) -> LedgerName:
    """The one ledger a command names, from any consistent mix of its ledger arguments."""
    positional = getattr(args, "ledger", None)
    flag = getattr(args, "ledgerid", None)
    qname = getattr(args, "ledger_qualified_name", None)
    if positional is not None and flag is not None and positional != flag:
        raise ShellError(f"two different ledgers given: {positional!r} and -l {flag!r}", 2)
    raw = positional if positional is not None else flag
    scope_given = getattr(args, "ledger_scope_id", None) is not None
    if qname is not None:
        try:
            scope_id, ledger_id = parse_qualified_name(qname)
        except InvalidOptionError as exc:
            raise ShellError(str(exc), 2) from None
        if raw is not None and parse_int(raw, "ledger id") != ledger_id:
            raise ShellError(f"ledger id {raw} does not match --ledger-qualified-name {qname}", 2)
        if scope_given and resolve_scope(args) != scope_id:
            raise ShellError(f"--ledger-scope-id does not match --ledger-qualified-name {qname}", 2)
        return LedgerName(ledger_id, scope_id)
    if raw is None:
        raise ShellError("no ledger given: pass LEDGER, -l LEDGER or --ledger-qualified-name HEX", 2)
    return LedgerName(parse_int(raw, "ledger id"), resolve_scope(args))


def client_conf(args: argparse.Namespace) -> dict[str, str]:
    """Client settings from ``--client-conf FILE`` then every ``--conf KEY=VALUE`` (later ones win).

    Keys keep BookKeeper's names (``ensemblePlacementPolicy``,
    ``networkTopologyScriptFileName`` ...); values stay strings, as in a
    ``client.conf``, and the client and the placement policy parse them.
    """
    conf: dict[str, str] = {}
    for attr in ("client_conf_top", "client_conf"):
        path = getattr(args, attr, None)
        if path:
            try:
                with open(path, encoding="utf-8") as handle:
                    conf.update(parse_properties(handle.read()))
            except OSError as exc:
                raise ShellError(f"cannot read client configuration {path}: {exc.strerror or exc}", 2) from None
            except UnicodeDecodeError:
                raise ShellError(f"client configuration {path} is not UTF-8 text", 2) from None
    for attr in ("conf_top", "conf"):
        for item in getattr(args, attr, None) or []:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ShellError(f"bad --conf {item!r}: expected KEY=VALUE", 2)
            conf[key.strip()] = value.strip()
    return conf


def given_metadata_service_uri(args: argparse.Namespace) -> str | None:
    """The cluster given: the flag, else the client configuration's ``metadataServiceUri``, else the environment;
    None when none is (a command that can work without a cluster asks this)."""
    return (
        getattr(args, "metadata_service_uri", None)
        or client_conf(args).get("metadataServiceUri")
        or os.environ.get(ENV_URI)
        or None
    )


def metadata_service_uri(args: argparse.Namespace) -> str:
    """The cluster to talk to (:func:`given_metadata_service_uri`); a :class:`ShellError` when none is given."""
    uri = given_metadata_service_uri(args)
    if not uri:
        raise ShellError(f"no cluster given: pass --metadata-service-uri URI or set ${ENV_URI}", 2)
    return uri


@contextmanager
def open_store(args: argparse.Namespace) -> Iterator[ZkMetadataStore]:
    """A metadata store on the cluster's ZooKeeper (never creates LAYOUT: the shell only looks)."""
    from bkspark.metadata.store import ZkMetadataStore  # kazoo and the metadata layer: only when a command runs

    store = ZkMetadataStore(
        metadata_service_uri(args),
        session_timeout=float(getattr(args, "zk_timeout", 10.0)),
        create_layout=False,
        zk_security=ZkSecurity.from_conf(client_conf(args)),
    )
    try:
        yield store
    finally:
        store.close()


@contextmanager
def open_zookeeper(args: argparse.Namespace, uri: str | None = None) -> Iterator[tuple[Any, MetadataServiceUri]]:
    """A started kazoo client on the cluster's ZooKeeper and the parsed URI, for commands that create or delete
    the cluster itself (no LAYOUT needed, unlike :func:`open_store`)."""
    from bkspark.metadata.znodes import ZkClient  # kazoo: only when a command runs

    parsed = parse_metadata_service_uri(uri or metadata_service_uri(args))
    timeout = float(getattr(args, "zk_timeout", 10.0))
    # The same credentials and ACL policy as every other client of the cluster (docs/security.md).
    zk = ZkClient(hosts=parsed.connect_string, timeout=timeout, **ZkSecurity.from_conf(client_conf(args)).kazoo_kwargs())
    try:
        zk.start(timeout=timeout)
    except Exception:  # kazoo raises a bare timeout
        zk.close()
        raise ShellError(f"cannot connect to ZooKeeper at {parsed.connect_string}") from None
    try:
        yield zk, parsed
    finally:
        zk.stop()
        zk.close()


def read_answer(prompt: str) -> str | None:
    """One line typed after ``prompt`` (stripped, lower case); None at the end of input (Ctrl-D), which
    ``input`` reports as an ``EOFError`` that would otherwise escape as a traceback."""
    try:
        return input(prompt).strip().lower()
    except EOFError:
        print(file=sys.stdout)  # end the prompt's line, as the typed Enter would have
        return None


def confirm(question: str) -> bool:
    """Ask ``question (Y or N)`` on the terminal until answered, as Java's ``IOUtils.confirmPrompt``.

    Without a terminal there is no one to ask: a :class:`ShellError` says which flag skips the question.
    """
    if not sys.stdin.isatty():
        raise ShellError(
            f"{question} -- stdin is not a terminal to confirm on; pass -n/--nonInteractive and -f/--force", 2
        )
    while True:
        answer = read_answer(f"{question} (Y or N) ")
        if answer is None:  # end of input (Ctrl-D): no one said yes
            return False
        if answer in ("y", "yes"):
            return True
        if answer in ("n", "no"):
            return False


@contextmanager
def open_client(args: argparse.Namespace, **conf: Any) -> Iterator[Any]:
    """A :class:`bkspark.client.BookKeeper` for commands that talk to bookies."""
    from bkspark.client import BookKeeper  # the client is heavier: import only when a command needs it

    settings: dict[str, Any] = {k: v for k, v in client_conf(args).items() if k != "metadataServiceUri"}
    settings.update(conf)
    bk = BookKeeper(metadata_service_uri(args), settings, zkTimeout=float(getattr(args, "zk_timeout", 10.0)))
    try:
        yield bk
    finally:
        bk.close()


class Output:
    """Writes a command's result as text or JSON (``--json``)."""

    def __init__(self, args: argparse.Namespace, stream: TextIO | None = None) -> None:
        self.json = bool(getattr(args, "json", False))
        self.stream = stream or sys.stdout

    def line(self, text: str = "") -> None:
        self.stream.write(text + "\n")

    def document(self, obj: Any) -> None:
        """One JSON document (compact with ``--json``, the seed's pretty style otherwise)."""
        if self.json:
            self.stream.write(json.dumps(obj, sort_keys=False, separators=(",", ":")) + "\n")
        else:
            self.stream.write(json.dumps(obj, indent=4, separators=(",", " : ")) + "\n")


class Progress:
    """A one-line progress indicator on stderr for long scans (only when stderr is a terminal, or forced)."""

    def __init__(self, what: str, enabled: bool | None = None, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.what = what
        self._last = 0.0
        self._shown = False

    def __call__(self, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done != total and now - self._last < 0.2:
            return
        self._last = now
        if total:
            width = 30
            filled = int(width * done / total)
            text = f"\r{self.what} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}"
        else:
            text = f"\r{self.what} {done}"
        self.stream.write(text)
        self.stream.flush()
        self._shown = True

    def finish(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
