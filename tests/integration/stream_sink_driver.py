"""A streaming query's driver for the exactly-once tests: bookkeeper ledgers -> bookkeeper dataset sink.

Run as ``python -m tests.integration.stream_sink_driver URI LEDGERS DATASET CHECKPOINT [--wait]``; it reads the
ledgers a few entries per trigger with Trigger.AvailableNow and writes every entry's payload into the dataset,
restarting from CHECKPOINT.  It prints STARTED once the query runs and PROGRESS <batch id> after each micro-batch;
the tests SIGKILL it at random points (a random number of batches in, then a random delay) and run it again until it
exits 0.

With ``--wait`` it builds its SparkSession (the JVM's start: about half of the 10 s before its query runs), then
waits for a line on stdin before it touches the cluster or the checkpoint: a test starts the next run this way while
the current one runs, and sends the line once the current one is dead.
"""

from __future__ import annotations

import os
import sys


def main(uri: str, ledgers: str, dataset: str, checkpoint: str, *flags: str) -> int:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2,2]").appName("bkspark-stream-sink-driver")
        .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "768m").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):
        """One line per finished micro-batch: the tests kill the driver a random number of batches in."""

        def onQueryStarted(self, event) -> None:  # type: ignore[no-untyped-def]
            pass

        def onQueryProgress(self, event) -> None:  # type: ignore[no-untyped-def]
            print(f"PROGRESS {event.progress.batchId}", flush=True)

        def onQueryIdle(self, event) -> None:  # type: ignore[no-untyped-def]
            pass

        def onQueryTerminated(self, event) -> None:  # type: ignore[no-untyped-def]
            pass

    spark.streams.addListener(Progress())
    if "--wait" in flags:
        sys.stdin.readline()
    source = (
        spark.readStream.format("bookkeeper").option("metadataServiceUri", uri).option("ledgers", ledgers)
        .option("maxEntriesPerTrigger", "40").option("maxEntriesPerPartition", "15").load()
    )
    query = (
        source.select("payload").writeStream.format("bookkeeper").option("metadataServiceUri", uri)
        .option("dataset", dataset).option("ensembleSize", "3").option("writeQuorumSize", "2")
        .option("ackQuorumSize", "2").option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )
    print("STARTED", flush=True)
    query.awaitTermination()
    print("FINISHED", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
