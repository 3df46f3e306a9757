"""The data source's reader (planning and ``read()``) against real bookies: its Arrow batches, built from gathered
payload buffers, hold exactly the rows of the row-by-row conversion it replaced.

The reader runs in this process (no Spark: ``partitions()`` and ``read()`` are plain Python), so the batch
size bounds can be shrunk with monkeypatch; Spark's own reads through the same code are in
test_connector_spark.py and test_connector_standalone.py.  The reference rows come from the bkspark client's
single-entry reads (``ReadHandle.read``), converted one value at a time (tests/unit/test_connector_arrow.py).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pyarrow as pa
import pytest

from bkspark.client import BookKeeper
from bkspark.datasource import reader as reader_module
from bkspark.datasource import schema as schema_module
from bkspark.datasource.options import parse_read_options
from bkspark.datasource.planning import SliceGroup
from bkspark.datasource.reader import BookKeeperReader
from tests.harness.python_bookie import PythonBookieCluster
from tests.integration.test_connector_spark import java_create_and_write, java_payload, write_bkspark_ledger
from tests.unit.test_connector_arrow import reference_batch

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def py_cluster(module_zk_root, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonBookieCluster]:
    """Three Python bookies on this module's own ledgers root."""
    with PythonBookieCluster(module_zk_root.metadata_service_uri, tmp_path_factory.mktemp("arrow-bookies"), bookies=3) as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def close_cached_clients() -> Iterator[None]:
    """The reader caches its clients per process (as on an executor): close them while ZooKeeper still runs."""
    from bkspark.datasource import clients

    yield
    clients._close_all()


def reader_table(uri: str, ledger: int | str, **options: str) -> tuple[pa.Table, list[pa.RecordBatch]]:
    """Plan and read ``ledger`` (or a ``ledgers`` option) with the data source's reader; the rows as one table,
    and the batches."""
    table, batches, _ = planned_read(uri, str(ledger), **options)
    return table, batches


def planned_read(uri: str, ledgers: str, **options: str) -> tuple[pa.Table, list[pa.RecordBatch], list]:
    """Plan ``ledgers`` and read every partition, in plan order: the rows, the batches and the partitions."""
    # with the custom_metadata column (off by default), to compare every column with the reference
    opts = parse_read_options({"metadataServiceUri": uri, "ledgers": ledgers, "includeCustomMetadata": "true", **options})
    reader = BookKeeperReader(opts)
    parts = reader.partitions()
    batches = [b for part in parts for b in reader.read(part)]
    for b in batches:
        assert b.schema == schema_module.arrow_schema(True)
        b.validate(full=True)
    return pa.Table.from_batches(batches, schema=schema_module.arrow_schema(True)), batches, parts


def reference_table(uri: str, ledger: int, password: bytes = b"", digest_type: str | None = None) -> pa.Table:
    """The same ledger read entry by entry with the client and converted row by row (the old reader's way)."""
    with BookKeeper(uri) as bk:
        md = bk.get_ledger_metadata(ledger)
        with bk.open_ledger(ledger, recovery=False, password=password, digest_type=digest_type) as handle:
            entries = handle.read(0, handle.last_add_confirmed)
    assert [e.entry_id for e in entries] == list(range(len(entries)))
    custom = tuple(sorted((k, bytes(v)) for k, v in (md.custom_metadata or {}).items()))
    batch = reference_batch(0, ledger, 0, [e.payload for e in entries], md.ctime or None, custom)
    return pa.Table.from_batches([batch])


def reference_tables(uri: str, ledgers: list[int], **kwargs) -> pa.Table:
    """Several ledgers' reference rows, one ledger after the other."""
    return pa.concat_tables([reference_table(uri, lid, **kwargs) for lid in ledgers])


def assert_same_rows(got: pa.Table, want: pa.Table) -> None:
    assert got.num_rows == want.num_rows
    assert got.combine_chunks().equals(want.combine_chunks())


def random_payloads(seed: int, n: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.choice([0, 1, 100, 1024, 3000])) for _ in range(n)]


def test_python_bookies_plain_striped_and_single_reads(py_cluster: PythonBookieCluster) -> None:
    uri = py_cluster.metadata_service_uri
    with BookKeeper(uri) as bk:
        plain = write_bkspark_ledger(bk, random_payloads(1, 2500), ensemble_size=3, write_quorum_size=3,
                                     ack_quorum_size=2, custom_metadata={"owner": b"arrow"})
        striped = write_bkspark_ledger(bk, random_payloads(2, 777), ensemble_size=3, write_quorum_size=2,
                                       ack_quorum_size=2)
    want = reference_table(uri, plain)
    got, _ = reader_table(uri, plain, maxEntriesPerPartition="1000", batchMaxCount="300")
    assert_same_rows(got, want)
    got, _ = reader_table(uri, plain, batchReadEnabled="false", batchMaxCount="64")
    assert_same_rows(got, want)
    got, _ = reader_table(uri, striped, maxEntriesPerPartition="500")  # striped: the client reads entry by entry
    assert_same_rows(got, reference_table(uri, striped))


def test_small_ledgers_packed_into_one_partition_read_like_one_by_one(py_cluster: PythonBookieCluster) -> None:
    """A packed partition (SliceGroup) of plain, striped, empty and one-entry ledgers reads the rows of each
    ledger read alone, in ledger order; minPartitions and maxPartitions change the plan, never the rows."""
    uri = py_cluster.metadata_service_uri
    with BookKeeper(uri) as bk:
        lids = [
            write_bkspark_ledger(bk, random_payloads(10, 300), ensemble_size=3, write_quorum_size=3, ack_quorum_size=2),
            write_bkspark_ledger(bk, random_payloads(11, 1), ensemble_size=1, write_quorum_size=1, ack_quorum_size=1),
            write_bkspark_ledger(bk, [], ensemble_size=2, write_quorum_size=2, ack_quorum_size=2),
            write_bkspark_ledger(bk, random_payloads(12, 77), ensemble_size=3, write_quorum_size=2, ack_quorum_size=2),
        ] + [write_bkspark_ledger(bk, random_payloads(20 + i, 1), ensemble_size=2, write_quorum_size=2,
                                  ack_quorum_size=1) for i in range(20)]
    with_rows = [lid for lid in lids if lid != lids[2]]  # the empty ledger plans no slice
    want = reference_tables(uri, with_rows)
    ledgers = ",".join(map(str, lids))
    got, _, parts = planned_read(uri, ledgers)
    assert len(parts) == 1 and isinstance(parts[0], SliceGroup) and len(parts[0].slices) == 23
    assert_same_rows(got, want)
    got, _, parts = planned_read(uri, ledgers, minPartitions="6")
    assert len(parts) >= 6
    assert_same_rows(got, want)
    got, _, parts = planned_read(uri, ledgers, maxEntriesPerPartition="1", maxPartitions="4")
    assert len(parts) == 4 and all(isinstance(p, SliceGroup) for p in parts)
    assert_same_rows(got, want)


def test_a_packed_partition_opens_its_ledgers_from_one_multi_read_not_a_read_per_ledger(
    py_cluster: PythonBookieCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/connector.md, "Partitions": a partition of several slices first reads all their ledgers' metadata in
    ZooKeeper multi reads and opens each ledger from it, instead of one ZooKeeper read per ledger."""
    from bkspark.metadata.store import ZkMetadataStore

    uri = py_cluster.metadata_service_uri
    with BookKeeper(uri) as bk:
        lids = [write_bkspark_ledger(bk, random_payloads(40 + i, 2), ensemble_size=2, write_quorum_size=2,
                                     ack_quorum_size=2) for i in range(12)]
    reader = BookKeeperReader(parse_read_options({"metadataServiceUri": uri, "ledgers": ",".join(map(str, lids)),
                                                      "includeCustomMetadata": "true"}))
    (group,) = reader.partitions()
    assert isinstance(group, SliceGroup) and len(group.slices) == 12
    calls: list[str] = []
    single, many = ZkMetadataStore.read_ledger_metadata, ZkMetadataStore.read_many_ledger_metadata

    def read_one(self: ZkMetadataStore, *args: object, **kwargs: object) -> object:
        calls.append("single")
        return single(self, *args, **kwargs)

    def read_many(self: ZkMetadataStore, refs: object, **kwargs: object) -> object:
        calls.append(f"many:{len(refs)}")  # type: ignore[arg-type]
        return many(self, refs, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ZkMetadataStore, "read_ledger_metadata", read_one)
    monkeypatch.setattr(ZkMetadataStore, "read_many_ledger_metadata", read_many)
    got = pa.Table.from_batches(list(reader.read(group)))
    monkeypatch.undo()
    assert calls == ["many:12"]
    assert_same_rows(got, reference_tables(uri, lids))


def ledgers_one_deleted(uri: str, count: int, *, deleted: int, seed: int, dataset: str | None = None) -> list[int]:
    """``count`` ledgers of three entries (E = W = A = 2), published as ``dataset`` when given, then the one at index
    ``deleted`` deleted: their ids."""
    from tests.harness.ledgers import publish_dataset

    with BookKeeper(uri) as bk:
        lids = [write_bkspark_ledger(bk, random_payloads(seed + i, 3), ensemble_size=2, write_quorum_size=2,
                                     ack_quorum_size=2) for i in range(count)]
        if dataset is not None:
            publish_dataset(bk, dataset, lids)
        bk.delete_ledger(lids[deleted])
    return lids


def test_single_ledger_ids_must_exist_and_ranges_take_the_ledgers_in_them(py_cluster: PythonBookieCluster) -> None:
    """docs/connector.md, ``ledgers``: a missing single id fails the plan (also next to another id, "7,8"), a range
    reads the ledgers that exist in it (a deleted one and ids never made are skipped), and an id given twice, or
    alone and in a range, is read once."""
    from bkspark.errors import InvalidOptionError

    uri = py_cluster.metadata_service_uri
    with BookKeeper(uri) as bk:
        lids = [write_bkspark_ledger(bk, random_payloads(80 + i, 4), ensemble_size=2, write_quorum_size=2,
                                     ack_quorum_size=2) for i in range(3)]
        assert lids == list(range(lids[0], lids[0] + 3))
        bk.delete_ledger(lids[1])
    for ledgers in (f"{lids[0]},{lids[1]}", f"{lids[1]},{lids[2]}", f"{lids[0]}-{lids[2]},{lids[1]}"):
        with pytest.raises(InvalidOptionError, match=rf"\[BOOKKEEPER_LEDGER_NOT_FOUND\] ledger {lids[1]} "):
            planned_read(uri, ledgers)
    want = reference_tables(uri, [lids[0], lids[2]])
    for ledgers in (f"{lids[0]}-{lids[2]}", f"{lids[0]}-{lids[2] + 1000}", f"{lids[2]},{lids[0]}-{lids[2]},{lids[0]}"):
        got, _, _ = planned_read(uri, ledgers)
        assert_same_rows(got, want)


def test_a_missing_single_id_fails_the_plan_where_a_pushed_filter_excludes_it_as_without_pushdown(
    py_cluster: PythonBookieCluster,
) -> None:
    """docs/connector.md, "Filter pushdown": a single id of ``ledgers`` that does not exist fails the plan with
    BOOKKEEPER_LEDGER_NOT_FOUND also when a pushed filter excludes it (with pushdown off Spark reads every ledger
    before it filters, and fails so); a ledger a range or a dataset brings in and a pushed filter excludes is not
    looked at, so a deleted one there fails nothing."""
    from pyspark.sql.datasource import EqualTo

    from bkspark.datasource.reader import BookKeeperPushdownReader
    from bkspark.errors import InvalidOptionError
    uri = py_cluster.metadata_service_uri
    lids = ledgers_one_deleted(uri, 2, deleted=1, seed=90, dataset="pruned")

    def plan(**options: str) -> list:
        reader = BookKeeperPushdownReader(parse_read_options({"metadataServiceUri": uri, **options}))
        assert list(reader.pushFilters([EqualTo(("ledger_id",), lids[0])])) == []
        return reader.partitions()

    for ledgers in (f"{lids[0]},{lids[1]}", f"{lids[1]},{lids[0]}-{lids[0]}"):
        with pytest.raises(InvalidOptionError, match=rf"\[BOOKKEEPER_LEDGER_NOT_FOUND\] ledger {lids[1]} "):
            plan(ledgers=ledgers)
    # a range and a dataset: the deleted ledger is not named, and the filter excludes it: nothing fails
    for options in ({"ledgers": f"{lids[0]}-{lids[1] + 5}"}, {"dataset": "pruned"}):
        [part] = plan(**options)
        assert part.ledger_id == lids[0]


def test_ledger_ctime_is_the_recorded_creation_time_else_the_znodes(py_cluster: PythonBookieCluster) -> None:
    """docs/connector.md, Schema: ``ledger_ctime`` is the metadata's ``ctime`` when the creator recorded it
    (``storeSystemTimeAsLedgerCreationTime``), else the creation time of the ledger's znode, as Java reports it."""
    uri = py_cluster.metadata_service_uri
    for recorded in (False, True):
        with BookKeeper(uri, storeSystemTimeAsLedgerCreationTime=recorded) as bk:
            lid = write_bkspark_ledger(bk, [b"a", b"b"], ensemble_size=2, write_quorum_size=2, ack_quorum_size=2)
            md = bk.get_ledger_metadata(lid)
            znode_ctime_ms = bk.zk.exists(bk.store.ledger_path(lid)).ctime
        assert md.store_ctime is recorded and md.ctime > 0
        if not recorded:
            assert md.ctime == znode_ctime_ms
        got, _ = reader_table(uri, lid)
        assert got.column("ledger_ctime").cast(pa.int64()).to_pylist() == [md.ctime * 1000] * 2  # microseconds


def test_ledgers_of_large_entries_are_cut_and_packed_by_bytes(py_cluster: PythonBookieCluster) -> None:
    """maxBytesPerPartition (docs/connector.md, "Partitions"): a closed ledger's metadata length gives its mean
    entry size, its slices hold at most that many estimated bytes and packing stops there; the rows never change."""
    from bkspark.datasource.planning import partition_slices

    uri = py_cluster.metadata_service_uri
    rng = random.Random(40)
    with BookKeeper(uri) as bk:
        large = write_bkspark_ledger(bk, [rng.randbytes(4000) for _ in range(60)], ensemble_size=3,
                                     write_quorum_size=3, ack_quorum_size=2)
        small = write_bkspark_ledger(bk, [rng.randbytes(40) for _ in range(60)], ensemble_size=3,
                                     write_quorum_size=2, ack_quorum_size=2)
        mid = write_bkspark_ledger(bk, [rng.randbytes(4000) for _ in range(10)], ensemble_size=2,
                                   write_quorum_size=2, ack_quorum_size=2)
    want = reference_tables(uri, [large, small, mid])
    ledgers = f"{large},{small},{mid}"
    # the default bound (128 MiB) leaves these few bytes alone: one packed partition, as by entries
    got, _, parts = planned_read(uri, ledgers)
    assert len(parts) == 1 and isinstance(parts[0], SliceGroup)
    assert_same_rows(got, want)
    # 40,000 bytes: the 4000-byte ledgers are cut every 10 entries, the 40-byte ledger stays whole, and it is
    # packed with no 4000-byte slice (together they would pass the bound)
    got, _, parts = planned_read(uri, ledgers, maxBytesPerPartition="40000")
    pieces = [[(p.ledger_id, p.entry_count) for p in partition_slices(part)] for part in parts]
    assert pieces == [[(large, 10)]] * 6 + [[(small, 60)], [(mid, 10)]]
    assert_same_rows(got, want)


def test_a_ledger_of_a_packed_partition_deleted_after_planning(py_cluster: PythonBookieCluster) -> None:
    """Deleted between planning and reading: failOnDataLoss=true fails the task naming the ledger;
    false skips it and reads the group's other ledgers."""
    from bkspark.errors import NoSuchLedgerMetadataError

    uri = py_cluster.metadata_service_uri
    with BookKeeper(uri) as bk:
        lids = [write_bkspark_ledger(bk, random_payloads(40 + i, 5), ensemble_size=2, write_quorum_size=2,
                                     ack_quorum_size=2) for i in range(3)]
        want = reference_tables(uri, [lids[0], lids[2]])
        plans = {}
        for lose in ("true", "false"):
            reader = BookKeeperReader(parse_read_options(
                {"metadataServiceUri": uri, "ledgers": ",".join(map(str, lids)), "failOnDataLoss": lose,
                 "includeCustomMetadata": "true"}))
            plans[lose] = (reader, reader.partitions())
            assert len(plans[lose][1]) == 1 and isinstance(plans[lose][1][0], SliceGroup)
        bk.delete_ledger(lids[1])
    reader, parts = plans["true"]
    with pytest.raises(NoSuchLedgerMetadataError, match=f"BOOKKEEPER_DATA_LOSS.*ledger {lids[1]}"):
        [b for b in reader.read(parts[0])]
    reader, parts = plans["false"]
    got = pa.Table.from_batches([b for b in reader.read(parts[0])], schema=schema_module.arrow_schema(True))
    assert_same_rows(got, want)


def test_a_ledger_deleted_while_its_packed_partition_reads_another_is_read_from_the_early_metadata(
    py_cluster: PythonBookieCluster,
) -> None:
    """docs/connector.md, "Partitions": a ledger of a packed partition deleted while the partition reads its other
    ledgers is read from the metadata the partition read first (its entries stay on the bookies until their
    garbage collection), as a ledger deleted after its open always was; no data-loss error."""
    uri = py_cluster.metadata_service_uri
    with BookKeeper(uri) as bk:
        lids = [write_bkspark_ledger(bk, random_payloads(60 + i, 5), ensemble_size=2, write_quorum_size=2,
                                     ack_quorum_size=2) for i in range(3)]
        want = reference_tables(uri, lids)
        reader = BookKeeperReader(parse_read_options({"metadataServiceUri": uri, "ledgers": ",".join(map(str, lids)),
                                                      "includeCustomMetadata": "true"}))
        (group,) = reader.partitions()
        assert isinstance(group, SliceGroup)
        batches = reader.read(group)
        got = [next(batches)]  # the first ledger's rows: the partition has read every ledger's metadata by now
        assert got[0].column("ledger_id").to_pylist() == [lids[0]] * 5
        bk.delete_ledger(lids[2])
        got.extend(batches)
    assert_same_rows(pa.Table.from_batches(got, schema=schema_module.arrow_schema(True)), want)


def test_batches_are_cut_by_rows_and_by_bytes(py_cluster: PythonBookieCluster, monkeypatch) -> None:
    uri = py_cluster.metadata_service_uri
    payloads = [bytes([i % 256]) * 1000 for i in range(1000)]
    with BookKeeper(uri) as bk:
        lid = write_bkspark_ledger(bk, payloads, ensemble_size=2, write_quorum_size=2, ack_quorum_size=2)
    want = reference_table(uri, lid)
    monkeypatch.setattr(reader_module, "ROWS_PER_BATCH", 128)
    got, batches = reader_table(uri, lid, batchMaxCount="100")
    assert [b.num_rows for b in batches] == [128] * 7 + [104]
    assert_same_rows(got, want)
    assert [b.column("entry_id")[0].as_py() for b in batches] == list(range(0, 1000, 128))
    # The byte bound is checked after each response: 100 entries of 1000 B per response, bound 150,000 B.
    monkeypatch.setattr(reader_module, "ROWS_PER_BATCH", 10_000)
    monkeypatch.setattr(schema_module, "MAX_BATCH_PAYLOAD_BYTES", 150_000)
    got, batches = reader_table(uri, lid, batchMaxCount="100", batchMaxSize="1048576")
    assert [b.num_rows for b in batches] == [200] * 5
    assert_same_rows(got, want)


@pytest.mark.compat
def test_java_bookies_4_17_including_a_striped_ledger(java_cluster_factory, java_tools) -> None:
    cluster = java_cluster_factory("4.17.3", bookies=3)
    uri = cluster.metadata_service_uri
    plain = java_create_and_write(java_tools, "4.17.3", uri, ensemble=3, write=3, ack=2, entries=1200, size=100)
    striped = java_create_and_write(java_tools, "4.17.3", uri, ensemble=3, write=2, ack=2, entries=301, size=37,
                                    digest="MAC", password="secret")
    got, _ = reader_table(uri, plain, maxEntriesPerPartition="700")
    assert_same_rows(got, reference_table(uri, plain))
    assert got.column("payload").to_pylist() == [java_payload(i, 100) for i in range(1200)]
    got, _ = reader_table(uri, striped, password="secret")
    assert_same_rows(got, reference_table(uri, striped, password=b"secret"))
    assert got.column("payload").to_pylist() == [java_payload(i, 37) for i in range(301)]
    # a plain and a striped ledger in one packed partition: one read with batched reads, one entry by entry
    striped_open = java_create_and_write(java_tools, "4.17.3", uri, ensemble=3, write=2, ack=2, entries=90, size=11)
    got, _, parts = planned_read(uri, f"{plain},{striped_open}")
    assert len(parts) == 1 and isinstance(parts[0], SliceGroup)
    assert got.column("payload").to_pylist() == [java_payload(i, 100) for i in range(1200)] + [
        java_payload(i, 11) for i in range(90)]
    # a Java-written ledger's metadata length sizes its slices too: 1200 entries of 100 B under 50,000 bytes
    got, _, parts = planned_read(uri, str(plain), maxBytesPerPartition="50000")
    assert [part.entry_count for part in parts] == [500, 500, 200]
    assert got.column("payload").to_pylist() == [java_payload(i, 100) for i in range(1200)]


@pytest.mark.compat
def test_java_bookies_4_16_without_batch_reads(java_cluster_factory, java_tools) -> None:
    cluster = java_cluster_factory("4.16.6", bookies=3)
    uri = cluster.metadata_service_uri
    lid = java_create_and_write(java_tools, "4.16.6", uri, ensemble=3, write=3, ack=2, entries=640, size=20,
                                digest="CRC32")
    got, _ = reader_table(uri, lid, batchMaxCount="64")
    assert_same_rows(got, reference_table(uri, lid))
    assert got.column("payload").to_pylist() == [java_payload(i, 20) for i in range(640)]
    small = [java_create_and_write(java_tools, "4.16.6", uri, ensemble=2, write=2, ack=2, entries=1, size=9)
             for _ in range(2)]
    got, _, parts = planned_read(uri, ",".join(map(str, [lid, *small])), batchMaxCount="64")
    assert len(parts) == 1 and isinstance(parts[0], SliceGroup) and len(parts[0].slices) == 3
    assert got.column("payload").to_pylist() == [java_payload(i, 20) for i in range(640)] + [java_payload(0, 9)] * 2


def test_a_ledger_of_a_dataset_deleted_before_planning(py_cluster: PythonBookieCluster, monkeypatch) -> None:
    """Planning reads the dataset's ledgers' metadata in ZooKeeper multi reads (two ledgers each here): a deleted
    one fails the plan naming it (failOnDataLoss=true), or is left out of it (false)."""
    from bkspark.errors import NoSuchLedgerMetadataError
    from bkspark.metadata import multiread

    monkeypatch.setattr(multiread, "READS_PER_REQUEST", 2)
    uri = py_cluster.metadata_service_uri
    lids = ledgers_one_deleted(uri, 5, deleted=3, seed=60, dataset="loses-one")
    want = reference_tables(uri, [lid for lid in lids if lid != lids[3]])
    options = {"metadataServiceUri": uri, "dataset": "loses-one", "includeCustomMetadata": "true"}
    with pytest.raises(NoSuchLedgerMetadataError, match=f"BOOKKEEPER_DATA_LOSS.*ledger {lids[3]}"):
        BookKeeperReader(parse_read_options(options)).partitions()
    reader = BookKeeperReader(parse_read_options({**options, "failOnDataLoss": "false"}))
    got = pa.Table.from_batches([b for part in reader.partitions() for b in reader.read(part)],
                                schema=schema_module.arrow_schema(True))
    assert_same_rows(got, want)
