"""The randomized fault-schedule campaign (docs/reliability.md): one test per seed over one shared cluster.

``make test`` runs ``CAMPAIGN_SCHEDULES`` (default 50) schedules from ``CAMPAIGN_FIRST_SEED`` (default 1);
``make campaign SCHEDULES=1000`` runs a thousand. ``CAMPAIGN_SEEDS=17,42`` runs exactly those seeds: a failing
schedule prints its seed and that one-line replay command. ``CAMPAIGN_STATS=path.json`` writes the run's totals.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.campaign.cluster import CampaignCluster
from tests.campaign.schedule import SPARK_SHARE, Stats, run_schedule
from tests.campaign.spark_jobs import SparkRunner
from tests.harness.java_bookkeeper import JavaClusterFactory, JavaTools
from tests.harness.zookeeper import ZkRoot

pytestmark = [pytest.mark.campaign, pytest.mark.integration, pytest.mark.fault, pytest.mark.compat]

#: Seeds that once found a product bug: replayed on every run (see docs/reliability.md). 135: half-open cuts of a
#: whole ensemble; the writer swapped one silent bookie for another for ever (tests/campaign/test_half_open_writer.py).
REGRESSION_SEEDS: tuple[int, ...] = (135,)


def _seeds() -> list[int]:
    explicit = os.environ.get("CAMPAIGN_SEEDS", "").strip()
    if explicit:
        return [int(s) for s in explicit.replace(",", " ").split()]
    count = int(os.environ.get("CAMPAIGN_SCHEDULES", "50"))
    first = int(os.environ.get("CAMPAIGN_FIRST_SEED", "1"))
    return list(REGRESSION_SEEDS) + [s for s in range(first, first + count) if s not in REGRESSION_SEEDS]


def replay_command(seed: int) -> str:
    """The one line that runs schedule ``seed`` again."""
    return (
        f"CAMPAIGN_SEEDS={seed} .venv/bin/python -m pytest {shlex.quote(str(Path(__file__).relative_to(Path.cwd())))}"
        if Path(__file__).is_relative_to(Path.cwd())
        else f"CAMPAIGN_SEEDS={seed} python -m pytest {__file__}"
    ) + " -m campaign -q"


@pytest.fixture(scope="module")
def stats() -> Iterator[Stats]:
    totals = Stats()
    yield totals
    out = os.environ.get("CAMPAIGN_STATS")
    text = json.dumps(totals.as_dict(), indent=2)
    if out:
        Path(out).write_text(text + "\n")
    print(f"\ncampaign totals: {text}")


@pytest.fixture(scope="module")
def campaign_cluster(
    module_zk_root: ZkRoot,
    module_java_cluster_factory: JavaClusterFactory,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[CampaignCluster]:
    cluster = CampaignCluster(module_zk_root, tmp_path_factory.mktemp("campaign"), module_java_cluster_factory)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def campaign_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkRunner]:
    """One Spark session for every schedule of the module, started by the first schedule that runs a job."""
    runner = SparkRunner(tmp_path_factory.mktemp("campaign-spark"))
    try:
        yield runner
    finally:
        runner.close()


#: ``CAMPAIGN_SPARK_SHARE``: the fraction of schedules that run a Spark job (0 for none).
SPARK_SHARE_OF_RUN = float(os.environ.get("CAMPAIGN_SPARK_SHARE", SPARK_SHARE))


@pytest.mark.parametrize("seed", _seeds(), ids=lambda s: f"seed-{s}")
def test_schedule(
    seed: int,
    campaign_cluster: CampaignCluster,
    java_tools: JavaTools,
    stats: Stats,
    campaign_spark: SparkRunner,
    tmp_path: Path,
) -> None:
    try:
        problems, history = run_schedule(
            seed, campaign_cluster, java_tools, tmp_path, stats, campaign_spark, SPARK_SHARE_OF_RUN
        )
    except Exception as exc:
        stats.failures.append(f"seed {seed}: {type(exc).__name__}: {exc}")
        raise AssertionError(f"schedule {seed} crashed; replay with: {replay_command(seed)}") from exc
    if problems:
        stats.failures.append(f"seed {seed}: {problems[:3]}")
        dump = tmp_path / "history.txt"
        dump.write_text("\n".join(repr(op) for op in history.ops))
        pytest.fail(
            f"schedule {seed} broke BookKeeper's promises:\n  " + "\n  ".join(problems[:20])
            + f"\nhistory: {dump}\nreplay with: {replay_command(seed)}"
        )
