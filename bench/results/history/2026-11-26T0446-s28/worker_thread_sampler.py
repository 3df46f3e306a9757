import os, time, sys, json
out = open(sys.argv[1], "w")
tick = os.sysconf("SC_CLK_TCK")
prev = {}
while True:
    now = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit(): continue
        try:
            cmd = open(f"/proc/{pid}/cmdline","rb").read().replace(b"\0",b" ").decode(errors="replace")
        except OSError: continue
        if "pyspark.daemon" not in cmd and "pyspark.worker" not in cmd: continue
        try: tids = os.listdir(f"/proc/{pid}/task")
        except OSError: continue
        for tid in tids:
            try:
                st = open(f"/proc/{pid}/task/{tid}/stat").read()
                comm = st[st.index("(")+1:st.rindex(")")]
                f = st[st.rindex(")")+2:].split()
                now[(pid, tid)] = (int(f[11]) + int(f[12]), comm)
            except (OSError, ValueError): pass
    busy = {f"{p}/{t}/{c}": (v - prev.get((p, t), (0, ""))[0]) / tick for (p, t), (v, c) in now.items() if v - prev.get((p, t), (0, ""))[0] > 0}
    if busy:
        out.write(f"{time.strftime('%H:%M:%S')} {json.dumps(busy)}\n"); out.flush()
    prev = now
    time.sleep(1)
