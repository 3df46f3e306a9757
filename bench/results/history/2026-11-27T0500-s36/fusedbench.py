"""Old (split, verify with bytes copies, gather) against new (count, verify-and-gather in one pass, zero-copy
Arrow) for one 1,000-entry batch-read answer, in-process, interleaved; ns per entry (min of trials)."""
import time
from bkspark.protocol import v2
from bkspark.protocol.digest import Digester, DigestType
from bkspark.client.arrow import payload_batch, payload_runs_batch
from bkspark.client.payloads import PackedPayloads

d = Digester(DigestType.CRC32C, b"")

def best(f, R=40, trials=9):
    b = 1e9
    for _ in range(trials):
        t = time.perf_counter()
        for _ in range(R):
            f()
        b = min(b, (time.perf_counter() - t) / R)
    return b

for size in (100, 1024):
    n = 1000
    entries = [d.package_entry(1, i, i - 1, size * (i + 1), bytes([i % 251]) * size) for i in range(n)]
    body = memoryview(v2.encode_batch_read_response(0, 1, 0, 7, entries))[4:]

    def old():
        items = v2._split_batch_items(body)
        payloads, bad = d.verify_payloads(items, 1, 0, 0)
        return payload_batch(0, payloads)

    def new():
        resp = v2.decode_response(body)
        items = resp.entries
        data, bounds, mx, count, nxt = d.verify_payloads_packed(items.body, items.offset, n, 1, 0)
        return payload_runs_batch(0, [PackedPayloads._sharing(data, bounds, mx)])

    assert old().equals(new())
    rows = []
    for _ in range(3):
        rows.append((best(old) / n * 1e9, best(new) / n * 1e9))
    o = min(r[0] for r in rows); w = min(r[1] for r in rows)
    print(f"{size} B: old {o:.0f} ns/entry, new {w:.0f} ns/entry, new/old {w/o:.2f}")
