"""The Python bookie's checkpoint alone: 1,000,000 entries of 100 B (+ header) in runs of 500 from two ledgers,
checkpointed every 64 MiB of write cache as the bookie does; cProfile of the checkpoints, CPU per entry."""
import cProfile, os, pstats, struct, sys, tempfile, time
from pathlib import Path
from bookie_server.storage import LedgerStorage
from bookie_server.journal import JournalPosition

N = int(os.environ.get("ENTRIES", "1000000"))
RUN = 500
payload = b"x" * 100


def entry(ledger, eid):
    return struct.pack(">qqqq", ledger, eid, eid - 1, 100) + b"\0" * 4 + payload


with tempfile.TemporaryDirectory() as d:
    st = LedgerStorage([Path(d)])
    st.open()
    for lg in (1, 2):
        st.set_master_key(0, lg, b"k" * 20)
    prof = cProfile.Profile()
    cp_cpu = 0.0
    put_cpu = 0.0
    mark = 0
    next_id = {1: 0, 2: 0}
    done = 0
    while done < N:
        for lg in (1, 2):
            first = next_id[lg]
            adds = [(lg, first + i, first + i - 1) for i in range(RUN)]
            data = [entry(lg, first + i) for i in range(RUN)]
            t = time.process_time()
            st.put_entries(0, adds, data)
            put_cpu += time.process_time() - t
            next_id[lg] += RUN
            done += RUN
        if st.needs_flush or done >= N:
            mark += 1
            t = time.process_time()
            prof.enable()
            st.checkpoint(JournalPosition(1, mark))
            prof.disable()
            cp_cpu += time.process_time() - t
    st.close()
    print(f"put_entries {put_cpu / N * 1e6:.3f} us/entry, checkpoint {cp_cpu / N * 1e6:.3f} us/entry (process CPU)")
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)
