"""Ad-hoc: a py-spy raw profile recorded with --threads, by thread, then bench.profile's summary."""
import collections, pprint, re, sys
from pathlib import Path
from bench.profile import summarize

by_thread = collections.Counter()
for line in open(sys.argv[1]):
    stack, _, count = line.rstrip().rpartition(" ")
    if stack:
        by_thread[re.sub(r"0x[0-9a-f]+", "", stack.split(";")[0])] += int(count)
total = sum(by_thread.values())
for thread, n in by_thread.most_common(): print(f"{n / total:6.1%} {thread}")
pprint.pprint(summarize(Path(sys.argv[1]), top=int(sys.argv[2]) if len(sys.argv) > 2 else 25), width=140)
