"""Observe (not change) who calls the global `random` functions from threads other than the main one."""
import collections
import random
import sys
import threading
import traceback

_current = ["<none>"]
_seen: collections.Counter = collections.Counter()
_examples: dict = {}
_main = threading.main_thread()


def _wrap(name):
    orig = getattr(random, name)

    def wrapper(*a, **k):
        t = threading.current_thread()
        if t is not _main:
            frames = [f for f in traceback.extract_stack(limit=8)[:-1]]
            where = " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}:{f.name}" for f in reversed(frames[-4:]))
            key = (t.name, where)
            _seen[key] += 1
            _examples.setdefault(key, []).append(_current[0]) if len(_examples.get(key, [])) < 5 else None
        return orig(*a, **k)

    setattr(random, name, wrapper)


for _n in ("random", "randint", "randrange", "shuffle", "uniform", "choice", "getrandbits", "sample", "choices"):
    _wrap(_n)


def pytest_runtest_logstart(nodeid, location):
    _current[0] = nodeid


def pytest_sessionfinish(session, exitstatus):
    with open("/tmp/rw/randomwatch.txt", "w") as f:
        for (tname, where), n in _seen.most_common():
            f.write(f"{n:8d} {tname} {where}\n    during: {_examples[(tname, where)]}\n")


_module = [None]
_zk_threads_after: list = []


def _zk_threads():
    return sorted(t.name for t in threading.enumerate() if "zk_loop" in t.name or "connect" in t.name.lower())


def pytest_runtest_setup(item):
    mod = item.nodeid.split("::")[0]
    if mod != _module[0]:
        live = _zk_threads()
        _zk_threads_after.append((_module[0], len(threading.enumerate()), live))
        _module[0] = mod
        with open("/tmp/rw/threads.txt", "a") as f:
            f.write(f"before {mod}: {len(threading.enumerate())} threads; kazoo-like: {live}\n")
            if mod.startswith("tests/unit/test_metadata_fuzz"):
                for t in threading.enumerate():
                    frame = sys._current_frames().get(t.ident)
                    f.write(f"  {t.name} daemon={t.daemon}\n")
                    if frame is not None:
                        f.write("".join("    " + line for line in traceback.format_stack(frame, limit=6)))
