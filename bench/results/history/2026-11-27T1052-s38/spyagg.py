"""Ad-hoc: summarise py-spy raw files: per file, samples, and inclusive counts of frames at a given depth."""
import sys, collections
depth = int(sys.argv[1]); files = sys.argv[2:]
for f in files:
    incl = collections.Counter(); total = 0; selfc = collections.Counter()
    for line in open(f):
        stack, _, n = line.rstrip().rpartition(" ")
        n = int(n); total += n
        frames = stack.split(";")
        frames = [fr for fr in frames if not fr.startswith("process ")]
        key = ";".join(fr.split(" (")[0] + ("(" + fr.split(" (")[1].split(":")[0].split("/")[-1] + ")" if " (" in fr else "") for fr in frames[:depth])
        incl[key] += n
        selfc[frames[-1].split(" (")[0] + " " + (frames[-1].split("(")[1].split(")")[0].split("/")[-1] if "(" in frames[-1] else "")] += n
    print(f"== {f}: {total} samples ({total/200:.2f} s at 200 Hz)")
    for k, v in incl.most_common(12):
        print(f"   {v:6d} {k[-230:]}")
    print("   self:")
    for k, v in selfc.most_common(8):
        print(f"   {v:6d} {k}")
