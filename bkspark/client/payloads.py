"""Payloads of consecutive entries laid end to end in one buffer: what a bulk append takes without a bytes
object per entry.

A column of Arrow binary values is already this shape (a data buffer and offsets), so the Spark writer hands
its rows over as one :class:`PackedPayloads` per batch; the writer's compiled encoder builds every ADDENTRY
frame straight from the buffer (docs/architecture.md, "Compiled fast path").  Anything else (the pure-Python
reference, a v3 ledger, an ensemble change in progress) takes the payloads one by one, as ``bytes`` slices.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import overload

__all__ = ["PackedPayloads", "payload_bytes"]


class PackedPayloads(Sequence[bytes]):
    """Payload ``i`` is ``data[bounds[i]:bounds[i + 1]]``; immutable, and slices share the buffer.

    ``data`` must be ``bytes`` (the writer frames it on the client's loop thread, later: a buffer the caller
    could still change would be read as it is then).  ``bounds`` is any buffer of native int64 values
    (a numpy ``int64`` array, an ``array('q')``), one more than the payloads, non-decreasing, within ``data``; it
    is copied (8 bytes per payload), so the caller may reuse its array at once.  ``max_size`` bounds every
    payload's size from above: a quick check against the frame limit.
    """

    __slots__ = ("data", "bounds", "max_size")

    data: bytes
    #: The bounds as a flat memoryview of format ``q``.
    bounds: memoryview
    max_size: int

    def __init__(self, data: bytes, bounds: object) -> None:
        if type(data) is not bytes:
            raise TypeError(f"packed payloads are held in bytes, not {type(data).__name__}")
        view = memoryview(bounds)  # type: ignore[arg-type]
        if view.itemsize != 8 or view.format.lstrip("@=") not in ("q", "l"):
            raise TypeError(f"the bounds of packed payloads are int64 values, not format {view.format!r}")
        view = memoryview(view.tobytes()).cast("q")  # our own copy, read later on the client's loop thread
        if len(view) < 1:
            raise ValueError("packed payloads need at least one bound (the start of the first payload)")
        self.data = data
        self.bounds = view
        sizes = self.sizes()
        if view[0] < 0 or view[-1] > len(data) or (sizes and min(sizes) < 0):
            raise ValueError(
                f"the bounds of packed payloads must be non-decreasing within the {len(data)} bytes of data"
            )
        self.max_size = max(sizes, default=0)

    @classmethod
    def _sharing(cls, data: bytes, bounds: memoryview, max_size: int) -> "PackedPayloads":
        """A run over already checked bounds (a slice's): no second pass."""
        run = object.__new__(cls)
        run.data, run.bounds, run.max_size = data, bounds, max_size
        return run

    def __len__(self) -> int:
        return len(self.bounds) - 1

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> "PackedPayloads": ...

    def __getitem__(self, index: int | slice) -> "bytes | PackedPayloads":
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise ValueError("packed payloads slice with step 1 only")
            stop = max(start, stop)
            return PackedPayloads._sharing(self.data, self.bounds[start : stop + 1], self.max_size)
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("packed payload index out of range")
        bounds = self.bounds
        return self.data[bounds[index] : bounds[index + 1]]

    def __iter__(self) -> Iterator[bytes]:
        data, bounds = self.data, self.bounds.tolist()
        return (data[a:b] for a, b in zip(bounds, bounds[1:]))

    @property
    def nbytes(self) -> int:
        """The payloads' bytes together."""
        return self.bounds[-1] - self.bounds[0]

    def sizes(self) -> list[int]:
        """Each payload's size."""
        bounds = self.bounds
        return list(map(operator.sub, bounds[1:], bounds[:-1]))

    def ends(self, length: int) -> list[int]:
        """The cumulative length after each payload, starting from ``length`` (a ledger's length before them)."""
        shift = length - self.bounds[0]
        return [bound + shift for bound in self.bounds[1:].tolist()]

    def __repr__(self) -> str:
        return f"PackedPayloads({len(self)} payloads, {self.nbytes} bytes)"


def payload_bytes(payloads: "Sequence[bytes] | PackedPayloads") -> int:
    """The bytes of ``payloads`` together, without a pass over a packed run."""
    if type(payloads) is PackedPayloads:
        return payloads.nbytes
    return sum(map(len, payloads))

