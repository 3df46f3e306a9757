"""The ``bkspark shell`` commands: BP-44's (listorphaned, showowner, predictlifespan) and BookKeeper's everyday ones.

Names and flags follow Apache BookKeeper's ``bin/bookkeeper shell`` (4.17), so
``readledger -l 5 -fe 0 -le 9 -m`` works as it does there; every ledger
command also takes BP-35's ``--ledger-scope-id`` and ``--ledger-qualified-name``.
Each command is ``cmd_<name>(args, out) -> int`` (the exit status).
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import math
import sys
import time
from collections.abc import Callable
from typing import Any

from bkspark.audit.records import (
    CONFIG_KEYS,
    AuditConfig,
    election_path,
    list_orphans,
    read_status,
    read_stored_config,
    update_config,
)
from bkspark.context import read_context, read_create_context
from bkspark.errors import (
    BadLedgerContextError,
    BadMetadataError,
    BKError,
    BookieUnavailableError,
    NoSuchLedgerMetadataError,
)
from bkspark.metadata.registry import BookieRegistry
from bkspark.metadata.znodes import LeaderElection, Znodes
from bkspark.placement import policy_from_conf
from bkspark.placement.base import conf_bool
from bkspark.placement.rackaware import (
    RESOLVE_BY_BOOKIE_ID,
    RackawareEnsemblePlacementPolicy,
    TopologyAwareEnsemblePlacementPolicy,
)
from bkspark.protocol import zk_paths
from bkspark.protocol.layout import LedgerLayout, MetadataServiceUri
from bkspark.protocol.ledger_metadata import LedgerMetadata
from bkspark.shell import admin
from bkspark.shell import dataset_commands
from bkspark.shell.common import (
    ENV_URI,
    LedgerName,
    Output,
    Progress,
    ShellError,
    client_conf,
    confirm,
    given_metadata_service_uri,
    open_client,
    open_store,
    open_zookeeper,
    parse_int,
    read_answer,
    resolve_ledger,
    resolve_scope,
)

__all__ = ["COMMANDS"]


# ---------------------------------------------------------------------------------------------------------------
# Rendering ledger metadata


def _custom_value_text(value: bytes) -> str:
    try:
        text = value.decode("utf-8")
        if text.isprintable():
            return text
    except UnicodeDecodeError:
        pass
    return "base64:" + base64.b64encode(value).decode("ascii")


def metadata_json(name: LedgerName, md: LedgerMetadata) -> dict[str, Any]:
    """Ledger metadata as a JSON object (custom metadata values base64; the BP-44 context decoded)."""
    out: dict[str, Any] = {
        **name.to_json(),
        "formatVersion": md.format_version,
        "state": md.state.name,
        "ensembleSize": md.ensemble_size,
        "writeQuorumSize": md.write_quorum_size,
        "ackQuorumSize": md.ack_quorum_size,
        "lastEntryId": md.last_entry_id,
        "length": md.length,
        "digestType": None if md.digest_type is None else md.digest_type.name,
        "hasPassword": bool(md.password),
        "ctime": md.ctime,
        "ensembles": {str(k): list(v) for k, v in md.ensembles.items()},
        "customMetadata": {k: base64.b64encode(v).decode("ascii") for k, v in sorted(md.custom_metadata.items())},
    }
    try:
        ctx = read_context(md)
        out["context"] = {
            "create": None if ctx.create is None else ctx.create.to_json(),
            "close": None if ctx.close is None else ctx.close.to_json(),
            "sealTime": ctx.seal_time_ms,
        }
    except BadMetadataError as exc:
        out["context"] = None
        out["contextError"] = str(exc)
    return out


def metadata_text(md: LedgerMetadata) -> str:
    """One line in the shape of Java's ``LedgerMetadataImpl.toString`` (password omitted)."""
    ensembles = ", ".join(f"{k}=[{', '.join(v)}]" for k, v in md.ensembles.items())
    custom = ", ".join(f"{k}={_custom_value_text(v)}" for k, v in sorted(md.custom_metadata.items()))
    return (
        f"LedgerMetadata{{formatVersion={md.format_version}, ensembleSize={md.ensemble_size}, "
        f"writeQuorumSize={md.write_quorum_size}, ackQuorumSize={md.ack_quorum_size}, state={md.state.name}, "
        f"length={md.length}, lastEntryId={md.last_entry_id}, "
        f"digestType={None if md.digest_type is None else md.digest_type.name}, password=OMITTED, "
        f"ensembles={{{ensembles}}}, customMetadata={{{custom}}}}}"
    )


def _read_metadata(args: argparse.Namespace, name: LedgerName) -> LedgerMetadata:
    with open_store(args) as store:
        return store.read_ledger_metadata(name.ledger_id, name.scope_id).metadata


# ---------------------------------------------------------------------------------------------------------------
# BP-44 commands


def cmd_listorphaned(args: argparse.Namespace, out: Output) -> int:
    """The orphans the last audit recorded (cheap: reads only the audit's znodes)."""
    scope_filter = resolve_scope(args) if getattr(args, "ledger_scope_id", None) is not None else None
    with open_store(args) as store:
        records = list_orphans(store.zk, store.root, store.retry)
    if scope_filter is not None:
        records = [r for r in records if r.scope_id == scope_filter]
    if out.json:
        out.document(
            [
                {
                    "ledgerId": r.ledger_id,
                    "scopeId": r.scope_id,
                    "qualifiedName": r.name,
                    "reason": r.reason.value,
                    "detail": r.detail,
                    "detailScopeId": r.detail_scope_id,
                    "firstSeenMs": r.first_seen_ms,
                }
                for r in records
            ]
        )
        return 0
    if args.printorphanreason:
        for r in records:
            out.line(f"{r.ledger_label} {r.reason.value} {r.detail_label}")
    else:
        seen: set[str] = set()
        for r in records:
            if r.name not in seen:
                seen.add(r.name)
                out.line(r.ledger_label)
    return 0


def _context_error(name: LedgerName, exc: BadLedgerContextError) -> ShellError:
    return ShellError(f"ledger {name.label} carries a malformed context (not written by bkspark?): {exc}")


def cmd_showowner(args: argparse.Namespace, out: Output) -> int:
    """The seed's ownership document: createdBy, onBehalfOf, dataSet (only the create context is read)."""
    name = resolve_ledger(args)
    md = _read_metadata(args, name)
    try:
        create = read_create_context(md.custom_metadata)
    except BadLedgerContextError as exc:
        raise _context_error(name, exc) from None
    out.document(
        create.owner() if create is not None else {"createdBy": None, "onBehalfOf": None, "dataSet": None}
    )
    return 0


def cmd_predictlifespan(args: argparse.Namespace, out: Output) -> int:
    """The seed's lifespan document: create, expected/actual seal, read-until and delete times (seconds)."""
    name = resolve_ledger(args)
    md = _read_metadata(args, name)
    try:
        ctx = read_context(md)
    except BadLedgerContextError as exc:
        raise _context_error(name, exc) from None
    out.document(ctx.lifespan())
    return 0


# ---------------------------------------------------------------------------------------------------------------
# BookKeeper's everyday commands


def cmd_listledgers(args: argparse.Namespace, out: Output) -> int:
    """Every ledger of a scope (``-m``: with metadata; ``-bookieid``: only those stored on that bookie)."""
    scope = resolve_scope(args)
    with open_store(args) as store:
        ids = list(store.list_ledgers(scope))
        need_md = args.meta or args.bookieid is not None
        if not need_md:
            if out.json:
                out.document([LedgerName(i, scope).to_json() for i in ids])
            else:
                for i in ids:
                    out.line(f"ledgerID: {LedgerName(i, scope).label}")
            return 0
        progress = Progress("reading ledger metadata", enabled=args.progress)
        rows: list[dict[str, Any]] = []
        for n, lid in enumerate(ids, 1):
            name = LedgerName(lid, scope)
            try:
                md = store.read_ledger_metadata(lid, scope).metadata
            except NoSuchLedgerMetadataError:
                continue  # deleted while we listed
            progress(n, len(ids))
            if args.bookieid is not None and not any(args.bookieid in members for members in md.ensembles.values()):
                continue
            if out.json:
                rows.append(metadata_json(name, md) if args.meta else name.to_json())
            else:
                out.line(f"ledgerID: {name.label}")
                if args.meta:
                    out.line(metadata_text(md))
        progress.finish()
        if out.json:
            out.document(rows)
    return 0


def cmd_ledgermetadata(args: argparse.Namespace, out: Output) -> int:
    """One ledger's metadata (Java: ``ledgermetadata -l LEDGER``)."""
    name = resolve_ledger(args)
    md = _read_metadata(args, name)
    if out.json:
        out.document(metadata_json(name, md))
    else:
        out.line(f"ledgerID: {name.label}")
        out.line(metadata_text(md))
    return 0


def _payload_text(payload: bytes) -> str:
    return payload.decode("utf-8", "backslashreplace")


def cmd_readledger(args: argparse.Namespace, out: Output) -> int:
    """Entries START..END of a ledger (Java: ``readledger -l L -fe START -le END [-m] [-r]``)."""
    name = resolve_ledger(args)
    if args.start is not None and args.firstentryid is not None and args.start != args.firstentryid:
        raise ShellError("two different first entries given (START and -fe)", 2)
    if args.end is not None and args.lastentryid is not None and args.end != args.lastentryid:
        raise ShellError("two different last entries given (END and -le)", 2)
    first_raw = args.start if args.start is not None else args.firstentryid
    last_raw = args.end if args.end is not None else args.lastentryid
    first = 0 if first_raw is None else parse_int(first_raw, "first entry id")
    last = -1 if last_raw is None else parse_int(last_raw, "last entry id", -1)
    with open_client(args) as bk:
        md = bk.get_ledger_metadata(name.ledger_id, name.scope_id)
        rh = bk.open_ledger(
            name.ledger_id, name.scope_id, recovery=args.force_recovery, password=md.password or b""
        )
        lac = rh.last_add_confirmed
        end = lac if last < 0 or last > lac else last
        rows: list[dict[str, Any]] = []
        if first <= end:
            progress = Progress(f"reading ledger {name.label}", enabled=args.progress)
            done = 0
            cur = first
            while cur <= end:
                batch_end = min(end, cur + 99)
                for entry in rh.read(cur, batch_end):
                    payload = bytes(entry.payload)
                    if out.json:
                        row: dict[str, Any] = {"entryId": entry.entry_id, "length": len(payload)}
                        if args.msg:
                            row["payload"] = base64.b64encode(payload).decode("ascii")
                        rows.append(row)
                    else:
                        out.line(f"--------- Lid={name.ledger_id}, Eid={entry.entry_id}, EntryLength={len(payload)} ---------")
                        if args.msg:
                            out.line("Data: " + _payload_text(payload))
                done += batch_end - cur + 1
                progress(done, end - first + 1)
                cur = batch_end + 1
            progress.finish()
        elif last_raw is not None or first_raw is not None:
            if first > lac:
                raise ShellError(f"first entry {first} is beyond the last add confirmed ({lac}) of ledger {name.label}")
        if out.json:
            out.document({**name.to_json(), "lastAddConfirmed": lac, "entries": rows})
    return 0


def cmd_deleteledger(args: argparse.Namespace, out: Output) -> int:
    """Delete a ledger (asks for confirmation unless ``-f``; refuses without it when stdin is not a terminal)."""
    name = resolve_ledger(args)
    with open_store(args) as store:
        store.read_ledger_metadata(name.ledger_id, name.scope_id)  # unknown ledger: a clear error, not a no-op
        if not args.even_if_held:
            from bkspark.datasource.datasets import DatasetRegistry

            held = DatasetRegistry(store.zk, store.root).holders((name.scope_id, name.ledger_id))
            if held:
                raise ShellError(
                    f"ledger {name.label} is held by {', '.join(held)}: deleting it would lose rows that are "
                    "committed or about to be; not deleted (--even-if-held deletes it anyway)"
                )
        if not args.force:
            if not sys.stdin.isatty():
                raise ShellError("refusing to delete without -f/--force (stdin is not a terminal to confirm on)", 2)
            answer = read_answer(f"Are you sure to delete Ledger : {name.label}? (Y or N) ")
            if answer not in ("y", "yes"):
                out.line("not deleted")
                return 1
        store.delete_ledger_metadata(name.ledger_id, name.scope_id)
    if out.json:
        out.document({**name.to_json(), "deleted": True})
    else:
        out.line(f"Deleted ledger {name.label}")
    return 0


def _network_locations(
    args: argparse.Namespace, registry: BookieRegistry, writable: frozenset[str], readonly: frozenset[str]
) -> dict[str, str]:
    """Every bookie's network location as the configured placement policy resolves it.

    The policy is built from the client configuration (``--client-conf``,
    ``--conf``) exactly as the client builds it.  A policy without a topology
    (the random default) places nothing by location, so the rack-aware policy
    resolves the locations under the same configuration instead.  BookieIds go
    to the DNS-to-switch mapping as the bookie's registered host (its
    ``bookie-rpc`` endpoint, as Java's address resolver gives it), or whole with
    ``networkTopologyResolveByBookieId=true``.
    """
    conf = client_conf(args)
    policy = policy_from_conf(conf)
    if not isinstance(policy, TopologyAwareEnsemblePlacementPolicy):
        policy.uninitialize()
        policy = RackawareEnsemblePlacementPolicy().initialize(conf)
    try:
        if not conf_bool(conf, RESOLVE_BY_BOOKIE_ID, False):
            policy.set_bookie_address_resolver(lambda bookie: registry.resolve(bookie)[0])
        policy.on_cluster_changed(writable, readonly)
        return policy.locations()
    finally:
        policy.uninitialize()


def cmd_listbookies(args: argparse.Namespace, out: Output) -> int:
    """Registered bookies: ``-rw`` writable, ``-ro`` read-only, ``-a``/default both; ``-h`` with addresses,
    ``-l`` with network locations."""
    show_rw = args.readwrite or args.all or not (args.readwrite or args.readonly)
    show_ro = args.readonly or args.all or not (args.readwrite or args.readonly)
    with open_store(args) as store:
        registry = BookieRegistry(store.zk, store.root, retry=store.retry)
        registry.start()
        try:
            writable = registry.writable_bookies()
            readonly = registry.readonly_bookies()
            groups: dict[str, list[str]] = {}
            if show_rw:
                groups["readwrite"] = sorted(writable)
            if show_ro:
                groups["readonly"] = sorted(readonly)
            addresses: dict[str, str | None] = {}
            if args.hostnames:
                for bookie in {b for bs in groups.values() for b in bs}:
                    try:
                        host, port = registry.resolve(bookie)
                        addresses[bookie] = f"{host}:{port}"
                    except BookieUnavailableError:
                        addresses[bookie] = None
            locations = _network_locations(args, registry, writable, readonly) if args.location else {}
        finally:
            registry.close()
    if out.json:
        doc: dict[str, Any] = {}
        for group, bookies in groups.items():
            rows = []
            for b in bookies:
                row: dict[str, Any] = {"bookieId": b}
                if args.hostnames:
                    row["address"] = addresses.get(b)
                if args.location:
                    row["networkLocation"] = locations.get(b)
                rows.append(row)
            doc[group] = rows
        out.document(doc)
        return 0
    titles = {"readwrite": "ReadWrite Bookies :", "readonly": "Readonly Bookies :"}
    for group, bookies in groups.items():
        out.line(titles[group])
        if not bookies:
            out.line("No bookie exists!")
        for b in bookies:
            text = f"{b}({addresses.get(b) or 'unresolved'})" if args.hostnames else b
            if args.location:
                text += f"\t{locations.get(b)}"
            out.line(text)
    return 0


def _human(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if value < 1024 or unit == "PB":
            return f"{value:.1f}{unit}" if unit != "B" else f"{int(value)}B"
        value /= 1024
    return f"{n}B"


def cmd_bookieinfo(args: argparse.Namespace, out: Output) -> int:
    """Free and total disk space of every registered bookie, and the cluster's sums."""
    rows: list[dict[str, Any]] = []
    with open_client(args) as bk:
        for bookie in sorted(bk.writable_bookies() | bk.readonly_bookies()):
            row: dict[str, Any] = {"bookieId": bookie}
            try:
                total, free = bk.bookie_info(bookie)  # the client's order: (total, free)
                row.update(free=free, total=total)
            except (OSError, TimeoutError, BKError) as exc:
                row["error"] = str(exc) or type(exc).__name__
            rows.append(row)
    if not rows:
        raise ShellError("no bookies are registered")
    free_sum = sum(r.get("free", 0) for r in rows)
    total_sum = sum(r.get("total", 0) for r in rows)
    if out.json:
        out.document({"bookies": rows, "totalFree": free_sum, "totalCapacity": total_sum})
    else:
        out.line("Free disk space info:")
        for r in rows:
            if "error" in r:
                out.line(f"{r['bookieId']}:\tFailed to get info: {r['error']}")
            else:
                out.line(f"{r['bookieId']}:\tFree: {r['free']}({_human(r['free'])})\tTotal: {r['total']}({_human(r['total'])})")
        out.line(f"Total free disk space in the cluster:\t{free_sum}({_human(free_sum)})")
        out.line(f"Total capacity in the cluster:\t{total_sum}({_human(total_sum)})")
    failed = [r for r in rows if "error" in r]
    return 1 if len(failed) == len(rows) else 0


def cmd_simpletest(args: argparse.Namespace, out: Output) -> int:
    """Create a ledger, write N entries, read them back, delete it (Java's ``simpletest -e -w -a -n``)."""
    e = parse_int(args.ensemble, "ensemble size", 1, 2**31 - 1)
    w = parse_int(args.writeQuorum, "write quorum size", 1, 2**31 - 1)
    a = parse_int(args.ackQuorum, "ack quorum size", 1, 2**31 - 1)
    n = parse_int(args.numEntries, "number of entries", 0, 10**9)
    if not e >= w >= a:
        raise ShellError(f"need ensemble >= writeQuorum >= ackQuorum, got -e {e} -w {w} -a {a}", 2)
    with open_client(args) as bk:
        lh = bk.create_ledger(ensemble_size=e, write_quorum_size=w, ack_quorum_size=a)
        lid = lh.ledger_id
        try:
            if not out.json:
                out.line(f"Ledger ID: {lid}")
            progress = Progress(f"writing ledger {lid}", enabled=args.progress)
            payload = b"x" * 100
            futures: list[concurrent.futures.Future[int]] = []
            started = time.monotonic()
            for i in range(n):
                futures.append(lh.append_async(payload))
                if (i + 1) % 100 == 0 or i + 1 == n:
                    progress(i + 1, n)
            for f in futures:
                f.result()
            progress.finish()
            write_secs = time.monotonic() - started
            lh.close()
            rh = bk.open_ledger(lid, recovery=False)
            read = 0
            cur = 0
            while cur <= rh.last_add_confirmed:
                batch = rh.read(cur, min(rh.last_add_confirmed, cur + 99))
                for entry in batch:
                    if bytes(entry.payload) != payload:
                        raise ShellError(f"entry {entry.entry_id} of ledger {lid} read back wrong")
                read += len(batch)
                cur += len(batch)
        except BaseException as exc:
            # Nothing names the test ledger and no context says when it may go: never leave it behind.
            try:
                bk.delete_ledger(lid)
            except Exception as cleanup:  # noqa: BLE001 - the first error is the one to report
                raise ShellError(
                    f"{exc}; the test ledger {lid} could not be deleted either ({type(cleanup).__name__}: {cleanup}): "
                    f"delete it with `bkspark shell deleteledger -f {lid}`"
                ) from exc
            raise
        bk.delete_ledger(lid)
    if read != n:
        raise ShellError(f"wrote {n} entries to ledger {lid} but read back {read}")
    if out.json:
        out.document({"ledgerId": lid, "entriesWritten": n, "entriesRead": read, "writeSeconds": round(write_secs, 3)})
    else:
        out.line(f"{n} entries written to ledger {lid} in {write_secs:.3f}s")
        out.line(f"{read} entries read back and verified; ledger {lid} deleted")
    return 0


# ---------------------------------------------------------------------------------------------------------------
# Audit administration


def cmd_auditconfig(args: argparse.Namespace, out: Output) -> int:
    """Show the orphan audit's stored config, or change values in it (running auditors apply them at once).

    A value that was never stored is each auditor's own (its ``--audit-period``/``--grace-period`` flag).
    """
    changing = any(v is not None for v in (args.audit_period, args.grace_period, args.parent_grace_period))
    if changing:  # check the values before touching the cluster
        try:
            AuditConfig(
                audit_period=1.0 if args.audit_period is None else args.audit_period,
                grace_period=0.0 if args.grace_period is None else args.grace_period,
                parent_grace_period=0.0 if args.parent_grace_period is None else args.parent_grace_period,
            )
        except BKError as exc:
            raise ShellError(str(exc), 2) from None
    with open_store(args) as store:
        if changing:
            stored: dict[str, float] | None = update_config(
                store.zk, store.root, audit_period=args.audit_period, grace_period=args.grace_period,
                parent_grace_period=args.parent_grace_period,
            )
        else:
            stored = read_stored_config(store.zk, store.root)
    values = stored or {}
    doc = {key: values.get(key) for key in CONFIG_KEYS}
    if out.json:
        out.document(doc)
    else:
        for key, value in doc.items():
            shown = "unset (each auditor uses its own flag)" if value is None else format(value, "g")
            out.line(f"{key}: {shown}")
    return 0


def cmd_auditstatus(args: argparse.Namespace, out: Output) -> int:
    """The running auditors (leader first) and the leader's last pass."""
    with open_store(args) as store:
        contenders = LeaderElection(store.zk, election_path(store.root)).contenders()
        status = read_status(store.zk, store.root)
    if out.json:
        out.document({"auditors": contenders, "lastPass": None if status is None else status.to_json()})
        return 0
    out.line(f"leader: {contenders[0] if contenders else 'none running'}")
    for c in contenders[1:]:
        out.line(f"standby: {c}")
    if status is None:
        out.line("last pass: none yet")
    else:
        out.line(
            f"last pass: by {status.auditor}, {status.ledgers_scanned} ledgers, {status.orphans} orphans, "
            f"{status.unreadable} unreadable, finished {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(status.pass_finished_ms / 1000))}"
        )
    return 0


# ---------------------------------------------------------------------------------------------------------------
# Cluster and bookie formatting (bkspark/shell/admin.py has Java's steps)


def _ledger_scheme(zk: Any, uri: MetadataServiceUri) -> str:
    """The ledger path scheme: the URI's, else the cluster's LAYOUT, else Java's default."""
    if uri.scheme is not None:
        return uri.scheme
    found = Znodes(zk).get(zk_paths.layout_path(uri.root))
    return "hierarchical" if found is None else LedgerLayout.parse(found[0]).scheme


def cmd_initnewcluster(args: argparse.Namespace, out: Output) -> int:
    """Create a new cluster's root, registration nodes, INSTANCEID and LAYOUT (refuses an existing root)."""
    with open_zookeeper(args) as (zk, uri):
        layout = LedgerLayout.for_scheme(uri.scheme or "hierarchical").serialize()
        instance_id = admin.init_new_cluster(zk, uri.root, layout)
    if out.json:
        out.document({"ledgersRootPath": uri.root, "instanceId": instance_id})
    else:
        out.line(f"Successfully initiated cluster {uri.root} (instance id {instance_id})")
    return 0


def cmd_metaformat(args: argparse.Namespace, out: Output) -> int:
    """Format the cluster's metadata: every ledger, cookie and id generator goes; a new INSTANCEID."""
    with open_zookeeper(args) as (zk, uri):
        scheme = _ledger_scheme(zk, uri)
        existed = zk.exists(uri.root) is not None  # asked first: a refusal changes nothing
        if existed:
            if args.non_interactive:
                if not args.force:
                    raise ShellError(
                        f"ledgers root {uri.root} already exists; not formatting it without -f/--force "
                        "(-n/--nonInteractive was given)"
                    )
            elif not confirm(
                "Ledger root already exists. Are you sure to format bookkeeper metadata? This may cause data loss."
            ):
                out.line("not formatted")
                return 1
        admin.prepare_format(zk, uri.root)
        instance_id = admin.format_metadata(zk, uri.root, scheme)
    if out.json:
        out.document({"ledgersRootPath": uri.root, "instanceId": instance_id, "existed": existed})
    else:
        out.line(f"Successfully formatted BookKeeper metadata in {uri.root} (instance id {instance_id})")
    return 0


def cmd_nukeexistingcluster(args: argparse.Namespace, out: Output) -> int:
    """Delete a whole cluster's metadata: its root must be named, and its instance id given unless ``-f``."""
    if args.force == (args.instanceid is not None):
        raise ShellError("give either -i/--instanceid INSTANCEID or -f/--force (not both)", 2)
    with open_zookeeper(args) as (zk, uri):
        if args.zkledgersrootpath != uri.root:
            raise ShellError(
                f"-p/--zkledgersrootpath {args.zkledgersrootpath} does not match the cluster's ledgers root "
                f"{uri.root}; not nuking"
            )
        if not args.force:
            stored = admin.read_instance_id(zk, uri.root)
            if zk.exists(uri.root) is not None and stored != args.instanceid:
                raise ShellError(f"instance id {args.instanceid} does not match the cluster's ({stored}); not nuking")
        nuked = admin.nuke_existing_cluster(zk, uri.root, _ledger_scheme(zk, uri))
    if out.json:
        out.document({"ledgersRootPath": uri.root, "nuked": nuked})
    elif nuked:
        out.line(f"Successfully nuked existing cluster {uri.root}")
    else:
        out.line(f"There is no existing cluster at {uri.root}")
    return 0


def cmd_bookieformat(args: argparse.Namespace, out: Output) -> int:
    """Empty a (stopped) bookie's journal and ledger directories; ``-d`` also deletes its cookie in ZooKeeper."""
    from bkspark.config.bookie import load_conf

    try:
        conf = load_conf(args.bookie_conf)
    except BKError as exc:
        raise ShellError(f"bookie configuration {args.bookie_conf}: {exc}", 2) from None
    dirs = admin.BookieDirs(conf.journal_paths, conf.ledger_paths)
    # The bookie's own cluster, else the shell's; formatting the directories alone needs none.
    uri = conf.metadataServiceUri or given_metadata_service_uri(args)
    if args.delete_cookie and not uri:  # refused before the first step, not between the two
        raise ShellError(
            "-d/--deleteCookie needs the cluster: metadataServiceUri in the bookie configuration, "
            f"--metadata-service-uri or ${ENV_URI}", 2,
        )
    bookie_id = conf.bookie_id()
    if args.delete_cookie or uri:
        with open_zookeeper(args, uri) as (zk, parsed):
            writable, readonly = admin.registered_bookies(zk, parsed.root)
            if bookie_id in writable or bookie_id in readonly:
                raise ShellError(f"bookie {bookie_id} is running (registered in {parsed.root}): stop it first")
    if admin.bookie_dirs_with_data(dirs):
        if args.non_interactive:
            if not args.force:
                raise ShellError(
                    f"bookie {bookie_id} has data in {', '.join(map(str, dirs.journal))}; not formatting it "
                    "without -f/--force (-n/--nonInteractive was given)"
                )
        elif not confirm("Are you sure to format Bookie data..?"):
            out.line("Bookie format aborted")
            return 1
    admin.format_bookie_dirs(dirs)
    cookie_deleted = False
    if args.delete_cookie:
        with open_zookeeper(args, uri) as (zk, parsed):
            cookie_deleted = Znodes(zk).delete(zk_paths.cookie_path(parsed.root, bookie_id))
    if out.json:
        out.document({"bookieId": bookie_id, "formatted": [str(d) for d in dirs.all], "cookieDeleted": cookie_deleted})
    else:
        out.line(f"Bookie {bookie_id} formatted: {', '.join(str(d) for d in dirs.all)}")
        if args.delete_cookie:
            out.line(f"cookie of {bookie_id} {'deleted' if cookie_deleted else 'was not in ZooKeeper'}")
    return 0


def cmd_recoverjobs(args: argparse.Namespace, out: Output) -> int:
    """Finish crashed Spark write jobs (bkspark.datasource.cleanup.recover_jobs): one line per job handled."""
    from bkspark.datasource.datasets import DatasetRegistry
    from bkspark.datasource.options import check_dataset_name
    from bkspark.datasource.cleanup import CLEANUP_UNFINISHED, recover_jobs

    if args.dataset is not None:
        check_dataset_name(args.dataset, "--dataset")
    if math.isnan(args.stale_after) or args.stale_after < 0:  # a negative age would abort jobs that just began
        raise ShellError(f"bad --stale-after {args.stale_after}: must be a number of seconds >= 0 (inf: never)", 2)
    with open_client(args) as bk:
        registry = DatasetRegistry(bk.store.zk, bk.store.root)
        if args.dataset is not None and registry.root(args.dataset) is None and not any(
            args.dataset in registry.job_datasets(job, registry.job(job)) for job in registry.jobs()
        ):  # a typo must not read as "nothing to recover"
            raise ShellError(f"no dataset or write job named {args.dataset!r} in this cluster")
        done = recover_jobs(bk, registry, dataset=args.dataset, stale_after=args.stale_after)
    if out.json:
        out.document({"jobs": [{"job": job, "done": what} for job, what in done]})
    else:
        for job, what in done:
            out.line(f"{job} {what}")
    unfinished = [job for job, what in done if what == CLEANUP_UNFINISHED]
    if unfinished:  # committed data is safe, but what the jobs left is not removed yet: not a success
        raise ShellError(
            f"the clean-up of committed job(s) {', '.join(unfinished)} failed again; their records stay: run "
            "recoverjobs again once the cluster is healthy"
        )
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace, Output], int]] = {
    "listorphaned": cmd_listorphaned,
    "showowner": cmd_showowner,
    "predictlifespan": cmd_predictlifespan,
    "listledgers": cmd_listledgers,
    "ledgermetadata": cmd_ledgermetadata,
    "readledger": cmd_readledger,
    "deleteledger": cmd_deleteledger,
    "listbookies": cmd_listbookies,
    "bookieinfo": cmd_bookieinfo,
    "simpletest": cmd_simpletest,
    "auditconfig": cmd_auditconfig,
    "auditstatus": cmd_auditstatus,
    "initnewcluster": cmd_initnewcluster,
    "metaformat": cmd_metaformat,
    "nukeexistingcluster": cmd_nukeexistingcluster,
    "bookieformat": cmd_bookieformat,
    "recoverjobs": cmd_recoverjobs,
    "listdatasets": dataset_commands.cmd_listdatasets,
    "showdataset": dataset_commands.cmd_showdataset,
}
