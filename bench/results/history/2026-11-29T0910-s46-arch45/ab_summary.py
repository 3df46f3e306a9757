"""Medians, ranges and per-round ratios of `bench.client_compare --against-tree` JSON results (session 46).

    python ab_summary.py client_compare_ab.json [more.json ...]

For each workload: entries/s of this tree (new) and the other tree (old), median and range of the rounds, new ÷ old
as the ratio of the medians and as the median of the rounds' own ratios (a round runs both trees back to back),
the client process's CPU seconds (old ÷ new) and the latency percentiles (medians of the rounds).
"""

import json
import statistics as st
import sys
from collections import defaultdict

for path in sys.argv[1:]:
    d = json.load(open(path))
    print(d["command"])
    print("load before", d["machine_before"]["loadavg_1_5_15"], "after", d["machine_after"]["loadavg_1_5_15"],
          d["machine_before"]["date"])
    runs = defaultdict(list)
    for r in d["raw"]:
        what = ("bulk write" if r.get("bulk") else "write") if r.get("event") == "write" else r.get("mode")
        runs[(r["label"], what)].append(r)
    for what in ["write", "bulk write", "batch", "single", "arrow"]:
        new, old = runs[("bkspark", what)], runs[("bkspark (other tree)", what)]
        if not new:
            continue
        ne, oe = [r["entries_per_sec"] for r in new], [r["entries_per_sec"] for r in old]
        nc, oc = [r["process_cpu_s"] for r in new], [r["process_cpu_s"] for r in old]
        per_round = [a / b for a, b in zip(ne, oe)]
        n50, o50 = [r["latency_ms"]["p50"] for r in new], [r["latency_ms"]["p50"] for r in old]
        n99, o99 = [r["latency_ms"]["p99"] for r in new], [r["latency_ms"]["p99"] for r in old]
        print(f"{what:10} entries/s new {st.median(ne):8,.0f} ({min(ne):,.0f}-{max(ne):,.0f}) old {st.median(oe):8,.0f} "
              f"({min(oe):,.0f}-{max(oe):,.0f}) new/old {st.median(ne) / st.median(oe):.2f} per round "
              f"{st.median(per_round):.2f} [{', '.join(f'{x:.2f}' for x in per_round)}]")
        print(f"{'':10} cpu s new {st.median(nc):.2f} old {st.median(oc):.2f} old/new {st.median(oc) / st.median(nc):.2f}; "
              f"p50 ms new {st.median(n50):.2f} old {st.median(o50):.2f}; p99 ms new {st.median(n99):.1f} old {st.median(o99):.1f}")
    print()
