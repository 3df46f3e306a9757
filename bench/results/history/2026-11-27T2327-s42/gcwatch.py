"""Per test module: wall time, this process's CPU, time inside the garbage collector, full collections, live objects."""
import gc, os, resource, time

OUT = os.environ.get("GCWATCH_OUT", "/tmp/s42/gcwatch.txt")
_gc = {"t0": 0.0, "total": 0.0, "full": 0}
_mod = {"name": None, "wall": 0.0, "cpu": 0.0, "gc": 0.0, "full": 0}


def _cb(phase, info):
    if phase == "start":
        _gc["t0"] = time.perf_counter()
    else:
        _gc["total"] += time.perf_counter() - _gc["t0"]
        if info.get("generation") == 2:
            _gc["full"] += 1


gc.callbacks.append(_cb)


def _cpu():
    t = os.times()
    return t.user + t.system


def _flush():
    if _mod["name"] is None:
        return
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    with open(OUT, "a") as f:
        f.write(
            f"{_mod['name']}\twall={time.monotonic() - _mod['wall']:.1f}\tcpu={_cpu() - _mod['cpu']:.1f}"
            f"\tgc={_gc['total'] - _mod['gc']:.2f}\tfull={_gc['full'] - _mod['full']}"
            f"\tobjects={len(gc.get_objects())}\tmaxrss_mb={rss}\tthreads={len(os.listdir('/proc/self/task'))}\n"
        )


def pytest_runtest_setup(item):
    name = item.nodeid.split("::")[0]
    if name != _mod["name"]:
        _flush()
        _mod.update(name=name, wall=time.monotonic(), cpu=_cpu(), gc=_gc["total"], full=_gc["full"])


def pytest_sessionfinish(session):
    _flush()
