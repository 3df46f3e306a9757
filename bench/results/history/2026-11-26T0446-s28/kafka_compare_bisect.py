import os, sys
sys.path.insert(0, os.getcwd())
import bench.kafka_compare as kc
skip = set(os.environ.get("SKIP", "").split(","))
if "kraw" in skip:
    kc.KafkaBroker.produce_perf = lambda self, *a, **k: None
    kc.KafkaBroker.consume_perf = lambda self, *a, **k: None
if "bkraw" in skip:
    kc.py_bench = lambda *a, **k: None
if "bkread" in skip:
    _orig = kc.py_bench
    kc.py_bench = lambda uri, mode, **k: None if mode == "read" else _orig(uri, mode, **k)
if "jraw" in skip:
    kc.java_bench = lambda *a, **k: None
if "kspark" in skip:
    kc.payload_frame_orig = kc.payload_frame
sys.exit(kc.main(sys.argv[1:]))
