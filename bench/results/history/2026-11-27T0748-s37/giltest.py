import lmdb, threading, time, tempfile, struct, os
d = tempfile.mkdtemp()
env = lmdb.open(d, map_size=1<<30, max_dbs=2, sync=False)
db = env.open_db(b"i")
rows = [(struct.pack(">QQQ", 0, 5, i), struct.pack(">QQI", 1, i*136, 100)) for i in range(500000)]
ticks = []
stop = threading.Event()
def ticker():
    last = time.perf_counter()
    while not stop.is_set():
        time.sleep(0.001)
        now = time.perf_counter(); ticks.append(now - last); last = now
t = threading.Thread(target=ticker); t.start()
time.sleep(0.05)
t0 = time.perf_counter()
with env.begin(write=True) as txn:
    txn.cursor(db=db).putmulti(rows)
t1 = time.perf_counter()
time.sleep(0.05); stop.set(); t.join()
print(f"putmulti {(t1-t0)*1e3:.0f} ms; longest gap in the other thread {max(ticks)*1e3:.1f} ms; lmdb {lmdb.__version__} {lmdb.__file__}")
