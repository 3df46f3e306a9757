"""Ad-hoc: the first load() of a fresh Spark session (the create_data_source planner: daemon start, schema())."""
import os, sys, time
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
spark.range(10).count()  # the JVM warm, no Python worker yet
t0 = time.perf_counter()
df = spark.read.format("bookkeeper").option("metadataServiceUri", "zk+hierarchical://127.0.0.1:1/ledgers").option("dataset", "x").load()
t1 = time.perf_counter()
df2 = spark.read.format("bookkeeper").option("metadataServiceUri", "zk+hierarchical://127.0.0.1:1/ledgers").option("dataset", "y").load()
t2 = time.perf_counter()
print(f"LOAD first {t1 - t0:.3f} s, second {t2 - t1:.3f} s")
spark.stop()
