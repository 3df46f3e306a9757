# %% [markdown]
# # bkspark quickstart: BookKeeper ledgers as a Spark table
#
# This walks through the `bookkeeper` data source of PySpark 4: write a DataFrame to BookKeeper ledgers,
# read it back, select ledgers and entries, and see what the connector records about each ledger.
# The notebook `examples/quickstart.ipynb` holds the same cells.
#
# You need: bkspark installed (`pip install bkspark`, or `make venv` in a checkout), Java 17 for Spark, and a
# BookKeeper cluster. Without `BKSPARK_METADATA_SERVICE_URI` set, the next cells start a local one
# (ZooKeeper and three Python bookies, as `bkspark cluster start` does) and stop it at the end.

# %%
import contextlib
import os
import sys

# Spark's Python workers must run an interpreter that has bkspark: this one.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

ROWS = int(os.environ.get("BKSPARK_QUICKSTART_ROWS", "100000"))
DATASET = "quickstart-events"

# %%
# A BookKeeper cluster: the one named by BKSPARK_METADATA_SERVICE_URI, or a local one started here.
resources = contextlib.ExitStack()
uri = os.environ.get("BKSPARK_METADATA_SERVICE_URI")
if not uri:
    from bkspark.devcluster import LocalCluster

    uri = resources.enter_context(LocalCluster(bookies=3)).metadata_service_uri
print(uri)

# %%
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

spark = SparkSession.builder.master("local[2]").appName("bkspark-quickstart").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")

# %% [markdown]
# ## Write
#
# The DataFrame needs a `payload` column (binary or string); every row becomes one entry. Each Spark task
# writes its rows, in order, into a ledger of its own, and the job's commit publishes those ledgers as the
# dataset. Always give `.mode(...)`: `append` adds ledgers to the dataset, `overwrite` replaces them.

# %%
events = spark.range(ROWS, numPartitions=4).select(
    F.to_json(F.struct(F.col("id").alias("order"), (F.col("id") % 7).alias("store"))).alias("payload")
)
(events.write.format("bookkeeper")
    .option("metadataServiceUri", uri)
    .option("dataset", DATASET)
    .option("ensembleSize", "3").option("writeQuorumSize", "2").option("ackQuorumSize", "2")
    .mode("overwrite")
    .save())

# %% [markdown]
# ## Read
#
# `format("bookkeeper")` needs no registration call: PySpark finds the `pyspark_bookkeeper` module that
# bkspark installs. The schema is fixed: `scope_id, ledger_id, entry_id, payload, ledger_ctime, key`
# (`includeHeaders` adds `headers`, `includeCustomMetadata` the ledger's `custom_metadata`); decode payloads
# yourself (here with `from_json`).

# %%
df = (spark.read.format("bookkeeper")
      .option("metadataServiceUri", uri)
      .option("dataset", DATASET)
      .load())
df.printSchema()
orders = df.select("ledger_id", "entry_id",
                   F.from_json(F.col("payload").cast("string"), "order BIGINT, store INT").alias("o"))
orders.select("ledger_id", "entry_id", "o.*").orderBy("o.order").show(5)

# %%
count = df.count()
print(f"{count} entries in {df.select('ledger_id').distinct().count()} ledgers")
assert count == ROWS
assert orders.select(F.sum("o.order")).first()[0] == ROWS * (ROWS - 1) // 2

# %% [markdown]
# ## Pick ledgers and entries
#
# `ledgers` reads ledger ids or ranges (`"7,9,12"`, `"10-20"`), whichever program wrote them, and
# `startEntry`/`endEntry` cut every ledger's entry range. With Spark's filter pushdown on, filters on
# `ledger_id` and `entry_id` choose what is read, so only those entries leave the bookies.

# %%
ledger_ids = sorted(r.ledger_id for r in df.select("ledger_id").distinct().collect())
first_ten = (spark.read.format("bookkeeper")
             .option("metadataServiceUri", uri)
             .option("ledgers", ",".join(map(str, ledger_ids)))
             .option("endEntry", "9")
             .load())
print(first_ten.count(), "entries: the first 10 of each ledger")

spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
one_ledger = df.where((F.col("ledger_id") == ledger_ids[0]) & (F.col("entry_id") < 3))
one_ledger.select("ledger_id", "entry_id", F.col("payload").cast("string").alias("payload")).show()

# %% [markdown]
# ## What the writer recorded
#
# Every ledger the connector writes carries custom metadata: the dataset, the write job, the Spark
# partition and task attempt, and a create and close context (`bkspark.ctx.*`). The Java shell's
# `ledgermetadata` shows the same keys. The `custom_metadata` column holds them with
# `includeCustomMetadata=true` (off by default, as Kafka's `includeHeaders`).

# %%
with_meta = (spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", DATASET)
             .option("includeCustomMetadata", "true").load())
meta = with_meta.where(F.col("entry_id") == 0).select("ledger_id", "custom_metadata").orderBy("ledger_id").first()
print(meta.ledger_id, {k: bytes(v)[:60] for k, v in meta.custom_metadata.items()})

# %% [markdown]
# ## Streaming: follow the dataset, and copy it exactly once
#
# `spark.readStream.format("bookkeeper")` follows a dataset (or ledgers) as commits add ledgers and writers
# append to open ones; `maxEntriesPerTrigger` bounds each micro-batch, `Trigger.AvailableNow` reads what is
# there and stops. `writeStream.format("bookkeeper")` appends each micro-batch to a dataset exactly once, keyed
# by the checkpoint location. See docs/streaming.md.

# %%
import tempfile

checkpoints = tempfile.mkdtemp(prefix="bkspark-quickstart-")
COPY = DATASET + "-copy-" + os.path.basename(checkpoints)  # a new query (new checkpoint) writes a new copy
stream = (spark.readStream.format("bookkeeper")
          .option("metadataServiceUri", uri)
          .option("dataset", DATASET)
          .option("maxEntriesPerTrigger", str(max(1, ROWS // 3)))
          .load())
copy = (stream.select("payload").writeStream.format("bookkeeper")
        .option("metadataServiceUri", uri)
        .option("dataset", COPY)
        .option("checkpointLocation", os.path.join(checkpoints, "copy"))
        .trigger(availableNow=True)
        .start())
copy.awaitTermination()
print([p["numInputRows"] for p in copy.recentProgress if p["numInputRows"]], "entries per micro-batch")
copied = spark.read.format("bookkeeper").option("metadataServiceUri", uri).option("dataset", COPY).load()
assert copied.count() == ROWS

# %%
spark.stop()
resources.close()
