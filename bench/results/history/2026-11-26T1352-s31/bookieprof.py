import subprocess, sys, os, time
from bench.common import Cluster
from bench.write_cpu import cpu_seconds
OUT = sys.argv[1]; NATIVE = len(sys.argv) > 2
with Cluster(None, False, make_jars=False) as c:
    uri = c.new_root("python"); pb = c.python_bookies(uri, 1, "python")
    pid = pb.bookies[0].process.pid
    subprocess.run([sys.executable, "-m", "bench.pyclient", "write", "--zk", uri, "--digest", "CRC32C", "--entries", "100000", "--size", "100", "--warmup", "2000", "--bulk", "10000", "--ensemble", "1", "--write", "1", "--ack", "1"], capture_output=True)
    spy = subprocess.Popen(["py-spy", "record", *(["--native"] if NATIVE else []), "--format", "raw", "-o", OUT, "--rate", "200", "--pid", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); time.sleep(1)
    before = cpu_seconds(pid)
    p = subprocess.run([sys.executable, "-m", "bench.pyclient", "write", "--zk", uri, "--digest", "CRC32C", "--entries", "1000000", "--size", "100", "--warmup", "0", "--bulk", "10000", "--ensemble", "1", "--write", "1", "--ack", "1"], capture_output=True, text=True)
    after = cpu_seconds(pid)
    spy.send_signal(2); spy.wait(60)
    print(p.stdout.strip()[-300:]); print("bookie cpu us/entry", (after - before))
