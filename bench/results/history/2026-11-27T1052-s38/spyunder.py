"""Ad-hoc: inclusive samples of the frames called under a frame matching argv[1], to depth argv[2]."""
import sys, collections
pat = sys.argv[1]; depth = int(sys.argv[2])
c = collections.Counter(); tot = 0
for f in sys.argv[3:]:
    for line in open(f):
        stack, _, n = line.rstrip().rpartition(" ")
        fr = stack.split(";")
        idx = next((i for i, x in enumerate(fr) if pat in x), None)
        if idx is None: continue
        n = int(n); tot += n
        c[" ; ".join(x.split(" (")[0] + "@" + x.split("(")[-1].split("/")[-1].rstrip(")") for x in fr[idx + 1: idx + 1 + depth])] += n
print(f"{tot} samples under {pat}")
for k, v in c.most_common(25): print(f"{v:6d} {k}")
