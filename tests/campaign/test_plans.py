"""The campaign's plans are pure functions of the seed (docs/reliability.md, "The campaign")."""

from __future__ import annotations

from tests.campaign.cluster import BookieRef
from tests.campaign.schedule import POWER_CUT_SHARE, plan_power_cuts, plan_schedule


class _Proxy:
    """Enough of tests/harness/proxy.py's FaultProxy for a BookieId (a plan opens no socket)."""

    def __init__(self, port: int) -> None:
        self.port = port


def _bookies() -> list[BookieRef]:
    refs = [BookieRef("python", i, _Proxy(4000 + i)) for i in range(3)]  # type: ignore[arg-type]
    return refs + [BookieRef("java", i, _Proxy(5000 + i)) for i in range(2)]  # type: ignore[arg-type]


def test_power_cuts_are_drawn_from_the_seed_alone_and_hit_only_python_bookies() -> None:
    bookies = _bookies()
    pythons = {b.bookie_id for b in bookies if b.kind == "python"}
    drawn = [plan_power_cuts(seed, bookies) for seed in range(1, 401)]
    assert drawn == [plan_power_cuts(seed, bookies) for seed in range(1, 401)]
    with_cuts = [cuts for cuts in drawn if cuts]
    assert abs(len(with_cuts) / len(drawn) - POWER_CUT_SHARE) < 0.08
    assert {len(cuts) for cuts in with_cuts} == {1, 2}
    for cuts in with_cuts:
        assert set(cuts) <= pythons  # the journal's fault point is the Python bookie's
        assert all(1 <= at_batch <= 25 and 0.3 <= down <= 1.5 for at_batch, down in cuts.values())
    assert plan_schedule(7, bookies) == plan_schedule(7, bookies)
