"""Several rows in one entry: the connector's ``rows-v1`` and ``rows-v2`` entry formats (docs/connector.md, "Rows
per entry").

Much of a bookie's work is per entry whatever its size (one request, one journal record, one index row, one
response), so a write of small rows, one row per entry, is bound by the bookies' work per entry.  Apache Kafka's producer batches records for the same reason, and so do Pulsar (batch
messages) and DistributedLog (record sets).  With the write option ``rowsPerEntry`` above 1 the writer packs
consecutive rows of a task into one entry, and tags the ledger so every reader unpacks it.

An entry of this format, every integer big-endian (as BookKeeper's own headers are)::

    magic    4 bytes  b"BKR" + format version 1
    count    u32      rows in the entry, >= 1
    lengths  count x u32, each row's byte length
    rows     the rows' bytes, one after the other

``rows-v2`` adds each row's ``key`` and ``headers`` (Kafka's record key and headers), for a write whose
DataFrame has those columns; the ledger is tagged ``rows-v2`` and every entry is::

    magic          4 bytes   b"BKR" + format version 2
    count          u32       rows in the entry, >= 1
    flags          u32       bit 0: keys present, bit 1: headers present (other bits 0)
    lengths        count x u32, each row's payload length
    key lengths    count x i32 (if keys), -1 for a null key
    header counts  count x i32 (if headers), -1 for null headers; H = the sum of the others
    header keys    H x u32 (if headers), each header key's UTF-8 length
    header values  H x i32 (if headers), each header value's length, -1 for a null value
    payloads, then keys, then header keys, then header values: the bytes, one after the other

A reader that knows only ``rows-v1`` fails on such a ledger with a clear error naming its format; ledgers of
``rows-v1`` and of one row per entry read as before, with null keys and headers.

Both directions work on Arrow buffers and numpy arrays, with Python work per entry and none per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bkspark.errors import CorruptEntryError, InvalidOptionError

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = [
    "ENTRY_FORMAT_KEY",
    "ROWS_V1",
    "ROWS_V2",
    "BinaryColumn",
    "RowColumns",
    "UnpackedRows",
    "entry_format",
    "pack_row_columns",
    "unpack_rows",
    "MAGIC",
    "HEADER_BYTES",
    "ROW_OVERHEAD_BYTES",
    "DEFAULT_ENTRY_MAX_BYTES",
    "pack_rows",
    "packed_ledger",
    "unpack_entries",
]

#: The ledger's custom metadata key naming the format of its entries; absent: one row per entry.
ENTRY_FORMAT_KEY = "bkspark.entryFormat"
#: Its value for entries of this module's format.
ROWS_V1 = b"rows-v1"
#: Its value for entries of rows with keys and headers.
ROWS_V2 = b"rows-v2"
MAGIC = b"BKR\x01"
MAGIC_V2 = b"BKR\x02"
#: ``rows-v2``'s flags.
FLAG_KEYS = 1
FLAG_HEADERS = 2
#: Magic, count and flags of a ``rows-v2`` entry.
HEADER_BYTES_V2 = 12
#: Magic and count.
HEADER_BYTES = 8
#: The length word each row adds to its entry.
ROW_OVERHEAD_BYTES = 4
#: Bytes one packed entry may reach before the writer starts the next (option ``entryMaxBytes``); Pulsar's
#: producer bounds its batches at 128 KiB by default too.
DEFAULT_ENTRY_MAX_BYTES = 128 * 1024


def entry_format(custom_metadata: Any) -> bytes | None:
    """The format a ledger's custom metadata (a mapping, or ``(key, value)`` pairs) names for its entries: None
    (one row per entry), :data:`ROWS_V1` or :data:`ROWS_V2`; any other is a :class:`CorruptEntryError`."""
    pairs = custom_metadata.items() if hasattr(custom_metadata, "items") else custom_metadata
    for key, value in pairs or ():
        if key == ENTRY_FORMAT_KEY:
            if bytes(value) not in (ROWS_V1, ROWS_V2):
                raise CorruptEntryError(
                    f"the ledger's {ENTRY_FORMAT_KEY} is {bytes(value)!r}; this bkspark reads {ROWS_V1!r} and "
                    f"{ROWS_V2!r} only",
                    entry_format=bytes(value),
                )
            return bytes(value)
    return None


def packed_ledger(custom_metadata: Any) -> bool:
    """Whether a ledger's custom metadata says its entries hold packed rows (either format)."""
    return entry_format(custom_metadata) is not None


def _cuts(sizes: Any, rows_per_entry: int, entry_max_bytes: int) -> list[int]:
    """Where each entry starts (row indexes, ending with ``len(sizes)``): greedy, at most ``rows_per_entry`` rows
    and ``entry_max_bytes`` bytes an entry, and at least one row (a larger row gets an entry of its own)."""
    import numpy as np

    n = len(sizes)
    # cost[i]: bytes rows 0..i-1 add to an entry, so rows a..b-1 need HEADER_BYTES + cost[b] - cost[a].
    cost = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes + ROW_OVERHEAD_BYTES, out=cost[1:])
    budget = entry_max_bytes - HEADER_BYTES
    cuts = [0]
    start = 0
    while start < n:
        end = int(np.searchsorted(cost, cost[start] + budget, side="right")) - 1
        end = min(max(end, start + 1), start + rows_per_entry, n)
        cuts.append(end)
        start = end
    return cuts


def pack_rows(
    offsets: Any, data: "bytes | memoryview", rows_per_entry: int, entry_max_bytes: int = DEFAULT_ENTRY_MAX_BYTES
) -> tuple[list[bytes], list[int]]:
    """Rows given as Arrow-style ``offsets`` (numpy int64, ``n + 1`` of them, the first 0) into ``data``, packed
    into entries of at most ``rows_per_entry`` rows and ``entry_max_bytes`` bytes (see the module's docstring).

    Returns the entries and where each starts: its first row's index, and the row count last."""
    import numpy as np

    if rows_per_entry < 1:
        raise ValueError(f"rows_per_entry must be >= 1, not {rows_per_entry}")
    offsets = np.asarray(offsets, dtype=np.int64)
    sizes = np.diff(offsets)
    lengths = sizes.astype(">u4")
    view = memoryview(data)
    cuts = _cuts(sizes, rows_per_entry, entry_max_bytes)
    entries = []
    for a, b in zip(cuts, cuts[1:]):
        entries.append(b"".join((
            MAGIC, (b - a).to_bytes(4, "big"), lengths[a:b].tobytes(), view[offsets[a] : offsets[b]]
        )))
    return entries, cuts


def unpack_entries(entry_ids: Any, entries: "pa.Array") -> tuple[Any, "pa.Array"]:
    """The rows of packed entries: ``(entry id of each row (numpy int64), payload column (Arrow binary))``.

    ``entries`` is the payload column the client read (binary or large binary), ``entry_ids`` the entry id of
    each of its items.  Raises :class:`CorruptEntryError` naming the entry when one does not parse.
    """
    import numpy as np
    import pyarrow as pa

    entry_ids = np.asarray(entry_ids, dtype=np.int64)
    n = len(entries)
    if n == 0:
        return entry_ids[:0], pa.array([], type=pa.binary())
    large = pa.types.is_large_binary(entries.type)
    _validity, offsets_buffer, data_buffer = entries.buffers()[:3]
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if large else np.int32)[
        entries.offset : entries.offset + n + 1
    ]
    data = memoryview(data_buffer) if data_buffer is not None else memoryview(b"")
    counts = np.empty(n, dtype=np.int64)
    lengths: list[Any] = []
    pieces: list[memoryview] = []
    for i in range(n):
        start, end = int(offsets[i]), int(offsets[i + 1])
        entry_id = int(entry_ids[i])
        if end - start < HEADER_BYTES or data[start : start + 4] != MAGIC:
            raise CorruptEntryError(
                "an entry of a ledger tagged with packed rows has no rows-v1 header", entry_id=entry_id,
                length=end - start,
            )
        count = int.from_bytes(data[start + 4 : start + 8], "big")
        rows_at = start + HEADER_BYTES + ROW_OVERHEAD_BYTES * count
        if count < 1 or rows_at > end:
            raise CorruptEntryError("a packed entry's row count does not fit it", entry_id=entry_id, count=count,
                                    length=end - start)
        row_lengths = np.frombuffer(data, dtype=">u4", count=count, offset=start + HEADER_BYTES)
        if int(row_lengths.sum(dtype=np.int64)) != end - rows_at:
            raise CorruptEntryError("a packed entry's row lengths do not add up to its size", entry_id=entry_id,
                                    count=count, length=end - start)
        counts[i] = count
        lengths.append(row_lengths)
        pieces.append(data[rows_at:end])
    row_offsets = np.zeros(int(counts.sum()) + 1, dtype=np.int64)
    np.cumsum(np.concatenate(lengths), out=row_offsets[1:])
    if row_offsets[-1] > 2**31 - 1:  # only from a large_binary column: the client's batches stay far below
        raise InvalidOptionError(f"{int(row_offsets[-1])} row bytes do not fit one Arrow binary array (2 GiB)")
    payload = pa.Array.from_buffers(
        pa.binary(), len(row_offsets) - 1,
        [None, pa.py_buffer(row_offsets.astype(np.int32)), pa.py_buffer(b"".join(pieces))],
    )
    return np.repeat(entry_ids, counts), payload


@dataclass(frozen=True)
class BinaryColumn:
    """A binary column as buffers: ``offsets`` (numpy int64, one more than items, from 0) into ``data``, and
    ``valid`` (numpy bool per item; None: every item valid; a null item has no bytes)."""

    offsets: Any
    data: bytes
    valid: Any = None

    @property
    def lengths(self) -> Any:
        import numpy as np

        return np.diff(self.offsets)

    @classmethod
    def of(cls, column: "pa.Array") -> "BinaryColumn":
        """An Arrow binary or string column (any offset width) as buffers, nulls made empty."""
        import numpy as np
        import pyarrow as pa

        valid = None
        if column.null_count:
            valid = column.is_valid().to_numpy(zero_copy_only=False)
            column = column.fill_null(pa.scalar(b"" if not pa.types.is_string(column.type) and not
                                                pa.types.is_large_string(column.type) else "", column.type))
        large = pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type)
        _validity, offsets_buffer, data_buffer = column.buffers()[:3]
        n = len(column)
        offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if large else np.int32)[
            column.offset : column.offset + n + 1
        ].astype(np.int64)
        start, end = int(offsets[0]), int(offsets[-1])
        data = b"" if data_buffer is None else memoryview(data_buffer)[start:end].tobytes()
        return cls(offsets - start, data, valid)


@dataclass(frozen=True)
class RowColumns:
    """The rows a ``rows-v2`` entry holds: payloads, and keys and headers when the write has them
    (``header_offsets``: numpy int64, row i's headers are items ``header_offsets[i]..header_offsets[i+1]`` of
    ``header_keys``/``header_values``; ``headers_valid``: False for a row whose headers are null)."""

    payloads: BinaryColumn
    keys: BinaryColumn | None = None
    header_offsets: Any = None
    headers_valid: Any = None
    header_keys: BinaryColumn | None = None
    header_values: BinaryColumn | None = None

    def row_bytes(self) -> Any:
        """Each row's bytes in an entry, its length words included (what ``entryMaxBytes`` bounds)."""
        import numpy as np

        sizes = self.payloads.lengths + ROW_OVERHEAD_BYTES
        if self.keys is not None:
            sizes = sizes + self.keys.lengths + 4
        if self.header_offsets is not None:
            assert self.header_keys is not None and self.header_values is not None
            per_item = np.zeros(len(self.header_keys.offsets), dtype=np.int64)
            np.cumsum(self.header_keys.lengths + self.header_values.lengths + 8, out=per_item[1:])
            sizes = sizes + 4 + per_item[self.header_offsets[1:]] - per_item[self.header_offsets[:-1]]
        return sizes


def _signed_lengths(column: BinaryColumn, a: int, b: int) -> bytes:
    """Items ``a..b-1``' lengths as big-endian i32, -1 for a null item."""
    import numpy as np

    lengths = column.lengths[a:b].astype(np.int64)
    if column.valid is not None:
        lengths = np.where(column.valid[a:b], lengths, -1)
    return lengths.astype(">i4").tobytes()


def pack_row_columns(
    rows: RowColumns, rows_per_entry: int, entry_max_bytes: int = DEFAULT_ENTRY_MAX_BYTES
) -> tuple[list[bytes], list[int]]:
    """Rows with keys and headers packed into ``rows-v2`` entries of at most ``rows_per_entry`` rows and
    ``entry_max_bytes`` bytes (1 row per entry is fine: the format still carries the row's key and headers).

    Returns the entries and where each starts: its first row's index, and the row count last."""
    import numpy as np

    if rows_per_entry < 1:
        raise ValueError(f"rows_per_entry must be >= 1, not {rows_per_entry}")
    flags = (FLAG_KEYS if rows.keys is not None else 0) | (FLAG_HEADERS if rows.header_offsets is not None else 0)
    cuts = _cuts(rows.row_bytes() - ROW_OVERHEAD_BYTES, rows_per_entry, entry_max_bytes - (HEADER_BYTES_V2 - HEADER_BYTES))
    p = rows.payloads
    p_lengths = p.lengths.astype(">u4")
    entries = []
    for a, b in zip(cuts, cuts[1:]):
        head = [MAGIC_V2, (b - a).to_bytes(4, "big"), flags.to_bytes(4, "big"), p_lengths[a:b].tobytes()]
        body = [memoryview(p.data)[p.offsets[a] : p.offsets[b]]]
        if rows.keys is not None:
            k = rows.keys
            head.append(_signed_lengths(k, a, b))
            body.append(memoryview(k.data)[k.offsets[a] : k.offsets[b]])
        if rows.header_offsets is not None:
            hk, hv = rows.header_keys, rows.header_values
            assert hk is not None and hv is not None
            counts = np.diff(rows.header_offsets[a : b + 1]).astype(np.int64)
            if rows.headers_valid is not None:
                counts = np.where(rows.headers_valid[a:b], counts, -1)
            head.append(counts.astype(">i4").tobytes())
            x, y = int(rows.header_offsets[a]), int(rows.header_offsets[b])
            head.append(hk.lengths[x:y].astype(">u4").tobytes())
            head.append(_signed_lengths(hv, x, y))
            body.append(memoryview(hk.data)[hk.offsets[x] : hk.offsets[y]])
            body.append(memoryview(hv.data)[hv.offsets[x] : hv.offsets[y]])
        entries.append(b"".join(head + body))
    return entries, cuts


@dataclass
class UnpackedRows:
    """The rows of packed entries: each row's entry id (numpy int64), payload (Arrow binary), and, from
    ``rows-v2`` entries, keys (Arrow binary) and headers (Arrow list of ``key``/``value`` structs); None where
    the entries carry none (every row's are then null)."""

    entry_ids: Any
    payloads: "pa.Array"
    keys: "pa.Array | None" = None
    headers: "pa.Array | None" = None

    def slice(self, start: int, length: int) -> "UnpackedRows":
        return UnpackedRows(
            self.entry_ids[start : start + length], self.payloads.slice(start, length),
            None if self.keys is None else self.keys.slice(start, length),
            None if self.headers is None else self.headers.slice(start, length),
        )


def unpack_rows(entry_ids: Any, entries: "pa.Array", fmt: bytes) -> UnpackedRows:
    """The rows of entries of format ``fmt`` (:data:`ROWS_V1` or :data:`ROWS_V2`), with their keys and headers."""
    if fmt == ROWS_V1:
        ids, payloads = unpack_entries(entry_ids, entries)
        return UnpackedRows(ids, payloads)
    return _unpack_v2(entry_ids, entries)


class _Gather:
    """Pieces of one binary column gathered over entries: lengths (with -1 for nulls) and bytes."""

    def __init__(self) -> None:
        self.lengths: list[Any] = []
        self.pieces: list[Any] = []

    def array(self) -> "pa.Array":
        import numpy as np
        import pyarrow as pa

        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, dtype=np.int64)
        valid = lengths >= 0
        sizes = np.where(valid, lengths, 0).astype(np.int64)
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        if offsets[-1] > 2**31 - 1:
            raise InvalidOptionError(f"{int(offsets[-1])} row bytes do not fit one Arrow binary array (2 GiB)")
        validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(
            pa.binary(), len(sizes), [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(self.pieces))],
            null_count=int((~valid).sum()),
        )


def _unpack_v2(entry_ids: Any, entries: "pa.Array") -> UnpackedRows:
    import numpy as np
    import pyarrow as pa

    entry_ids = np.asarray(entry_ids, dtype=np.int64)
    n = len(entries)
    large = pa.types.is_large_binary(entries.type)
    _validity, offsets_buffer, data_buffer = entries.buffers()[:3]
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if large else np.int32)[entries.offset : entries.offset + n + 1]
    data = memoryview(data_buffer) if data_buffer is not None else memoryview(b"")
    counts = np.zeros(n, dtype=np.int64)
    payloads, keys, hkeys, hvalues = _Gather(), _Gather(), _Gather(), _Gather()
    header_counts: list[Any] = []
    any_keys = any_headers = False
    for i in range(n):
        start, end = int(offsets[i]), int(offsets[i + 1])
        entry_id = int(entry_ids[i])

        def corrupt(what: str, **context: Any) -> CorruptEntryError:
            return CorruptEntryError(f"a rows-v2 entry {what}", entry_id=entry_id, length=end - start, **context)

        if end - start < HEADER_BYTES_V2 or data[start : start + 4] != MAGIC_V2:
            raise corrupt("has no rows-v2 header")
        count = int.from_bytes(data[start + 4 : start + 8], "big")
        flags = int.from_bytes(data[start + 8 : start + 12], "big")
        if count < 1 or flags & ~(FLAG_KEYS | FLAG_HEADERS):
            raise corrupt("has a bad row count or flags", count=count, flags=flags)
        at = start + HEADER_BYTES_V2

        def words(dtype: str, k: int) -> Any:
            nonlocal at
            if at + 4 * k > end:
                raise corrupt("is shorter than its length words", count=count)
            out = np.frombuffer(data, dtype=dtype, count=k, offset=at).astype(np.int64)
            at += 4 * k
            return out

        p_len = words(">u4", count)
        k_len = words(">i4", count) if flags & FLAG_KEYS else None
        h_count = words(">i4", count) if flags & FLAG_HEADERS else None
        hk_len = hv_len = None
        if h_count is not None:
            if (h_count < -1).any():
                raise corrupt("has a negative header count", count=count)
            total = int(np.where(h_count > 0, h_count, 0).sum())
            hk_len, hv_len = words(">u4", total), words(">i4", total)
        need = sum(int(np.where(x > 0, x, 0).sum()) for x in (p_len, k_len, hk_len, hv_len) if x is not None)
        if (k_len is not None and (k_len < -1).any()) or (hv_len is not None and (hv_len < -1).any()) or at + need != end:
            raise corrupt("has lengths that do not add up to its size", count=count)
        for gather, lengths in ((payloads, p_len), (keys, k_len), (hkeys, hk_len), (hvalues, hv_len)):
            if lengths is None:
                continue
            size = int(np.where(lengths > 0, lengths, 0).sum())
            gather.lengths.append(lengths)
            gather.pieces.append(data[at : at + size])
            at += size
        if k_len is None:
            keys.lengths.append(np.full(count, -1, dtype=np.int64))
        else:
            any_keys = True
        if h_count is None:
            header_counts.append(np.full(count, -1, dtype=np.int64))
        else:
            any_headers = True
            header_counts.append(h_count)
        counts[i] = count
    payload_col = payloads.array()
    key_col = keys.array() if any_keys else None
    header_col = None
    if any_headers:
        per_row = np.concatenate(header_counts)
        list_offsets = np.zeros(len(per_row) + 1, dtype=np.int32)
        np.cumsum(np.where(per_row > 0, per_row, 0), out=list_offsets[1:])
        hk = hkeys.array().cast(pa.string())
        items = pa.StructArray.from_arrays([hk, hvalues.array()], names=["key", "value"])
        header_col = pa.ListArray.from_arrays(pa.array(list_offsets), items, mask=pa.array(per_row < 0))
    return UnpackedRows(np.repeat(entry_ids, counts), payload_col, key_col, header_col)
