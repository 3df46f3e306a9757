"""``bkspark shell listdatasets`` and ``showdataset NAME``: :mod:`bkspark.shell.datasets` on the command line."""

from __future__ import annotations

import argparse
import time

from bkspark.shell.common import Output, ShellError, open_store
from bkspark.shell.datasets import DatasetSummary, summarize, summarize_all

__all__ = ["cmd_listdatasets", "cmd_showdataset"]


def _when(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _rows(summary: DatasetSummary) -> str:
    return str(summary.rows) if summary.rows is not None else f">={summary.rows_at_least}"


def cmd_listdatasets(args: argparse.Namespace, out: Output) -> int:
    """One line per dataset (a JSON list with ``--json``)."""
    with open_store(args) as store:
        summaries = summarize_all(store)
    if out.json:
        out.document([s.to_json() for s in summaries])
        return 0
    out.line("dataset\tledgers\trows\tbytes\tjobs\tlast commit")
    for s in summaries:
        out.line(f"{s.name}\t{s.ledgers}\t{_rows(s)}\t{s.bytes}\t{len(s.jobs)}\t{_when(s.last_commit_ms)}")
    return 0


def cmd_showdataset(args: argparse.Namespace, out: Output) -> int:
    """One dataset in detail; a dataset the cluster does not have is an error (exit 1)."""
    from bkspark.datasource.options import check_dataset_name
    from bkspark.errors import InvalidOptionError

    try:
        check_dataset_name(args.name, "NAME")
    except InvalidOptionError as exc:
        raise ShellError(str(exc), 2) from None
    with open_store(args) as store:
        s = summarize(store, args.name)
    if s is None:
        raise ShellError(f"no dataset named {args.name!r} in this cluster (listdatasets lists them)")
    if out.json:
        out.document(s.to_json())
        return 0
    out.line(f"dataset: {s.name}")
    out.line(f"committed: {'yes' if s.committed else 'no (its first write job has not committed)'}")
    out.line(f"ledgers: {s.ledgers}")
    out.line(f"entries: {s.entries}")
    if s.rows is not None:
        out.line(f"rows: {s.rows}")
    else:
        out.line(f"rows: at least {s.rows_at_least} ({s.packed_ledgers} ledger(s) pack several rows per entry; "
                 "a Spark count() reads the exact number)")
    out.line(f"bytes: {s.bytes}")
    out.line(f"commits: {s.generation}")
    out.line(f"last commit: {_when(s.last_commit_ms)}")
    if s.missing_ledgers:
        out.line("missing ledgers (metadata gone; reads fail): "
                 + ", ".join(f"{scope}:{lid}" if scope else str(lid) for scope, lid in s.missing_ledgers))
    if s.unclosed_ledgers:
        out.line("ledgers not closed (not counted): "
                 + ", ".join(f"{scope}:{lid}" if scope else str(lid) for scope, lid in s.unclosed_ledgers))
    out.line(f"jobs: {len(s.jobs)}")
    for job in s.jobs:
        mode = " overwrite" if job.overwrite else ""
        out.line(f"  {job.job} {job.state}{mode} since {_when(job.created_ms or None)}")
    for writer, token in sorted(s.writers.items()):
        out.line(f"writer: {writer} last batch {token}")
    return 0
