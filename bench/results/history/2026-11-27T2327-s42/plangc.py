import gc, time, sys
from bkspark.datasource.planning import plan_partitions, split_ledger
def run():
    slices = []
    for i in range(100_000):
        slices.extend(split_ledger(0, i + 1, 0, 9, 100_000))
    return plan_partitions(slices, 100_000)
for mode in ("gc on", "gc off", "gc on"):
    if mode == "gc off": gc.disable()
    else: gc.enable()
    t = time.perf_counter(); n = len(run()); print(mode, n, round(time.perf_counter() - t, 2), "s")
