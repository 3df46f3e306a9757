"""Arrow forms of entries read back, built from buffers with no Python object per row.

pyarrow is optional for the client (the base install has none): it is imported when a function here runs, and
its absence is a clear :class:`~bkspark.errors.InvalidOptionError`.  The data source builds its full schema on
top of :func:`binary_array` (``bkspark.datasource.schema.entry_batch``), so both share one gather.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from bkspark.client.payloads import PackedPayloads
from bkspark.errors import InvalidOptionError
from bkspark.protocol.speedups import speedups as _speedups

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = [
    "DEFAULT_BYTES_PER_BATCH", "DEFAULT_ROWS_PER_BATCH", "PAYLOAD_BATCH_COLUMNS", "binary_array", "payload_batch",
    "payload_runs_batch", "require_pyarrow",
]

#: Rows of one Arrow batch by default (Spark's Arrow transfer likes batches of thousands of rows).
DEFAULT_ROWS_PER_BATCH = 10_000

#: Payload bytes one Arrow batch may hold: ``binary`` columns have int32 offsets (2 GiB per array), and
#: Spark's Arrow transfer is happier with batches of tens of MiB than with one huge one.
DEFAULT_BYTES_PER_BATCH = 64 * 1024 * 1024

#: Columns of :func:`payload_batch`, in order.
PAYLOAD_BATCH_COLUMNS = ("entry_id", "payload")


def require_pyarrow() -> Any:
    """The ``pyarrow`` module, or a clear error naming the extra to install."""
    try:
        import numpy  # noqa: F401 - the columns are built from numpy buffers
        import pyarrow
    except ImportError as exc:
        raise InvalidOptionError(
            "Arrow reads need pyarrow and numpy, which the client's base install does not have; "
            "pip install 'bkspark[arrow]'"
        ) from exc
    return pyarrow


def binary_array(payloads: Sequence[bytes]) -> "pa.BinaryArray":
    """``payloads`` as one Arrow binary array: one joined data buffer and an int32 offsets buffer.

    A list goes through the compiled gather when it was built (one pass for the offsets, one copy of the
    bytes; docs/architecture.md, "Compiled fast path"); the numpy code below is the reference.
    """
    pa = require_pyarrow()
    import numpy as np

    n = len(payloads)
    if _speedups is not None and type(payloads) is list:
        gathered = _speedups.gather_binary(payloads)
        if gathered is not None:  # None: over 2 GiB, which the check below reports
            data, offsets = gathered
            return pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, payloads), dtype=np.int64, count=n), out=offsets[1:])
    _check_int32_offsets(int(offsets[-1]))  # before the join: no 2 GiB copy to refuse
    return _binary_from_buffers(pa, n, offsets, b"".join(payloads))


def _check_int32_offsets(end: int) -> None:
    """The payloads of one array must end within what int32 offsets address (2 GiB)."""
    if end > (1 << 31) - 1:
        raise InvalidOptionError(f"{end} payload bytes do not fit one Arrow binary array (2 GiB); use smaller batches")


def _binary_from_buffers(pa: Any, n: int, offsets: Any, data: bytes) -> "pa.BinaryArray":
    """A binary array of ``n`` values over ``data`` at ``offsets`` (n + 1 int64 values, any first one); the
    caller checked them with :func:`_check_int32_offsets` before it made ``data``."""
    import numpy as np

    return pa.BinaryArray.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )


def packed_binary_array(pieces: "Sequence[PackedPayloads]") -> "pa.BinaryArray":
    """The payloads of ``pieces`` as one Arrow binary array: one run's buffer taken as the data with no copy (its
    bounds as the offsets, whatever the first), several joined into one buffer (one copy, the offsets shifted by
    numpy): the only place runs are joined."""
    pa = require_pyarrow()
    import numpy as np

    if len(pieces) == 1:
        run = pieces[0]
        offsets = np.frombuffer(run.bounds, dtype=np.int64)
        _check_int32_offsets(int(offsets[-1]))
        return _binary_from_buffers(pa, len(run), offsets, run.data)
    bounds = [np.frombuffer(run.bounds, dtype=np.int64) for run in pieces]
    shifts = np.cumsum([0] + [int(b[-1] - b[0]) for b in bounds[:-1]])
    offsets = np.concatenate([np.zeros(1, dtype=np.int64)] + [b[1:] - b[0] + shift for b, shift in zip(bounds, shifts)])
    _check_int32_offsets(int(offsets[-1]))  # before the join: no 2 GiB copy to refuse
    data = b"".join(memoryview(run.data)[int(b[0]) : int(b[-1])] for run, b in zip(pieces, bounds))
    return _binary_from_buffers(pa, int(sum(len(b) - 1 for b in bounds)), offsets, data)


def payload_batch(first_entry_id: int, payloads: Sequence[bytes]) -> "pa.RecordBatch":
    """Consecutive entries ``first_entry_id ..`` as a RecordBatch of ``entry_id`` (int64) and ``payload``."""
    return _entries_batch(first_entry_id, binary_array(payloads))


def payload_runs_batch(first_entry_id: int, pieces: "Sequence[Sequence[bytes]]") -> "pa.RecordBatch":
    """:func:`payload_batch` of the payloads of ``pieces`` in order (a group of
    :meth:`~bkspark.client.aio.AsyncReadHandle.read_payload_runs`): packed runs become the payload column's
    buffers with no object per entry (:func:`packed_binary_array`); a group with a list in it (single reads,
    digests other than CRC32C) is gathered from its ``bytes``."""
    if pieces and all(type(piece) is PackedPayloads for piece in pieces):
        return _entries_batch(first_entry_id, packed_binary_array(pieces))  # type: ignore[arg-type]
    return payload_batch(first_entry_id, [payload for piece in pieces for payload in piece])


def _entries_batch(first_entry_id: int, payloads: "pa.BinaryArray") -> "pa.RecordBatch":
    pa = require_pyarrow()
    import numpy as np

    n = len(payloads)
    return pa.RecordBatch.from_arrays(
        [pa.array(np.arange(first_entry_id, first_entry_id + n, dtype=np.int64)), payloads],
        names=list(PAYLOAD_BATCH_COLUMNS),
    )
