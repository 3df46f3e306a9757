"""Several rows in one entry: the connector's ``rows-v1`` entry format (docs/connector.md, "Rows per entry").

Much of a bookie's work is per entry whatever its size (one request, one journal record, one index row, one
response), so a write of small rows, one row per entry, is bound by the bookies' work per entry.  Apache Kafka's producer batches records for the same reason, and so do Pulsar (batch
messages) and DistributedLog (record sets).  With the write option ``rowsPerEntry`` above 1 the writer packs
consecutive rows of a task into one entry, and tags the ledger so every reader unpacks it.

An entry of this format, every integer big-endian (as BookKeeper's own headers are)::

    magic    4 bytes  b"BKR" + format version 1
    count    u32      rows in the entry, >= 1
    lengths  count x u32, each row's byte length
    rows     the rows' bytes, one after the other

Both directions work on Arrow buffers and numpy arrays, with Python work per entry and none per row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bkspark.errors import CorruptEntryError, InvalidOptionError

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = [
    "ENTRY_FORMAT_KEY",
    "ROWS_V1",
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
MAGIC = b"BKR\x01"
#: Magic and count.
HEADER_BYTES = 8
#: The length word each row adds to its entry.
ROW_OVERHEAD_BYTES = 4
#: Bytes one packed entry may reach before the writer starts the next (option ``entryMaxBytes``); Pulsar's
#: producer bounds its batches at 128 KiB by default too.
DEFAULT_ENTRY_MAX_BYTES = 128 * 1024


def packed_ledger(custom_metadata: Any) -> bool:
    """Whether a ledger's custom metadata (a mapping, or ``(key, value)`` pairs) says its entries hold packed rows."""
    pairs = custom_metadata.items() if hasattr(custom_metadata, "items") else custom_metadata
    for key, value in pairs or ():
        if key == ENTRY_FORMAT_KEY:
            if bytes(value) != ROWS_V1:
                raise CorruptEntryError(
                    f"the ledger's {ENTRY_FORMAT_KEY} is {bytes(value)!r}; this bkspark reads {ROWS_V1!r} only",
                    entry_format=bytes(value),
                )
            return True
    return False


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
