"""read_cold(key, 100) over a ledger of 200,000 entries of 100 B on disk (page cache warm): CPU per call with the
read-ahead chunk at 256 KiB (the module's) and at smaller sizes; then remember() of what each call brought."""
import struct, tempfile, time
from pathlib import Path
from bookie_server import storage as storage_module
from bookie_server.storage import LedgerStorage
from bookie_server.journal import JournalPosition

N = 200_000


def on_disk(directory: str) -> LedgerStorage:
    """A storage whose ledger 1 holds N entries of 100 B, checkpointed to its entry log."""
    st = LedgerStorage([Path(directory)])
    st.open()
    st.set_master_key(0, 1, b"k" * 20)
    for first in range(0, N, 1000):
        ids = range(first, first + 1000)
        st.put_entries(0, [(1, i, i - 1) for i in ids], [struct.pack(">qqqq", 1, i, i - 1, 100) + b"\0" * 4 + b"x" * 100 for i in ids])
    st.checkpoint(JournalPosition(1, 1))
    return st


with tempfile.TemporaryDirectory() as d:
    st = on_disk(d)
    for chunk in (256 * 1024, 64 * 1024, 32 * 1024, 16 * 1024):
        storage_module._READ_AHEAD = chunk
        for rep in range(2):
            t = time.process_time()
            calls = entries = 0
            for first in range(0, N, 100):
                found = st.read_cold((0, 1, first), 100)
                calls += 1
                entries += len(found)
            el = time.process_time() - t
            print(f"chunk {chunk // 1024:4d} KiB: {el / calls * 1e6:7.1f} us per read_cold, {entries / calls:.1f} entries each")
    st.close()

with tempfile.TemporaryDirectory() as d:
    st = on_disk(d)
    storage_module._READ_AHEAD = 256 * 1024
    founds = [st.read_cold((0, 1, first), 100) for first in range(0, N, 100)]
    t = time.process_time()
    for found in founds:
        st.remember(found)
    el = time.process_time() - t
    print(f"remember: {el / len(founds) * 1e6:.1f} us per call of 100 entries")
    st.close()
