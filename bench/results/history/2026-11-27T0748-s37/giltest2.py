import threading, time, os, sys
sys.path.insert(0, "/work/wt/nosync")
from bookie_server.storage import log_records, log_records_reference
from bookie_server import _speedups
n = int(sys.argv[1]) if len(sys.argv) > 1 else 494000
entries = {(5 << 128) | (7 << 64) | i: os.urandom(100) for i in range(n)}
keys = list(entries)
ticks = []; stop = threading.Event()
def ticker():
    last = time.perf_counter()
    while not stop.is_set():
        time.sleep(0.001)
        now = time.perf_counter(); ticks.append(now - last); last = now
for r in range(3):
    ticks.clear(); stop.clear()
    t = threading.Thread(target=ticker); t.start(); time.sleep(0.02)
    t0 = time.perf_counter()
    blob, rows = log_records(keys, entries, lambda size: (1, 0))
    t1 = time.perf_counter()
    time.sleep(0.02); stop.set(); t.join()
    print(f"log_records {(t1-t0)*1e3:.0f} ms for {n}; longest gap {max(ticks)*1e3:.1f} ms")
