"""``bkspark cluster start|stop|status``: a local ZooKeeper and Python bookies for trying bkspark out."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

__all__ = ["register"]

DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".bkspark", "cluster")


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="start or stop a local cluster (ZooKeeper + Python bookies on 127.0.0.1)",
        description="A local BookKeeper cluster for demos and notebooks. Needs Java 17+ and ZooKeeper "
        "(`make zookeeper` installs Debian's package; or set ZOOKEEPER_HOME).",
    )
    actions = parser.add_subparsers(dest="cluster_command", required=True, metavar="{start,stop,status}")
    start = actions.add_parser("start", help="start ZooKeeper and the bookies in the background")
    start.add_argument("--dir", default=DEFAULT_DIR, help=f"where data, logs and state live (default {DEFAULT_DIR})")
    start.add_argument("--bookies", type=int, default=3, help="number of bookies (default 3)")
    start.add_argument(
        "--no-journal-sync", action="store_true", help="don't fsync the journal (faster, loses data on power loss)"
    )
    start.set_defaults(handler=_start)
    stop = actions.add_parser("stop", help="stop the cluster started in --dir")
    stop.add_argument("--dir", default=DEFAULT_DIR)
    stop.set_defaults(handler=_stop)
    status = actions.add_parser("status", help="print the running cluster's metadataServiceUri and bookies (JSON)")
    status.add_argument("--dir", default=DEFAULT_DIR)
    status.set_defaults(handler=_status)


def _start(args: argparse.Namespace) -> int:
    from bkspark.devcluster.local import STATE_FILE, LocalCluster
    from bkspark.errors import LocalClusterError

    if (Path(args.dir) / STATE_FILE).exists():
        raise LocalClusterError(f"a cluster already runs in {args.dir}: `bkspark cluster stop --dir {args.dir}` first")
    cluster = LocalCluster(
        args.dir, bookies=args.bookies, journal_sync_data=not args.no_journal_sync, detached=True
    ).start()
    print(cluster.metadata_service_uri)
    return 0


def _stop(args: argparse.Namespace) -> int:
    from bkspark.devcluster.local import stop_cluster

    state = stop_cluster(args.dir)
    print(f"stopped {len(state.get('bookies', []))} bookies and ZooKeeper ({state.get('metadataServiceUri')})")
    return 0


def _status(args: argparse.Namespace) -> int:
    from bkspark.devcluster.local import STATE_FILE
    from bkspark.errors import LocalClusterError

    path = Path(args.dir) / STATE_FILE
    if not path.exists():
        raise LocalClusterError(f"no cluster runs in {args.dir}")
    print(json.dumps(json.loads(path.read_text(encoding="utf-8")), indent=2))
    return 0
