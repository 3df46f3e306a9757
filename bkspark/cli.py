"""The ``bkspark`` console script: a dispatcher over subcommands (``shell``, ``auditor``, ``cluster``).

Each subcommand registers itself through a function in :data:`REGISTRARS`
(``register(subparsers)``, setting ``handler`` on its parser); ``main`` parses,
calls the handler and turns every expected failure into one line on stderr
and a non-zero exit status, never a traceback:

* 2: bad usage (argparse's own errors, bad flag values, a bad ledger name or URI);
* 1: the operation failed (unknown ledger, unreachable ZooKeeper, malformed
  metadata or context stored by someone else, a bookie error ...);
* 130: interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from bkspark import __version__
from bkspark.errors import BKError, InvalidOptionError, one_line

__all__ = ["main", "build_parser", "REGISTRARS"]

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def _register_shell(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from bkspark.shell import register

    register(subparsers)


def _register_cluster(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from bkspark.devcluster.cli import register

    register(subparsers)


def _register_auditor(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "auditor",
        help="run an orphan-ledger auditor (leader-elected among all running auditors)",
        description=(
            "Join the orphan-audit election; the leader scans every ledger each audit period and records orphans "
            "under <root>/bkspark/audit/orphans. The period and grace period stored with `bkspark shell auditconfig` "
            "override the flags below, and changes apply while running."
        ),
    )
    parser.add_argument(
        "--metadata-service-uri", "--metadataServiceUri", dest="metadata_service_uri", metavar="URI",
        help="the cluster (default: $BKSPARK_METADATA_SERVICE_URI)",
    )
    parser.add_argument("--audit-period", type=float, default=300.0, metavar="SECONDS", help="default 300")
    parser.add_argument("--grace-period", type=float, default=3600.0, metavar="SECONDS", help="default 3600")
    parser.add_argument(
        "--parent-grace-period", type=float, default=0.0, metavar="SECONDS",
        help="age a child ledger must reach before a missing parent counts (default 0)",
    )
    parser.add_argument("--id", dest="identifier", metavar="NAME", help="this auditor's name (default host:pid:random)")
    parser.add_argument(
        "--zk-timeout", type=float, default=10.0, metavar="SECONDS",
        help="ZooKeeper session timeout: how long a crashed leader holds the leadership (default 10)",
    )
    parser.add_argument(
        "--client-conf", dest="client_conf", metavar="FILE",
        help="client configuration (ZooKeeper credentials and zkEnableSecurity: docs/security.md)",
    )
    parser.add_argument("--conf", action="append", metavar="KEY=VALUE", help="one client setting (repeatable)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.set_defaults(handler=_run_auditor)


def _run_auditor(args: argparse.Namespace) -> int:
    from bkspark.audit import Auditor
    from bkspark.security.zk import ZkSecurity
    from bkspark.shell.common import client_conf, metadata_service_uri

    uri = metadata_service_uri(args)
    # Log lines are the auditor's output: to stderr for as long as it runs (removed after, for embedders and tests).
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    old_level = root.level
    kazoo_log = logging.getLogger("kazoo")
    old_kazoo_level = kazoo_log.level
    root.addHandler(handler)
    root.setLevel(getattr(logging, args.log_level))
    kazoo_log.setLevel(max(logging.WARNING, root.level))  # its connection chatter is not ours to report
    try:
        auditor = Auditor(
            uri,
            identifier=args.identifier,
            audit_period=args.audit_period,
            grace_period=args.grace_period,
            parent_grace_period=args.parent_grace_period,
            session_timeout=args.zk_timeout,
            zk_security=ZkSecurity.from_conf(client_conf(args)),
        )

        def on_signal(signum: int, _frame: Any) -> None:
            auditor.request_stop()  # run_forever returns; stop() below closes the session

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            auditor.run_forever()
        finally:
            auditor.stop()
            for sig, old in previous.items():
                signal.signal(sig, old)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        kazoo_log.setLevel(old_kazoo_level)
    return 0


REGISTRARS: list[Registrar] = [
    _register_shell,
    _register_auditor,
    _register_cluster,
]


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line on stderr (exit 2), pointing at ``--help``.

    Subparsers inherit the class, so every level of the command line behaves the same.
    """

    def error(self, message: str) -> "NoReturn":  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: ``bkspark <subcommand> ...``."""
    parser = OneLineParser(prog="bkspark", description="bkspark: Apache BookKeeper tools in Python.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="SUBCOMMAND", required=True)
    for register in REGISTRARS:
        register(subparsers)
    return parser


def _prog(args: argparse.Namespace | None) -> str:
    if args is None:
        return "bkspark"
    parts = ["bkspark", getattr(args, "command", None), getattr(args, "shell_command", None)]
    return " ".join(p for p in parts if p)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    parser = build_parser()
    args: argparse.Namespace | None = None
    # Library log lines (kazoo's connection chatter) are not a command's output: the auditor
    # configures logging itself; elsewhere they stay silent and errors are reported once, below.
    logging.getLogger().addHandler(logging.NullHandler())
    try:
        args = parser.parse_args(argv)
        return int(args.handler(args) or 0)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2, already printed)
        return exc.code if isinstance(exc.code, int) else 2
    except KeyboardInterrupt:
        print(f"{_prog(args)}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bkspark shell listledgers | head`
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return 0
    except Exception as exc:
        from bkspark.metadata.znodes import ZK_FAILURES
        from bkspark.shell.common import ShellError

        if isinstance(exc, ShellError):
            print(f"{_prog(args)}: error: {one_line(exc)}", file=sys.stderr)
            return exc.exit_code
        if isinstance(exc, BKError):
            print(f"{_prog(args)}: error: {one_line(exc)}", file=sys.stderr)
            return 2 if isinstance(exc, InvalidOptionError) else 1
        if isinstance(exc, ZK_FAILURES):
            print(f"{_prog(args)}: error: ZooKeeper: {type(exc).__name__} {one_line(exc)}".rstrip(), file=sys.stderr)
            return 1
        if isinstance(exc, (OSError, TimeoutError)):
            print(f"{_prog(args)}: error: {type(exc).__name__}: {one_line(exc)}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
