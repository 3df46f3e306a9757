"""Counts ThreadPoolExecutor.submit calls and LedgerStorage.read_cold calls (and entries they bring) in every Python
process; writes them at exit to $BK_COUNT_DIR/<pid>.json."""
import atexit, json, os, sys, concurrent.futures
_d = os.environ.get("BK_COUNT_DIR")
if _d:
    counts = {"submit": 0, "read_cold": 0, "read_cold_entries": 0, "memory_hits_calls": 0, "memory_hits_reads": 0,
              "argv": sys.argv[:3]}
    _orig = concurrent.futures.ThreadPoolExecutor.submit
    def submit(self, *a, **k):
        counts["submit"] += 1
        return _orig(self, *a, **k)
    concurrent.futures.ThreadPoolExecutor.submit = submit
    def _patch():
        try:
            from bookie_server import storage
        except Exception:
            return
        orig = storage.LedgerStorage.read_cold
        def read_cold(self, address, max_entries=1):
            out = orig(self, address, max_entries)
            counts["read_cold"] += 1
            counts["read_cold_entries"] += len(out)
            return out
        storage.LedgerStorage.read_cold = read_cold
        orig_hits = storage.LedgerStorage.memory_hits
        def memory_hits(self, scope_id, reads):
            counts["memory_hits_calls"] += 1
            counts["memory_hits_reads"] += len(reads)
            return orig_hits(self, scope_id, reads)
        storage.LedgerStorage.memory_hits = memory_hits
    import builtins
    _imp = builtins.__import__
    def hook(name, *a, **k):
        m = _imp(name, *a, **k)
        if name.startswith("bookie_server") and not getattr(hook, "done", False):
            try:
                import bookie_server.storage  # noqa
                hook.done = True
                _patch()
            except Exception:
                pass
        return m
    builtins.__import__ = hook
    def dump():
        with open(os.path.join(_d, f"{os.getpid()}.json"), "w") as f:
            json.dump(counts, f)
    atexit.register(dump)
