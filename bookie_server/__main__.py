"""``bookie-server`` / ``python -m bookie_server``: run one Python bookie.

    bookie-server --conf bookie.conf [--bookiePort 3181] [--bookieId my-bookie-1]
                  [--advertisedAddress 10.0.0.5] [--metadataServiceUri zk+hierarchical://zk:2181/ledgers]
                  [--journalDirectories /d/journal] [--ledgerDirectories /d/ledgers]
                  [--httpServerPort 8000] [-D key=value ...]

The conf file uses Apache BookKeeper's key names (bk_server.conf); flags win
over the file.  Logs are JSON lines on stderr.  A bookie that cannot start
(a cookie mismatch, a port in use, an unreachable ZooKeeper) ends with one
plain line on stderr, ``bookie-server: error: cannot start: ...``, and exit
status 1; ``--log-level DEBUG`` adds the traceback as a log record.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Sequence

from bkspark.config.bookie import load_conf
from bkspark.errors import BKError, one_line

from bookie_server.app import run

__all__ = ["main", "JsonFormatter"]

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per log line: time, level, logger, message and any ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bookie-server", description="A standalone Python Apache BookKeeper bookie.")
    p.add_argument("--conf", "-c", help="bk_server.conf-style configuration file")
    for key in (
        "bookiePort",
        "bookieId",
        "advertisedAddress",
        "metadataServiceUri",
        "journalDirectories",
        "ledgerDirectories",
        "httpServerPort",
    ):
        p.add_argument(f"--{key}", dest=key)
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="KEY=VALUE", help="any other setting")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    return p


def _version() -> str:
    """bkspark's version (the bookie ships in the same distribution; bkspark/__init__.py is its one home)."""
    from bkspark import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    overrides: dict[str, object] = {}
    for define in args.defines:
        key, sep, value = define.partition("=")
        if not sep:
            print(f"bookie-server: -D needs KEY=VALUE, got {define!r}", file=sys.stderr)
            return 2
        overrides[key.strip()] = value.strip()
    for key in ("bookiePort", "bookieId", "advertisedAddress", "metadataServiceUri", "journalDirectories",
                "ledgerDirectories", "httpServerPort"):
        value = getattr(args, key)
        if value is not None:
            overrides[key] = value
    if args.httpServerPort is not None:
        overrides["httpServerEnabled"] = "true"
    try:
        conf = load_conf(args.conf, overrides)
    except BKError as exc:
        print(f"bookie-server: {exc}", file=sys.stderr)
        return 2
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler], force=True)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        return asyncio.run(run(conf))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - whatever stopped the start, the user gets one line
        logging.getLogger("bookie_server").debug("bookie failed to start", exc_info=True)
        # Our errors say what went wrong in words; anyone else's (OSError, kazoo's) also need their type.
        what = one_line(exc) if isinstance(exc, BKError) else f"{type(exc).__name__}: {one_line(exc)}"
        if type(exc).__module__.startswith("kazoo."):  # its timeouts are no KazooException
            what = f"ZooKeeper of {conf.metadataServiceUri}: {what}"
        print(f"bookie-server: error: cannot start: {what}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
