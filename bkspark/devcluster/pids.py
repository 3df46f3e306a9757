"""Whether a process (or a process group) still runs: the one rule the local cluster, the port claims and the test
container reaper share."""

from __future__ import annotations

import os

__all__ = ["pid_alive"]


def pid_alive(pid: int, *, group: bool = False) -> bool:
    """True while ``pid`` (with ``group``: any process of group ``pid``) exists; another user's process counts as
    alive (we may not signal it, but it runs)."""
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
