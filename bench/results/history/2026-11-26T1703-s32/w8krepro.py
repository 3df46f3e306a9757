"""Two concurrent bulk writers (calls of BULK, OUT in flight) against one Java 4.17.3 bookie: does the client give it up?"""
import subprocess, sys, os
from bench.common import Cluster
BULK, OUT, N = sys.argv[1], sys.argv[2], sys.argv[3]
with Cluster(None, False, make_jars=False) as c:
    uri = c.new_root("java"); c.java_bookies(uri, 1, "4.17.3", "java")
    argv = [sys.executable, "-c", "import logging,sys,runpy; logging.basicConfig(level=logging.INFO); sys.argv=['pyclient']+sys.argv[1:]; runpy.run_module('bench.pyclient', run_name='__main__')", "write", "--zk", uri, "--digest", "CRC32C", "--entries", N, "--size", "100",
            "--warmup", "0", "--bulk", BULK, "--outstanding", OUT, "--ensemble", "1", "--write", "1", "--ack", "1"]
    env = dict(os.environ, BKSPARK_LOG_LEVEL="INFO")
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate()
        print("rc", p.returncode, out.strip()[-160:])
        if p.returncode:
            print("\n".join(l for l in err.splitlines() if "INFO" in l or "WARN" in l or "Error" in l)[-4000:])
