"""Deadlines for tests: "this finishes, and does not wait for X" without measuring how fast it ran.

A test that asserts ``elapsed < 2.5`` fails on a loaded machine; what it means is "the call did not wait for
the 30 s timeout". The robust form makes the thing not to be waited for long (a timeout of minutes, a delay of
minutes) and gives the call a generous deadline far below it: a slow machine stays far inside it, a call that
waits for the wrong thing stays far outside it. Speed itself is measured in bench/, never asserted here.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Generic, TypeVar

__all__ = ["GENEROUS", "Background", "in_background", "finishes_within"]

T = TypeVar("T")

#: The deadline for a call that should take a moment: far above any load's scheduling, far below the minutes
#: a test makes its "must not be waited for" thing last.
GENEROUS = 60.0


class Background(Generic[T]):
    """A call running on a daemon thread; :meth:`join` returns its result or raises its error."""

    def __init__(self, fn: Callable[[], T], name: str = "deadline") -> None:
        self._box: dict[str, Any] = {}
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], T]) -> None:
        try:
            self._box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the joiner
            self._box["error"] = exc
        finally:
            self.done.set()

    def join(self, timeout: float = GENEROUS) -> T:
        """The call's result; fails the test when it is still running after ``timeout`` seconds."""
        assert self.done.wait(timeout), f"still running after the {timeout:g} s deadline"
        if "error" in self._box:
            raise self._box["error"]
        return self._box["result"]  # type: ignore[no-any-return]


def in_background(fn: Callable[[], T], name: str = "deadline") -> Background[T]:
    """Start ``fn`` on a daemon thread (join it with a deadline)."""
    return Background(fn, name)


def finishes_within(timeout: float, fn: Callable[[], T]) -> T:
    """``fn()``, failing the test if it has not returned or raised within ``timeout`` seconds."""
    return Background(fn).join(timeout)
