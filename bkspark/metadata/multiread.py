"""Many znodes' data in few ZooKeeper round trips: ZooKeeper's read-only multi (``multiRead``, opcode 22).

Planning a Spark scan of a dataset reads every ledger's metadata znode; one ``getData`` per znode costs a
request and an answer each, and in kazoo a wake-up of its connection thread each (the thread hand-over,
not the network, was most of the time: BENCHMARKS.md, "Planning: the ledgers' metadata in multi reads").
ZooKeeper 3.6 and later answer a ``multiRead`` of many ``getData`` operations with one response in which
each operation succeeds or fails on its own (a missing znode is that operation's NONODE, the others are
read). That is the Java client's ``ZooKeeper.multi`` of ``Op.getData`` (docs/protocol.md §5).

The codec is pure functions over bytes (:func:`encode_get_data_many`, :func:`decode_get_data_many`);
:func:`get_many` sends it through kazoo. A server that does not know the opcode (ZooKeeper 3.5 and older)
answers UNIMPLEMENTED: that client falls back to one pipelined ``getData`` per znode for good.

Two bounds a single getData does not need (docs/protocol.md §5): an answer is kept near :data:`ANSWER_BYTES` by
sizing each request from the bytes per znode of the last answer, and a request that fails with the connection
(connection loss, operation timeout) is sent again under the caller's retry policy, since reads are safe to repeat.
"""

from __future__ import annotations

import struct
import weakref
from collections import deque
from typing import Callable, Iterator, NamedTuple, Optional, Sequence, Union

from kazoo.client import KazooClient
from kazoo.exceptions import (
    EXCEPTIONS,
    KazooException,
    NoAuthError,
    NoNodeError,
    OperationTimeoutError,
    UnimplementedError,
)
from kazoo.handlers.threading import AsyncResult
from kazoo.protocol.states import ZnodeStat

from bkspark.metadata.retry import TRANSIENT_ZK_ERRORS

__all__ = [
    "MULTI_READ", "GET_DATA", "READS_PER_REQUEST", "FIRST_REQUEST", "ANSWER_BYTES", "ReadResult", "Retry",
    "encode_get_data_many", "decode_get_data_many", "get_many",
]

#: ZooKeeper's opcodes (``ZooDefs.OpCode``): the read-only multi, getData, and an operation's error result.
MULTI_READ = 22
GET_DATA = 4
ERROR = -1

#: getData operations per multiRead at most: a dataset's ledger metadata is a few hundred bytes each, so an
#: answer stays near 100 KB while the round trips fall by this factor.
READS_PER_REQUEST = 256

#: getData operations in the first multiRead, before any answer has shown how large the znodes are.
FIRST_REQUEST = 32

#: The size an answer is kept near: a request asks for as many znodes as fit at the last answer's bytes per znode
#: (a ledger with thousands of ensemble segments has metadata of hundreds of KB). Half of ``jute.maxbuffer``'s
#: default, the largest packet ZooKeeper's Java client accepts.
ANSWER_BYTES = 512 * 1024

#: An answer's bytes per znode beyond its data: the stat (68 bytes) and the operation's header and length.
_RESULT_OVERHEAD = 84

#: multiRead requests in flight per :func:`get_many` (ZooKeeper reads the next while this process parses).
REQUESTS_IN_FLIGHT = 2

_HEADER = struct.Struct(">iBi")  # MultiHeader: type, done, err
_INT = struct.Struct(">i")
_STAT = struct.Struct(">qqqqiiiqiiq")  # czxid mzxid ctime mtime version cversion aversion owner dataLength numChildren pzxid

#: One znode's read: its data and stat, or the kazoo exception of its error code (e.g. ``NoNodeError()``).
ReadResult = Union[tuple[bytes, ZnodeStat], KazooException]

#: A retry policy: calls its argument again while it raises a transient ZooKeeper error, within its bounds
#: (:class:`bkspark.metadata.retry.ZkRetry` is one).
Retry = Callable[[Callable[[], list[ReadResult]]], list[ReadResult]]


def encode_get_data_many(paths: Sequence[str]) -> bytes:
    """The body of a multiRead of one getData (no watch) per path, in order (paths as the server sees them)."""
    out = bytearray()
    for path in paths:
        raw = path.encode("utf-8")
        out += _HEADER.pack(GET_DATA, 0, -1)
        out += _INT.pack(len(raw))
        out += raw
        out.append(0)  # watch: false
    out += _HEADER.pack(ERROR, 1, -1)
    return bytes(out)


def decode_get_data_many(buf: bytes | bytearray | memoryview, offset: int = 0) -> list[ReadResult]:
    """The results of a multiRead of getData operations, in request order.

    Raises ``ValueError`` for bytes that are not such an answer (a truncated body, another operation's type).
    """
    results: list[ReadResult] = []
    try:
        while True:
            op_type, done, err = _HEADER.unpack_from(buf, offset)
            offset += _HEADER.size
            if done:
                return results
            if op_type == GET_DATA:
                (length,) = _INT.unpack_from(buf, offset)
                offset += _INT.size
                if length < 0:
                    data = b""
                else:
                    if offset + length > len(buf):
                        raise ValueError("a getData result runs past the answer")
                    data = bytes(buf[offset : offset + length])
                    offset += length
                stat = ZnodeStat._make(_STAT.unpack_from(buf, offset))
                offset += _STAT.size
                results.append((data, stat))
            elif op_type == ERROR:
                (code,) = _INT.unpack_from(buf, offset)
                offset += _INT.size
                results.append(EXCEPTIONS[code]())
            else:
                raise ValueError(f"operation type {op_type} in the answer to a multiRead of getData")
    except struct.error as exc:
        raise ValueError(f"truncated multiRead answer: {exc}") from exc


class _GetDataMany(NamedTuple):
    """A kazoo request object (what ``KazooClient._call`` queues): the multiRead of ``paths``."""

    paths: tuple[str, ...]

    type = MULTI_READ

    def serialize(self) -> bytes:
        return encode_get_data_many(self.paths)

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> list[ReadResult]:
        """The response object kazoo hands to the request's result (as its ``GetData.deserialize`` does)."""
        return decode_get_data_many(buf, offset)


#: Clients whose server answered a multiRead UNIMPLEMENTED (ZooKeeper before 3.6): one getData per znode.
_NO_MULTI_READ: "weakref.WeakSet[KazooClient]" = weakref.WeakSet()
#: Clients whose server answered a multiRead: until then one is in flight at a time (an old server may drop the
#: connection after its UNIMPLEMENTED, which would fail a second request in flight).
_MULTI_READ_OK: "weakref.WeakSet[KazooClient]" = weakref.WeakSet()


def _send(zk: KazooClient, paths: Sequence[str]) -> AsyncResult:
    chroot = zk.chroot or ""
    result = zk.handler.async_result()
    zk._call(_GetDataMany(tuple(chroot + path for path in paths)), result)  # kazoo's own transaction path
    return result


def _one_by_one(zk: KazooClient, paths: Sequence[str], timeout: float) -> list[ReadResult]:
    """Pipelined getData, one per path: a znode's own error is its result, as in a multiRead's answer; a failure
    of the connection or session is raised."""
    pending = [zk.get_async(path) for path in paths]
    out: list[ReadResult] = []
    for result in pending:
        try:
            out.append(_wait(zk, result, timeout))
        except (NoNodeError, NoAuthError) as exc:
            out.append(exc)
    return out


def _wait(zk: KazooClient, pending: AsyncResult, timeout: float) -> object:
    """``pending``'s value; no answer within ``timeout`` is ZooKeeper's own operation timeout (a transient error:
    the read may be sent again)."""
    try:
        return pending.get(timeout=timeout)
    except zk.handler.timeout_exception as exc:
        raise OperationTimeoutError(f"no answer from ZooKeeper in {timeout} s") from exc


def _answer(zk: KazooClient, window: Sequence[str], pending: AsyncResult | None, timeout: float) -> list[ReadResult]:
    """The results of ``window``: ``pending``'s multiRead, or getData one by one on a server without it."""
    if pending is not None:
        try:
            results = _wait(zk, pending, timeout)
            _MULTI_READ_OK.add(zk)
            return results  # type: ignore[return-value]
        except UnimplementedError:
            _NO_MULTI_READ.add(zk)
    return _one_by_one(zk, window, timeout)


def _answer_bytes(results: list[ReadResult]) -> int:
    return sum(len(r[0]) + _RESULT_OVERHEAD if isinstance(r, tuple) else 16 for r in results)


def get_many(zk: KazooClient, paths: Sequence[str], *, timeout: float = 60.0, per_request: int | None = None,
             retry: Optional[Retry] = None, answer_bytes: int = ANSWER_BYTES) -> Iterator[tuple[str, ReadResult]]:
    """``(path, result)`` for every path, in order (any thread): multiReads of at most ``per_request`` paths
    (:data:`READS_PER_REQUEST` by default; :data:`FIRST_REQUEST` until an answer shows the znodes' size, then as
    many as fit ``answer_bytes``), two in flight.

    A znode's own error (``NoNodeError``, ``NoAuthError``) is its result. A request that fails with the connection
    (``ConnectionLoss``, ``OperationTimeoutError``) is sent again through ``retry`` when one is given (the request
    already sent is its first try). Whatever ``retry`` raises is raised, and so is any other failure of a request
    (session expiry; any failure when no retry is given)."""
    limit = per_request or READS_PER_REQUEST
    size = min(limit, FIRST_REQUEST)
    in_flight: deque[tuple[Sequence[str], AsyncResult | None]] = deque()
    sent = 0
    while sent < len(paths) or in_flight:
        depth = REQUESTS_IN_FLIGHT if zk in _MULTI_READ_OK or zk in _NO_MULTI_READ else 1
        while sent < len(paths) and len(in_flight) < depth:
            window = paths[sent : sent + size]
            sent += len(window)
            in_flight.append((window, None if zk in _NO_MULTI_READ else _send(zk, window)))
        window, pending = in_flight.popleft()
        if retry is None:
            results = _answer(zk, window, pending, timeout)
        else:  # the request already sent is the policy's first try
            sent_first = [pending]

            def read_window() -> list[ReadResult]:
                if sent_first:
                    request = sent_first.pop()
                else:
                    request = None if zk in _NO_MULTI_READ else _send(zk, window)
                return _answer(zk, window, request, timeout)

            results = retry(read_window)
        if len(results) != len(window):
            raise ValueError(f"a multiRead of {len(window)} paths answered {len(results)} results")
        per_path = _answer_bytes(results) / len(results)
        size = max(1, min(limit, int(answer_bytes // per_path)))
        yield from zip(window, results)
