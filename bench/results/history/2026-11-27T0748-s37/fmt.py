import sys, ast
for line in sys.stdin:
    r, _, rest = line.partition(' ')
    try: outs = ast.literal_eval(rest)
    except Exception: print(line[:200]); continue
    print(r, [ (round(o['entries_per_sec']), o['latency_ms']['p50'], o['latency_ms']['p99'], o['latency_ms']['max']) for o in outs], 'sum', round(sum(o['entries_per_sec'] for o in outs)))
