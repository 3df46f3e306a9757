import os, sys, time
sys.path.insert(0, "/tmp/s38/ds")
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession, functions as F
from firstbatch import S
spark = (SparkSession.builder.master("local[2,2]").config("spark.ui.enabled", "false").config("spark.driver.memory", "512m")
         .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20").getOrCreate())
spark.dataSource.register(S)
n, sleep = int(sys.argv[1]), float(sys.argv[2])
@F.udf("binary")
def slow(value):
    time.sleep(sleep)
    return f"killed-{value}".encode()
open("/tmp/s38/t0", "w").write(str(time.time()))
spark.range(0, n, 1, 2).select(F.concat(F.lit("killed-"), F.col("id").cast("string"), F.expr(f"coalesce(reflect('java.lang.Thread', 'sleep', cast({int(sleep*1000)} as bigint)), '')")).cast("binary").alias("payload")).write.format("firstbatch").mode("append").save()
print(open("/tmp/s38/firstbatch.log").read())
