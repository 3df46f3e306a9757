"""The Python bookie under the Spark writer's shape (CLIENTS bkspark clients, bulk 500, 2,000 in flight, 100 B,
1/1/1): its CPU per entry by thread (user, system), and its journal's group commits (records per commit, sync
time) from /metrics."""
import concurrent.futures, json, os, re, subprocess, sys, urllib.request
from bench.common import Cluster, py_bench

N = int(os.environ.get("ENTRIES", "1000000"))
CLIENTS = int(os.environ.get("CLIENTS", "2"))
TICK = os.sysconf("SC_CLK_TCK")


NAMES = {}


def thread_names(pid):
    """Python thread names by native thread id, from py-spy dump."""
    spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    out = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True).stdout
    for m in re.finditer(r'^Thread (\S+) \(([^)]*)\): "([^"]*)"', out, re.M):
        tid = m.group(1)
        NAMES[int(tid, 16) if tid.startswith("0x") else int(tid)] = m.group(3)
    return out


def threads(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
            name = NAMES.get(int(tid), "tid-" + tid)
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        u, s = int(fields[11]), int(fields[12])
        a = out.setdefault(name, [0, 0])
        a[0] += u; a[1] += s
    return out


def metrics(pb):
    port = pb.bookies[0].http_port
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    got = {}
    for name in ("bookie_journal_JOURNAL_FORCE_WRITE_BATCH_ENTRIES", "bookie_journal_JOURNAL_SYNC"):
        for kind in ("sum", "count"):
            m = re.search(rf"^{name}_{kind}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
            got[f"{name}_{kind}"] = float(m.group(1)) if m else None
    return got


def write(uri, n, warm):
    """One bkspark client in the Spark writer's shape (bench.common.py_bench): its entries/s."""
    return py_bench(uri, "write", digest="CRC32C", entries=n, size=100, warmup=warm, bulk=500, outstanding=2000,
                    ensemble=1, write=1, ack=1)["entries_per_sec"]


with Cluster(None, False, make_jars=False) as c:
    uri = c.new_root("python")
    pb = c.python_bookies(uri, 1, "python")
    pid = pb.bookies[0].process.pid
    write(uri, 100000, 2000)
    print(thread_names(pid)[:3000])
    for r in range(int(os.environ.get("ROUNDS", "2"))):
        t0, m0 = threads(pid), metrics(pb)
        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as clients:  # the clients run at once
            rates = list(clients.map(lambda _: write(uri, N // CLIENTS, 0), range(CLIENTS)))
        t1, m1 = threads(pid), metrics(pb)
        per = {name: [round((t1[name][i] - t0.get(name, [0, 0])[i]) / TICK / N * 1e6, 3) for i in (0, 1)]
               for name in t1 if t1[name] != t0.get(name)}
        d = {k: m1[k] - m0[k] for k in m1 if m1[k] is not None and m0[k] is not None}
        commits = d.get("bookie_journal_JOURNAL_FORCE_WRITE_BATCH_ENTRIES_count") or 1
        print(json.dumps({"round": r, "entries_per_s": round(sum(rates)),
                          "us_per_entry_by_thread_user_sys": per,
                          "group_commits": commits,
                          "records_per_commit": round(d.get("bookie_journal_JOURNAL_FORCE_WRITE_BATCH_ENTRIES_sum", 0) / commits, 1),
                          "sync_ms_mean": round(d.get("bookie_journal_JOURNAL_SYNC_sum", 0) / commits, 3)}), flush=True)
