"""Issue 16's benchmark: what TLS costs the bkspark client, side by side with plain text, in one run.

    python -m bench.tls_cost [--entries 20000] [--size 1024] [--repeat 3] [--bookies java,python]

One ZooKeeper; one Apache BookKeeper 4.17 bookie and one Python bookie (bookie_server), each on its own
ledger root, each with TLS configured (PEM certificates made here with `openssl`) -- a TLS bookie also serves
clients that do not ask for TLS, so the same bookie answers both sides.  With the bkspark client (v2 protocol,
ensemble 1/1/1), per bookie and per mode (plain, TLS): adds/s of --size byte entries (the client's default
window of adds in flight), then batched-read entries/s (batch 100) of that ledger.  Modes alternate inside
each round and --repeat N takes the median of N rounds.  Prints TLS / plain ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bench.common import Cluster, Report, add_common_args, command_line, machine_facts, median_run, run_main

MODES = ("plain", "tls")


def _client_conf(pki: Any, mode: str) -> dict[str, Any]:
    from tests.harness.security import tls_client_conf

    conf: dict[str, Any] = {"useV2WireProtocol": True, "connectTimeoutMillis": 30000}
    if mode == "tls":
        conf.update(tls_client_conf(pki), startTLSTimeoutSecs=30)
    return conf


def _measure(uri: str, conf: dict[str, Any], entries: int, size: int) -> dict[str, Any]:
    from bkspark.client import BookKeeper

    payload = b"x" * size
    with BookKeeper(uri, conf) as bk:
        lh = bk.create_ledger(1, 1, 1, password=b"bench")
        lh.append(payload)  # connect (and handshake) outside the timing
        start = time.perf_counter()
        futures = [lh.append_async(payload) for _ in range(entries)]
        for f in futures:
            f.result(120)
        write_s = time.perf_counter() - start
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"bench", recovery=False)
        rh.batch_read(0, 10, 0)
        start = time.perf_counter()
        got, first = 0, 0
        last = rh.last_add_confirmed
        while first <= last:
            batch = rh.batch_read(first, 100, 0)
            if not batch:
                raise RuntimeError(f"empty batch at entry {first}")
            got += len(batch)
            first += len(batch)
        read_s = time.perf_counter() - start
        bk.delete_ledger(lh.ledger_id)
    return {
        "write_entries_per_sec": entries / write_s,
        "write_mb_per_sec": entries * size / write_s / 1e6,
        "read_entries_per_sec": got / read_s,
        "read_mb_per_sec": got * size / read_s / 1e6,
    }


def run(args: argparse.Namespace) -> Report:
    from tests.harness.python_bookie import PythonBookieCluster
    from tests.harness.security import make_pki, tls_bookie_conf

    report = Report(
        name="tls_cost",
        title="TLS cost: bkspark client, plain vs TLS, same bookies",
        command=command_line("bench.tls_cost"),
        params={"entries": args.entries, "size": args.size, "repeat": args.repeat, "bookies": args.bookies},
    )
    report.machine_before = machine_facts()
    bookies = [b.strip() for b in args.bookies.split(",") if b.strip()]
    with Cluster(args.workdir, args.keep, make_jars=not args.no_make) as cluster:
        pki = make_pki(cluster.base / "pki")
        uris: dict[str, str] = {}
        if "java" in bookies:
            from bench.common import JAVA_BOOKIE_CONF, JAVA_BOOKIE_JVM
            from tests.harness.java_bookkeeper import JavaBookieCluster

            uri = cluster.new_root("java-tls")
            cluster._jars(args.bk_version)
            java = JavaBookieCluster(
                version=args.bk_version, metadata_service_uri=uri, base_dir=cluster.base / "java-tls", bookies=1,
                journal_sync_data=True, conf_overrides={**JAVA_BOOKIE_CONF, **tls_bookie_conf(pki)},
                jvm_args=JAVA_BOOKIE_JVM,
            )
            java.start_all()
            cluster.callback(java.close)
            uris["java"] = uri
        if "python" in bookies:
            uri = cluster.new_root("python-tls")
            py = PythonBookieCluster(
                uri, cluster.base / "python-tls", bookies=1, journal_sync_data=True, conf_overrides=tls_bookie_conf(pki)
            )
            py.start_all()
            cluster.callback(py.close)
            uris["python"] = uri
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for round_no in range(args.repeat):
            for bookie, uri in uris.items():
                for mode in MODES:
                    try:
                        result = _measure(uri, _client_conf(pki, mode), args.entries, args.size)
                    except Exception as exc:  # noqa: BLE001 - reported, the other parts still run
                        report.fail(f"{bookie}/{mode} round {round_no}", exc)
                        continue
                    result.update(bookie=bookie, mode=mode, round=round_no)
                    report.raw.append(result)
                    runs.setdefault((bookie, mode), []).append(result)
                    print(f"[tls_cost] {bookie} {mode}: {result}", file=sys.stderr, flush=True)
        for bookie in uris:
            med: dict[str, dict[str, Any] | None] = {}
            for what in ("write", "read"):
                key = f"{what}_entries_per_sec"
                for mode in MODES:
                    m = median_run(runs.get((bookie, mode), []), key)
                    med[f"{what}-{mode}"] = m
                    report.row(
                        f"{what} {args.size} B entries, {bookie} bookie, {mode}",
                        None if m is None else round(m[key]),
                        "entries/s",
                        mb_per_sec=None if m is None else round(m[f"{what}_mb_per_sec"], 1),
                    )
                report.add_ratio(
                    f"{what}: TLS / plain ({bookie} bookie)",
                    None if med[f"{what}-tls"] is None else med[f"{what}-tls"][key],  # type: ignore[index]
                    None if med[f"{what}-plain"] is None else med[f"{what}-plain"][key],  # type: ignore[index]
                )
    report.machine_after = machine_facts()
    return report


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.tls_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=20000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--bookies", default="java,python", help="comma-separated: java, python")
    add_common_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(make_parser, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
