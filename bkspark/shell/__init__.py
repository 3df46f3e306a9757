"""``bkspark shell``: BookKeeper's shell commands plus BP-44's, over bkspark's client (see docs/shell.md)."""

from __future__ import annotations

import argparse

from bkspark.config.typed import DEFAULT_ACK_QUORUM_SIZE, DEFAULT_ENSEMBLE_SIZE, DEFAULT_WRITE_QUORUM_SIZE
from bkspark.shell.common import Output, ShellError, add_common_options, add_ledger_options

__all__ = ["register", "run", "ShellError"]


def _progress_option(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--progress", dest="progress", action="store_true", default=None,
        help="always show a progress line on stderr (default: only when stderr is a terminal)",
    )
    group.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress")


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``shell`` and its commands to the top-level parser."""
    shell = subparsers.add_parser(
        "shell",
        help="inspect and administer ledgers, bookies and the orphan audit",
        description="BookKeeper shell commands (Java's names and flags) and BP-44's ledger context commands.",
    )
    add_common_options(shell, top=True)
    commands = shell.add_subparsers(dest="shell_command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str, **kwargs: object) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help_text, description=help_text, **kwargs)  # type: ignore[arg-type]
        add_common_options(parser)
        return parser

    p = command("listorphaned", "list the orphaned ledgers the last audit recorded")
    p.add_argument(
        "--printorphanreason", "-printorphanreason", action="store_true",
        help="print each reason: LEDGER DELETE_OVERDUE <delete time, s>, LEDGER BROKEN_PARENT_REF <parent> "
        "or LEDGER DATASET_LEFTOVER <parent>",
    )
    add_ledger_options(p, scope_only=True)

    p = command("showowner", "show who created a ledger and for which data set (JSON)")
    add_ledger_options(p)

    p = command("predictlifespan", "predict a ledger's lifespan from its create and close context (JSON)")
    add_ledger_options(p)

    p = command("listledgers", "list all ledgers of a scope (this may take a long time)")
    p.add_argument("-m", "--meta", "-meta", dest="meta", action="store_true", help="print metadata")
    p.add_argument("-bookieid", "--bookieid", dest="bookieid", metavar="BOOKIE", help="only ledgers stored on this bookie")
    add_ledger_options(p, scope_only=True)
    _progress_option(p)

    p = command("ledgermetadata", "print the metadata of a ledger")
    add_ledger_options(p)

    p = command("readledger", "read a range of entries from a ledger")
    add_ledger_options(p)
    p.add_argument("start", nargs="?", metavar="START", help="first entry id (default 0)")
    p.add_argument("end", nargs="?", metavar="END", help="last entry id (default: the last add confirmed)")
    p.add_argument("-fe", "--firstentryid", dest="firstentryid", metavar="ENTRY", help="first entry id")
    p.add_argument("-le", "--lastentryid", dest="lastentryid", metavar="ENTRY", help="last entry id (-1: up to the LAC)")
    p.add_argument("-m", "--msg", dest="msg", action="store_true", help="print message bodies")
    p.add_argument(
        "-r", "--force-recovery", dest="force_recovery", action="store_true",
        help="recover (fence and close) the ledger before reading",
    )
    _progress_option(p)

    p = command("deleteledger", "delete a ledger")
    add_ledger_options(p)
    p.add_argument("-f", "--force", dest="force", action="store_true", help="delete without asking")
    p.add_argument(
        "--even-if-held", dest="even_if_held", action="store_true",
        help="also delete a ledger a dataset manifest names (or a job parent it names) or a running Spark write "
        "job registered: its rows are lost",
    )

    p = command("listbookies", "list the bookies, writable and/or read-only", add_help=False)
    p.add_argument("--help", action="help", help="show this help message and exit")
    p.add_argument("-rw", "--readwrite", dest="readwrite", action="store_true", help="writable bookies")
    p.add_argument("-ro", "--readonly", dest="readonly", action="store_true", help="read-only bookies")
    p.add_argument("-a", "--all", dest="all", action="store_true", help="all bookies (the default)")
    p.add_argument("-h", "--hostnames", dest="hostnames", action="store_true", help="also print each bookie's address")
    p.add_argument(
        "-l", "--location", dest="location", action="store_true",
        help="also print each bookie's network location (/region/rack) as the configured placement policy "
        "resolves it (--conf ensemblePlacementPolicy=..., networkTopologyScriptFileName=..., reppDnsResolverClass=...)",
    )

    command("bookieinfo", "free and total disk space of every bookie")

    p = command("simpletest", "create a ledger, write entries, read them back, delete it")
    p.add_argument("-e", "--ensemble", dest="ensemble", default=str(DEFAULT_ENSEMBLE_SIZE),
                   help=f"ensemble size (default {DEFAULT_ENSEMBLE_SIZE})")
    p.add_argument("-w", "--writeQuorum", dest="writeQuorum", default=str(DEFAULT_WRITE_QUORUM_SIZE),
                   help=f"write quorum size (default {DEFAULT_WRITE_QUORUM_SIZE})")
    p.add_argument("-a", "--ackQuorum", dest="ackQuorum", default=str(DEFAULT_ACK_QUORUM_SIZE),
                   help=f"ack quorum size (default {DEFAULT_ACK_QUORUM_SIZE})")
    p.add_argument("-n", "--numEntries", dest="numEntries", default="1000", help="entries to write (default 1000)")
    _progress_option(p)

    p = command("auditconfig", "show or change the orphan audit's period and grace period")
    p.add_argument("--audit-period", dest="audit_period", type=float, metavar="SECONDS", help="seconds between audits")
    p.add_argument(
        "--grace-period", dest="grace_period", type=float, metavar="SECONDS",
        help="seconds a ledger may outlive its expectDeleteAfter before it counts as orphaned",
    )
    p.add_argument(
        "--parent-grace-period", dest="parent_grace_period", type=float, metavar="SECONDS",
        help="age a child ledger must reach before a missing parent counts as BROKEN_PARENT_REF",
    )

    command("auditstatus", "show the running auditors and the last audit pass")

    def interactive_flags(parser: argparse.ArgumentParser, what: str) -> None:
        parser.add_argument(
            "-n", "--nonInteractive", "-nonInteractive", dest="non_interactive", action="store_true",
            help=f"never ask; without -f, leave existing {what} alone and fail",
        )
        parser.add_argument(
            "-f", "--force", "-force", dest="force", action="store_true",
            help=f"with -n: delete existing {what} without asking",
        )

    command(
        "initnewcluster",
        "initialize a new cluster: its ledgers root, registration nodes, INSTANCEID and LAYOUT (fails if the root "
        "exists: nukeexistingcluster it first)",
    )
    p = command("metaformat", "format the cluster's metadata in ZooKeeper: deletes every ledger and cookie")
    interactive_flags(p, "metadata")
    p = command("nukeexistingcluster", "delete the cluster's metadata, root included (no bookie may be running)")
    p.add_argument(
        "-p", "--zkledgersrootpath", "-zkledgersrootpath", dest="zkledgersrootpath", required=True, metavar="PATH",
        help="the cluster's ledgers root path, as a check (must match the metadataServiceUri's)",
    )
    p.add_argument(
        "-i", "--instanceid", "-instanceid", dest="instanceid", metavar="INSTANCEID",
        help="the cluster's instance id, as a check (or -f)",
    )
    p.add_argument("-f", "--force", "-force", dest="force", action="store_true", help="nuke without the instance id check")
    p = command(
        "bookieformat",
        "format a stopped bookie's journal and ledger directories (and with -d its cookie in ZooKeeper)",
    )
    p.add_argument(
        "--bookie-conf", dest="bookie_conf", required=True, metavar="FILE",
        help="the bookie's configuration (bk_server.conf keys: journalDirectories, ledgerDirectories, "
        "metadataServiceUri, bookieId/bookiePort ...)",
    )
    interactive_flags(p, "bookie data")
    p.add_argument(
        "-d", "--deleteCookie", "-deleteCookie", dest="delete_cookie", action="store_true",
        help="also delete the bookie's cookie in ZooKeeper, so that it can join again as a new bookie",
    )

    p = command(
        "recoverjobs",
        "finish the Spark write jobs a crash left: clean up committed ones, abort the others (docs/connector.md)",
    )
    p.add_argument("--dataset", dest="dataset", metavar="NAME", help="only the jobs of this dataset")
    p.add_argument(
        "--stale-after", dest="stale_after", type=float, default=3600.0, metavar="SECONDS",
        help="abort a job still writing once its record is this old (default 3600; a live job's commit then fails)",
    )

    command(
        "listdatasets",
        "list the cluster's datasets (committed Spark output): ledgers, rows, bytes, jobs, last commit",
    )
    p = command("showdataset", "show one dataset: its ledgers, rows, bytes, write jobs and last commit")
    p.add_argument("name", metavar="NAME", help="the dataset's name (the connector's `dataset` option)")

    shell.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the chosen shell command; errors propagate to ``bkspark.cli`` for the one-line report."""
    from bkspark.shell.commands import COMMANDS  # the client and placement: only when a command runs

    return COMMANDS[args.shell_command](args, Output(args))
