"""Length-prefixed frames, exactly as BookKeeper's Netty pipelines cut them.

Every v2 and v3 message travels as ``[N: int32 BE][N bytes of body]``.  Both
the Java bookie and the Java client split the stream with
``LengthFieldBasedFrameDecoder(maxFrameSize, 0, 4, 0, 4)``: the length is read
as an *unsigned* 32-bit number, the limit is compared with ``N + 4`` (the
length field counts), and a frame over the limit fails at once (``failFast``),
after which BookKeeper closes the connection.  :class:`FrameSplitter` applies
the same rules so a Python peer accepts and refuses exactly what Java does.

Sans-IO: nothing here reads or writes a socket.
"""

from __future__ import annotations

import struct

from bkspark.errors import FrameTooLargeError, LocalProtocolError
from bkspark.protocol.speedups import speedups as _speedups

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "LENGTH_FIELD_SIZE",
    "MAX_BODY_SIZE",
    "encode_frame",
    "FrameSplitter",
]

#: ``nettyMaxFrameSizeBytes`` default (AbstractConfiguration.DEFAULT_NETTY_MAX_FRAME_SIZE).
#: The limit includes the 4 length bytes, so the largest default body is 5,242,876 bytes.
DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024

#: Bytes in the length prefix.
LENGTH_FIELD_SIZE = 4

#: Largest body a Java peer can send: it writes the length with ``ByteBuf.writeInt``.
MAX_BODY_SIZE = 0x7FFFFFFF

#: Bodies of at most this many bytes come out of :meth:`FrameSplitter.feed` as ``bytes`` copies rather than
#: views: an ADDENTRY response is 24 bytes, and a small ``bytes`` costs less to make than a view and is not
#: tracked by the garbage collector (a client gets one per bookie per add; BENCHMARKS.md,
#: "Per-entry allocations of the client").
SMALL_BODY = 64

_LENGTH = struct.Struct(">I")
_unpack_length = _LENGTH.unpack_from


def encode_frame(body: bytes | bytearray | memoryview) -> bytes:
    """Prefix ``body`` with its 4-byte big-endian length (one copy of the body).

    Raises :class:`LocalProtocolError` for a body a Java peer could never
    receive (more than ``2**31 - 1`` bytes).
    """
    body_size = len(body) if not isinstance(body, memoryview) else body.nbytes
    if body_size > MAX_BODY_SIZE:
        raise LocalProtocolError("frame body too large to encode", size=body_size)
    return _LENGTH.pack(body_size) + body


class FrameSplitter:
    """Incremental frame splitter: feed it stream bytes, get whole frame bodies.

    ``feed()`` returns the bodies (length prefix stripped) as memoryviews, or as
    ``bytes`` for bodies of at most :data:`SMALL_BODY` bytes.  They are safe to
    keep: a body that arrived inside one ``feed()`` call is a view over an
    immutable ``bytes`` copy of that chunk (no copy at all when the
    caller passes ``bytes``), and a body assembled from several chunks lives in
    a ``bytearray`` the splitter hands over and never touches again.  So many
    small frames cost one slice each, and one large frame arriving in pieces
    is appended into a single growing buffer (amortised linear, no quadratic
    re-copying).

    After a :class:`FrameTooLargeError` the stream position is lost, as in
    Netty; the splitter keeps raising and the connection must be closed
    (which is what the Java bookie does).
    """

    __slots__ = ("max_frame_size", "_pending", "_pending_total", "_failure")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if not isinstance(max_frame_size, int) or max_frame_size < LENGTH_FIELD_SIZE:
            raise LocalProtocolError(
                "max_frame_size must be an int of at least 4 (it counts the length field)",
                max_frame_size=max_frame_size,
            )
        self.max_frame_size = max_frame_size
        # Bytes of a frame that has started but not finished (prefix included).
        self._pending = bytearray()
        # Total size (prefix included) of the pending frame once its prefix is known, else 0.
        self._pending_total = 0
        self._failure: FrameTooLargeError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for a frame that is not complete yet."""
        return len(self._pending)

    def _frame_total(self, body_size: int) -> int:
        """``N + 4`` after Netty's limit check; remember the failure if over."""
        total = body_size + LENGTH_FIELD_SIZE
        if total > self.max_frame_size:
            self._failure = FrameTooLargeError(
                "frame length exceeds nettyMaxFrameSizeBytes",
                length=body_size,
                max_frame_size=self.max_frame_size,
            )
            self._pending = bytearray()
            self._pending_total = 0
            raise self._failure
        return total

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview | bytes]:
        """Add stream bytes; return every frame body completed by them, in order.

        Raises :class:`FrameTooLargeError` as soon as a length prefix is over the
        limit (frames completed earlier in the same chunk are lost with it, as
        the connection is unusable anyway).
        """
        if self._failure is not None:
            raise FrameTooLargeError(str(self._failure))
        if not isinstance(data, bytes):
            # The caller may reuse its buffer (e.g. asyncio BufferedProtocol):
            # take one immutable copy so the views we return stay valid.
            data = bytes(data)
        view = memoryview(data)
        data_size = len(view)
        offset = 0
        bodies: list[memoryview | bytes] = []

        pending = self._pending
        if pending:
            if self._pending_total == 0:
                take = min(LENGTH_FIELD_SIZE - len(pending), data_size)
                pending += view[:take]
                offset = take
                if len(pending) < LENGTH_FIELD_SIZE:
                    return bodies
                self._pending_total = self._frame_total(_unpack_length(pending, 0)[0])
            take = min(self._pending_total - len(pending), data_size - offset)
            pending += view[offset : offset + take]
            offset += take
            if len(pending) < self._pending_total:
                return bodies
            # Hand this buffer over for good; the next partial frame gets a new one.
            bodies.append(memoryview(pending)[LENGTH_FIELD_SIZE:])
            self._pending = bytearray()
            self._pending_total = 0

        if _speedups is not None:
            # The compiled loop cuts the whole frames under the limit (bkspark/protocol/speedups.py); the loop
            # below takes the rest: a frame over the limit, or the start of the next one.
            whole, offset = _speedups.split_frames(view, offset, self.max_frame_size, SMALL_BODY)
            if bodies:
                bodies.extend(whole)
            else:
                bodies = whole
        frame_total = self._frame_total
        while data_size - offset >= LENGTH_FIELD_SIZE:
            total = frame_total(_unpack_length(view, offset)[0])
            end = offset + total
            if end > data_size:
                break
            bodies.append(view[offset + LENGTH_FIELD_SIZE : end] if total > SMALL_BODY + LENGTH_FIELD_SIZE
                          else data[offset + LENGTH_FIELD_SIZE : end])
            offset = end

        if offset < data_size:
            self._pending = bytearray(view[offset:])
            if data_size - offset >= LENGTH_FIELD_SIZE:
                # The loop above already checked this prefix against the limit.
                self._pending_total = _unpack_length(view, offset)[0] + LENGTH_FIELD_SIZE
        return bodies
