"""Ad-hoc: one client's bulk appends into one Python bookie, then the bookie's journal metrics (group sizes,
write+sync time) and CPU. PYTHONPATH=. python $H/rawbulk_metrics.py SIZE OUTSTANDING"""
import json, re, subprocess, sys, time, urllib.request
from bench.common import Cluster
from bench.write_cpu import cpu_seconds as _cpu
size, outstanding = sys.argv[1], sys.argv[2]
def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S*journal\S*(?:_sum|_count))\s+(\S+)$", text, re.M)}
with Cluster(make_jars=False) as cluster:
    uri = cluster.new_root("py")
    b = cluster.python_bookies(uri, 1, "py")
    port = b.bookies[0].http_port; pid = b.bookies[0].process.pid
    for r in range(2):
        m0 = metrics(port); c0 = _cpu(pid); t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "bench.pyclient", "write", "--zk", uri, "--entries", "1000000",
                              "--size", size, "--outstanding", outstanding, "--warmup", "0", "--bulk", "500"],
                             stdout=subprocess.PIPE, text=True).stdout
        secs = time.perf_counter() - t0; m1 = metrics(port); c1 = _cpu(pid)
        o = json.loads(out.strip().splitlines()[-1])
        d = {k: m1[k] - m0.get(k, 0) for k in m1}
        print(f"round {r}: {o['entries_per_sec']:,.0f} entries/s; bookie CPU {(c1 - c0) / secs:.2f} cores over {secs:.1f} s")
        for k, v in sorted(d.items()):
            print(f"   {k} {v:,.1f}")
        cnt = [v for k, v in d.items() if k.endswith("batch_size_count")]
        sm = [v for k, v in d.items() if k.endswith("batch_size_sum")]
        lat = [v for k, v in d.items() if "latency" in k and k.endswith("_sum")]
        if cnt and sm:
            print(f"   groups {cnt[0]:,.0f}, mean {sm[0] / cnt[0]:.0f} records; journal busy {lat[0] / 1000 / secs:.2f} of the time" if lat else "")
