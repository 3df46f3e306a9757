import subprocess, sys, os
from bench.common import Cluster
with Cluster(None, False, make_jars=False) as c:
    uri = c.one_bookie("python", "4.17.3")
    for tree in sys.argv[1:]:
        p = subprocess.run([sys.executable, str(__import__("pathlib").Path(__file__).with_name("gctime.py")), "write", "--zk", uri, "--digest", "CRC32C", "--entries", "500000", "--size", "100", "--warmup", "2000", "--bulk", "10000", "--ensemble", "1", "--write", "1", "--ack", "1"], capture_output=True, text=True, cwd=tree, env=dict(os.environ, PYTHONPATH=os.path.abspath(tree)))
        print(tree, [l for l in p.stderr.splitlines() if l.startswith("GC")], p.stdout[-200:].strip()[:120])
