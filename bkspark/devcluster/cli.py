"""``bkspark cluster start|stop|status``: a local ZooKeeper and Python bookies for trying bkspark out."""

from __future__ import annotations

import argparse
import json
import os

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
    start = actions.add_parser(
        "start",
        help="start ZooKeeper and the bookies in the background (again after a stop: the same cluster and data)",
        description="Start a local cluster in --dir. A directory that held one before brings it back with its "
        "ledgers, on the same ports (they are its metadataServiceUri and its bookies' ids); --fresh deletes "
        "that cluster's data first.",
    )
    start.add_argument("--dir", default=DEFAULT_DIR, help=f"where data, logs and state live (default {DEFAULT_DIR})")
    start.add_argument(
        "--bookies", type=int, default=None,
        help="number of bookies (default: as many as the cluster in --dir had, else 3; more adds bookies)",
    )
    start.add_argument(
        "--fresh", action="store_true",
        help="delete the data of the cluster that --dir held (its zookeeper/ and bookie-N/ directories) and start anew",
    )
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
    from bkspark.devcluster.local import LocalCluster, running_state
    from bkspark.errors import LocalClusterError

    if running_state(args.dir) is not None:
        raise LocalClusterError(f"a cluster already runs in {args.dir}: `bkspark cluster stop --dir {args.dir}` first")
    cluster = LocalCluster(
        args.dir, bookies=args.bookies, journal_sync_data=not args.no_journal_sync, detached=True, fresh=args.fresh
    ).start()
    print(cluster.metadata_service_uri)
    return 0


def _stop(args: argparse.Namespace) -> int:
    from bkspark.devcluster.local import stop_cluster

    state = stop_cluster(args.dir)
    print(f"stopped {len(state.get('bookies', []))} bookies and ZooKeeper ({state.get('metadataServiceUri')})")
    return 0


def _status(args: argparse.Namespace) -> int:
    from bkspark.devcluster.local import running_state
    from bkspark.errors import LocalClusterError

    state = running_state(args.dir)
    if state is None:
        raise LocalClusterError(f"no cluster runs in {args.dir}")
    print(json.dumps(state, indent=2))
    return 0
