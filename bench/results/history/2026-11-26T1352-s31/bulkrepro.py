import subprocess, sys, time, json
from bench.common import Cluster
bulk = sys.argv[1]; kind = sys.argv[2] if len(sys.argv) > 2 else "java"
with Cluster(None, True, make_jars=False) as c:
    uri = c.new_root(kind)
    if kind == "java":
        c.java_bookies(uri, 1, "4.17.3", "java")
    else:
        c.python_bookies(uri, 1, "python")
    print("base", c.base, flush=True)
    for b in bulk.split(","):
        p = subprocess.run([sys.executable, "-m", "bench.pyclient", "write", "--zk", uri, "--digest", "CRC32C", "--entries", sys.argv[3] if len(sys.argv) > 3 else "200000", "--size", "100", "--warmup", "2000", "--bulk", b, "--ensemble", "1", "--write", "1", "--ack", "1"], capture_output=True, text=True)
        print(b, p.stdout[-600:], p.stderr[-3000:], flush=True)
