"""``addEntryQuorumTimeoutSec``: an overall deadline for an add, ensemble changes included (docs/client.md).

Found by the namespace campaign (docs/reliability.md, "No ensemble left"): an add that no ensemble can take stayed
open forever. As in Apache BookKeeper (``PendingAddOp.timeoutQuorumWait``), an add still short of its ack quorum at
its deadline ends the ledger's writes with ``AddEntryQuorumTimeoutError``; 0 or less (the default) is no bound.
The bookies are fakes whose answers are loop timers, as the deadline is: the order of events, not the machine's
speed, decides each case.
"""

from __future__ import annotations

import asyncio

import pytest

from bkspark.errors import AddEntryQuorumTimeoutError, ends_writes
from tests.unit.test_client_core import Harness, append_all, appended


def test_an_add_that_never_gets_its_quorum_ends_the_writes_at_its_deadline() -> None:
    async def main() -> None:
        h = Harness(e=3, w=3, a=3, bookies=3, addEntryQuorumTimeoutSec=0.3)
        writer = h.writer()
        results, _ = await append_all(writer, [b"a", b"b"])
        assert results == [0, 1]
        h.bookies["b2:3181"].delay = 3600.0  # answers nothing, and nothing else can take its place
        futures, _ = appended(writer, [b"c", b"d"])
        done = await asyncio.gather(*futures, return_exceptions=True)
        assert all(isinstance(e, AddEntryQuorumTimeoutError) for e in done), done
        assert "addEntryQuorumTimeoutSec=0.3" in str(done[0]) and ends_writes(done[0])
        later, _ = appended(writer, [b"e"])
        with pytest.raises(AddEntryQuorumTimeoutError):
            await later[0]  # the ledger takes no more writes, as Java's handle after the timeout
        assert writer.lac == 1  # what was acknowledged stays so

    asyncio.run(main())


def test_adds_answered_before_their_deadline_go_on_for_longer_than_it() -> None:
    """The deadline is each add's own: a writer busy for several timeouts in a row, each add answered in time, goes on."""

    async def main() -> None:
        h = Harness(e=3, w=3, a=2, bookies=3, addEntryQuorumTimeoutSec=0.2)
        for bookie in h.bookies.values():
            bookie.delay = 0.05
        writer = h.writer()
        for i in range(12):  # one after another: about three deadlines' worth of time in all
            results, _ = await append_all(writer, [b"x%d" % i])
            assert results == [i]
        assert writer.error is None

    asyncio.run(main())


def test_without_the_setting_an_add_waits_as_long_as_it_takes() -> None:
    async def main() -> None:
        h = Harness(e=3, w=3, a=3, bookies=3)
        assert h.conf.addEntryQuorumTimeoutSec <= 0
        h.bookies["b2:3181"].delay = 1.0
        futures, _ = appended(h.writer(), [b"slow"])
        assert await futures[0] == 0  # a second's wait, where a bound of 0.3 s would have ended the writes

    asyncio.run(main())
