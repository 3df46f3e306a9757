import gc, sys, time, atexit
t = {}; n = {}; start = [0.0]
def cb(phase, info):
    if phase == "start": start[0] = time.perf_counter()
    else:
        g = info["generation"]; t[g] = t.get(g, 0) + time.perf_counter() - start[0]; n[g] = n.get(g, 0) + 1
gc.callbacks.append(cb)
atexit.register(lambda: print("GC", {g: (n[g], round(t[g]*1000, 1)) for g in sorted(t)}, "ms", file=sys.stderr))
from bench.pyclient import main
sys.exit(main(sys.argv[1:]))
