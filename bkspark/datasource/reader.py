"""Batch reads: plan ledger slices on the driver, read them as Arrow batches on executors.

The reader object is pickled from the planner to every executor, so it holds
only options and bounds; the client lives in the per-worker cache
(:mod:`bkspark.datasource.clients`).  ``read()`` yields ``pyarrow.RecordBatch``
objects of at most ``ROWS_PER_BATCH`` entries (2-4x faster than tuples in
PySpark 4.3), built column-wise from the payloads by :func:`~bkspark.datasource.schema.entry_batch`.
"""

from __future__ import annotations

from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceReader, InputPartition

from bkspark.client.arrow import DEFAULT_ROWS_PER_BATCH
from bkspark.datasource.options import ReadOptions, selected_ledgers, single_ids
from bkspark.datasource.planning import (
    Bounds, LedgerSlice, ctime_admitted, mean_entry_bytes, partition_slices, plan_partitions, push_filters,
    split_ledger,
)

__all__ = ["BookKeeperReader", "BookKeeperPushdownReader", "ROWS_PER_BATCH"]

#: Rows of one Arrow batch (the client's default).
ROWS_PER_BATCH = DEFAULT_ROWS_PER_BATCH
#: Entry bytes the client gathers per group for a ledger of packed rows: a few Arrow batches of rows each, so
#: reading the next group overlaps Spark's work on this one (64 MiB groups of 16 KiB entries held 600,000 rows).
PACKED_BYTES_PER_GROUP = 4 * 1024 * 1024


def _client_settings(options: ReadOptions) -> dict[str, Any]:
    from bkspark.datasource.clients import client_conf

    return client_conf(options.client_conf, batch_read_enabled=options.batch_read_enabled)


def _metadata_windows(bk: Any, ledgers: list[tuple[int, int]]) -> Iterator[tuple[int, int, Any]]:
    """``(scope, ledger, metadata or None when it does not exist)`` in order, read by ZooKeeper multi reads of
    many znodes each (``ZkMetadataStore.read_many_ledger_metadata``): a dataset of 100,000 ledgers plans in a few
    hundred round trips, not one per ledger."""
    for scope_id, ledger_id, versioned in bk.store.read_many_ledger_metadata(ledgers):
        yield scope_id, ledger_id, None if versioned is None else versioned.metadata


#: ``_read_ledger``'s marker for a ledger whose metadata was not read beforehand.
_UNREAD = object()


class BookKeeperReader(DataSourceReader):
    """Reads ledgers or a dataset; no filter pushdown (Spark's pushdown conf is off)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.bounds = Bounds()

    # -- planning (driver) ------------------------------------------------
    def _ledgers_to_read(self, bk: Any) -> list[tuple[int, int]]:
        """(scope, ledger) pairs selected by ``ledgers`` or ``dataset``: the ledgers that exist, and the single ids of
        ``ledgers`` whether they exist or not (:meth:`partitions` names a missing one)."""
        from bkspark.errors import InvalidOptionError

        opts = self.options
        if opts.dataset is not None:
            from bkspark.datasource.clients import client_root, client_zk
            from bkspark.datasource.datasets import DatasetRegistry

            manifest = DatasetRegistry(client_zk(bk), client_root(bk)).manifest(opts.dataset)
            if manifest is None:
                raise InvalidOptionError(
                    f"[BOOKKEEPER_DATASET_NOT_FOUND] dataset {opts.dataset!r} has no committed ledgers under "
                    f"{opts.metadata_service_uri}; write it first with df.write.format('bookkeeper')"
                    f".option('dataset', {opts.dataset!r}).mode('append').save()"
                )
            return [pair for pair in manifest.ledgers]
        assert opts.ledger_ranges is not None
        listed = selected_ledgers(
            opts.ledger_ranges, lambda first, last: bk.store.list_ledgers_between(first, last, opts.scope_id)
        )
        return [(opts.scope_id, lid) for lid in listed]

    def partitions(self) -> list[InputPartition]:
        from bkspark.datasource.clients import get_client
        from bkspark.errors import NoSuchLedgerMetadataError

        opts = self.options
        bk = get_client(opts.metadata_service_uri, _client_settings(opts))
        slices: list[LedgerSlice] = []
        listed = self._ledgers_to_read(bk)
        wanted = [
            (scope_id, ledger_id) for scope_id, ledger_id in listed
            if self.bounds.admits("scope_id", scope_id) and self.bounds.admits("ledger_id", ledger_id)
        ]
        # A single id of `ledgers` is the user's word that the ledger exists, read or not: one a pushed filter
        # excludes is looked up too, so that pushdown on and off fail alike (docs/connector.md, "Filter pushdown").
        named = single_ids(opts.ledger_ranges) if opts.dataset is None and opts.ledger_ranges else set()
        excluded = set(listed) - set(wanted)
        starting, ending = dict(opts.starting_offsets), dict(opts.ending_offsets)
        for scope_id, ledger_id, md in _metadata_windows(bk, [p for p in listed if p in excluded and p[1] in named]):
            if md is None:
                raise self._ledger_not_found(scope_id, ledger_id)
        for scope_id, ledger_id, md in _metadata_windows(bk, wanted):
            if md is None:
                if ledger_id in named:
                    raise self._ledger_not_found(scope_id, ledger_id)
                if opts.fail_on_data_loss:
                    raise NoSuchLedgerMetadataError(
                        f"[BOOKKEEPER_DATA_LOSS] ledger {ledger_id} (scope {scope_id}) of "
                        f"{'dataset ' + repr(opts.dataset) if opts.dataset else 'the ledgers option'} no longer "
                        "exists; set .option('failOnDataLoss', 'false') to skip missing ledgers"
                    ) from None
                continue
            ctime_ms = md.ctime if md.ctime else None
            if not self._created_within(ctime_ms):
                continue
            last = self._last_readable_entry(bk, md, scope_id, ledger_id)
            if last is None:
                continue
            if opts.end_entry is not None:
                last = min(last, opts.end_entry)
            if (scope_id, ledger_id) in ending:
                last = min(last, ending[(scope_id, ledger_id)] - 1)  # endingOffsets: exclusive, as Kafka's
            first = starting.get((scope_id, ledger_id), opts.start_entry)
            custom = tuple(sorted((k, bytes(v)) for k, v in (md.custom_metadata or {}).items()))
            entry_bytes = mean_entry_bytes(md)
            for first_run, last_run in self.bounds.entry_runs(first, last):
                slices.extend(
                    split_ledger(
                        scope_id, ledger_id, first_run, last_run, opts.max_entries_per_partition,
                        ctime_ms=ctime_ms, custom_metadata=custom,
                        ledger_open=md.state.name != "CLOSED", entry_bytes=entry_bytes,
                        max_bytes_per_partition=opts.max_bytes_per_partition,
                    )
                )
        return plan_partitions(
            slices, opts.max_entries_per_partition,
            min_partitions=opts.min_partitions, max_partitions=opts.max_partitions,
            max_bytes_per_partition=opts.max_bytes_per_partition,
        )

    def _created_within(self, ctime_ms: int | None) -> bool:
        """Whether a ledger's creation time passes ``startingTimestamp``/``endingTimestamp`` and the pushed
        ``ledger_ctime`` filters (every row of a ledger has its ledger's time, so this is exact)."""
        opts = self.options
        micros = None if ctime_ms is None else ctime_ms * 1000
        return ctime_admitted(ctime_ms, opts.starting_timestamp_ms, opts.ending_timestamp_ms) and self.bounds.admits(
            "ledger_ctime", micros
        )

    def _ledger_not_found(self, scope_id: int, ledger_id: int) -> Exception:
        from bkspark.errors import InvalidOptionError

        return InvalidOptionError(
            f"[BOOKKEEPER_LEDGER_NOT_FOUND] ledger {ledger_id} (scope {scope_id}) does not exist under "
            f"{self.options.metadata_service_uri}; check the 'ledgers' option"
        )

    def _last_readable_entry(self, bk: Any, md: Any, scope_id: int, ledger_id: int) -> int | None:
        """Closed: the metadata's last entry.  Open: the LAC, if ``includeOpenLedgers``; else skip."""
        if md.state.name == "CLOSED":
            return md.last_entry_id if md.last_entry_id is not None and md.last_entry_id >= 0 else None
        if not self.options.include_open_ledgers:
            return None
        handle = bk.open_ledger(
            ledger_id, scope_id=scope_id, recovery=False,
            password=self.options.password, digest_type=self.options.digest_type,
        )
        try:
            lac = handle.last_add_confirmed
        finally:
            handle.close()
        return lac if lac >= 0 else None

    # -- reading (executor) -------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The Arrow batches of every slice of the partition, slice after slice (one, or a packed group)."""
        slices = partition_slices(partition)
        if not slices:
            return  # Spark turns an empty plan into one InputPartition(None): nothing to read
        from bkspark.datasource.clients import evict_if_stale, get_client

        opts = self.options
        settings = _client_settings(opts)
        bk = get_client(opts.metadata_service_uri, settings)
        try:
            # A packed group's ledgers' metadata in one multi read, not one ZooKeeper round trip per ledger.
            known = (
                {(scope_id, ledger_id): versioned for scope_id, ledger_id, versioned
                 in bk.store.read_many_ledger_metadata(sorted({(p.scope_id, p.ledger_id) for p in slices}))}
                if len(slices) > 1 else {}
            )
            for part in slices:
                yield from self._read_ledger(bk, part, known.get((part.scope_id, part.ledger_id), _UNREAD))
        except Exception as exc:
            evict_if_stale(opts.metadata_service_uri, settings, exc)  # the next task starts with a fresh client
            raise

    def _read_ledger(self, bk: Any, part: LedgerSlice, versioned: Any = _UNREAD) -> Iterator[Any]:
        """The slice's batches; ``versioned``: its ledger's metadata read beforehand (None: absent by then), or
        ``_UNREAD`` to read it now."""
        from bkspark.errors import NoSuchLedgerMetadataError

        opts = self.options
        try:
            if versioned is None:
                raise NoSuchLedgerMetadataError("no such ledger", ledger_id=part.ledger_id, scope_id=part.scope_id)
            handle = bk.open_ledger(
                part.ledger_id, scope_id=part.scope_id, recovery=False,
                password=opts.password, digest_type=opts.digest_type,
                metadata=None if versioned is _UNREAD else versioned,
            )
        except NoSuchLedgerMetadataError:
            if opts.fail_on_data_loss:
                raise NoSuchLedgerMetadataError(
                    f"[BOOKKEEPER_DATA_LOSS] ledger {part.ledger_id} (scope {part.scope_id}) was deleted "
                    "after the query was planned; set .option('failOnDataLoss', 'false') to skip such ledgers"
                ) from None
            return
        try:
            yield from self._read_slice(handle, part)
        finally:
            handle.close()

    def _read_slice(self, handle: Any, part: LedgerSlice) -> Iterator[Any]:
        """Arrow batches of the slice, from the client's pipelined ``read_batches`` (several batch requests in
        flight over the ledger's bookies; pipelined single reads where batches cannot be used): the payload
        column is taken as the client built it and the ledger-level columns added (:func:`entry_batch`)."""
        from bkspark.datasource.packing import entry_format, unpack_rows
        from bkspark.datasource.schema import MAX_BATCH_PAYLOAD_BYTES, entry_batch
        from bkspark.errors import NoSuchEntryError

        opts = self.options
        next_entry = part.first_entry
        fmt = entry_format(part.custom_metadata)
        columns = dict(include_custom_metadata=opts.include_custom_metadata, include_headers=opts.include_headers)
        for batch in handle.read_batches(
            part.first_entry, part.last_entry,
            batch_size=max(1, opts.batch_max_count), max_size=opts.batch_max_size, batch=opts.batch_read_enabled,
            rows_per_group=ROWS_PER_BATCH,
            bytes_per_group=PACKED_BYTES_PER_GROUP if fmt else MAX_BATCH_PAYLOAD_BYTES,
        ):
            ids = batch.column(0)
            if batch.num_rows and (ids[0].as_py() != next_entry or ids[-1].as_py() != next_entry + batch.num_rows - 1):
                # the rows get their entry ids from next_entry (a range): entries that are not the next ones would
                # carry other entries' ids
                raise NoSuchEntryError(
                    f"ledger {part.ledger_id} returned entries {ids[0].as_py()}..{ids[-1].as_py()} where "
                    f"{next_entry}..{next_entry + batch.num_rows - 1} were next (slice {part.first_entry}.."
                    f"{part.last_entry})"
                )
            if fmt:  # several rows per entry, maybe with keys and headers (docs/connector.md, "Rows per entry")
                rows = unpack_rows(batch.column(0), batch.column(1), fmt)
                for start in range(0, len(rows.payloads), ROWS_PER_BATCH):
                    piece = rows.slice(start, ROWS_PER_BATCH)
                    yield entry_batch(
                        part.scope_id, part.ledger_id, next_entry, piece.payloads, part.ctime_ms, part.custom_metadata,
                        entry_ids=piece.entry_ids, keys=piece.keys, headers=piece.headers, **columns,
                    )
            else:
                yield entry_batch(
                    part.scope_id, part.ledger_id, next_entry, batch.column(1), part.ctime_ms, part.custom_metadata,
                    **columns,
                )
            next_entry += batch.num_rows
        if next_entry != part.last_entry + 1:
            raise NoSuchEntryError(
                f"ledger {part.ledger_id} returned entries {part.first_entry}..{next_entry - 1}, expected up to "
                f"{part.last_entry} (the ledger's last add confirmed is {handle.last_add_confirmed})"
            )


class BookKeeperPushdownReader(BookKeeperReader):
    """The same reader with ``pushFilters``: used only when Spark's pushdown conf is on."""

    def pushFilters(self, filters: list[Any]) -> Any:  # noqa: N802 - Spark's name
        return push_filters(filters, self.bounds)
