import collections, re, sys
by_thread = collections.Counter(); self_t = collections.Counter(); incl = collections.Counter(); tot = 0
for line in open(sys.argv[1]):
    line = line.rstrip()
    if not line: continue
    stack, _, count = line.rpartition(" ")
    n = int(count); frames = stack.split(";")
    thread = frames[0]; frames = frames[1:]
    if not frames: continue
    tot += n
    by_thread[re.sub(r"0x[0-9a-f]+", "", thread)] += n
    self_t[frames[-1]] += n
    for f in set(frames): incl[f] += n
print("samples", tot)
for k, v in by_thread.most_common(8): print(f"{v/tot:6.1%} {k}")
print("-- self")
for k, v in self_t.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 25): print(f"{v/tot:6.1%} {k[:140]}")
print("-- inclusive")
for k, v in incl.most_common(40): print(f"{v/tot:6.1%} {k[:140]}")
