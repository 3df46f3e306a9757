"""The stream sink's job names: a query's micro-batch jobs are found by batch and run, never another query's."""

from __future__ import annotations

from bkspark.datasource.stream_writer import batch_job_id, parse_batch_job_id, query_writer


def test_batch_job_ids_round_trip_and_other_queries_jobs_are_not_ours() -> None:
    writer = query_writer("/checkpoints/copy")
    assert writer == query_writer("/checkpoints/copy/")  # the same checkpoint, however it is written
    run = "0c1e5a3b-7f6d-4e2a-9b1c-2d3e4f5a6b7c"  # Spark's run ids hold dashes
    assert parse_batch_job_id(writer, batch_job_id(writer, 12, run)) == (12, run)
    other = query_writer("/checkpoints/other")
    assert parse_batch_job_id(writer, batch_job_id(other, 12, run)) is None
    assert parse_batch_job_id(writer, f"{writer}x-1-{run}") is None  # a writer whose name merely starts like ours
    assert parse_batch_job_id(writer, f"{writer}-1") is None and parse_batch_job_id(writer, f"{writer}-a-{run}") is None
    assert parse_batch_job_id(writer, "0123456789abcdef") is None  # a batch write job (a UUID)


def test_the_sink_needs_a_checkpoint_location() -> None:
    """docs/streaming.md, writeStream: the sink needs a checkpoint location (the query's identity)."""
    import pytest

    from bkspark.datasource.stream_writer import parse_stream_write_options
    from bkspark.errors import InvalidOptionError

    base = {"metadataServiceUri": "zk+hierarchical://127.0.0.1:2181/ledgers", "dataset": "copy"}
    with pytest.raises(InvalidOptionError, match="needs a checkpoint location"):
        parse_stream_write_options(base)
    options, checkpoint = parse_stream_write_options({**base, "checkpointLocation": "/cp/copy", "queryName": "q"})
    assert checkpoint == "/cp/copy" and options.dataset == "copy"
