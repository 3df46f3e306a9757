"""Main-thread and loop-thread cost per row of a one-row Spark write's bulk append: the payloads of an Arrow batch
(old: a bytes slice per row; new: PackedPayloads) and their ADDENTRY frames (v2_add_frames of the slices, against
v2_add_frames_packed straight from the buffer)."""
import time, pyarrow as pa, os
from bkspark.datasource.writer import _payload_buffers
from bkspark.client.payloads import PackedPayloads
import bkspark.client.ops as ops
from bkspark.protocol import v2
sp = ops._speedups
for size in (100, 1024):
    n = 10000
    batch = pa.record_batch([pa.array([os.urandom(size) for _ in range(n)], pa.binary())], names=["payload"])
    def t(f, reps=50):
        best = 1e9
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(reps): f()
            best = min(best, (time.perf_counter() - t0) / reps / n * 1e6)
        return best
    def slices():
        offsets, data = _payload_buffers(batch, 0, False)
        b = offsets.tolist()
        return [data[x:y] for x, y in zip(b, b[1:])]
    def packed():
        offsets, data = _payload_buffers(batch, 0, False)
        return PackedPayloads(data, offsets)
    pl, pk = slices(), packed()
    hdr, key = v2.add_request_header(0), b"k" * 20
    assert sp.v2_add_frames(hdr, key, 5, 0, -1, 0, pl) == sp.v2_add_frames_packed(hdr, key, 5, 0, -1, 0, pk.data, pk.bounds)
    print(size, "B: main thread µs/row: slices", round(t(slices), 3), "packed", round(t(packed), 3),
          "| loop thread: frames of slices", round(t(lambda: sp.v2_add_frames(hdr, key, 5, 0, -1, 0, pl)), 3),
          "frames packed", round(t(lambda: sp.v2_add_frames_packed(hdr, key, 5, 0, -1, 0, pk.data, pk.bounds)), 3),
          "ends", round(t(lambda: pk.ends(0)), 3))
