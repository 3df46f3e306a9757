import os, sys
if os.environ.get("BK_GCLOG"):
    import gc, time, atexit
    _t = [0.0, 0.0, [0, 0, 0], [0.0, 0.0, 0.0], [0,0,0]]
    def _cb(phase, info):
        if phase == "start":
            _t[1] = time.perf_counter()
        else:
            d = time.perf_counter() - _t[1]
            _t[0] += d
            _t[2][info["generation"]] += 1
            _t[3][info["generation"]] += d
            _t[4][info["generation"]] += info["collected"]
    gc.callbacks.append(_cb)
    def _dump():
        with open(os.path.join(os.environ["BK_GCLOG"], f"{os.getpid()}.txt"), "w") as f:
            f.write(f"{' '.join(sys.argv[:3])} gc_seconds={_t[0]:.3f} collections={_t[2]} per_gen_s={[round(x,3) for x in _t[3]]} collected={_t[4]}\n")
    atexit.register(_dump)
    import signal
if os.environ.get("BK_GC0"):
    import gc as _gc
    _orig = _gc.set_threshold
    def _set(t0, *rest):
        _orig(int(os.environ["BK_GC0"]), *rest)
    _gc.set_threshold = _set
