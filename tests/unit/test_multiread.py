"""bkspark.metadata.multiread: ZooKeeper's multiRead of getData operations, codec and kazoo glue (fake client).

The real server's answers are in tests/integration/test_metadata_zk.py.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from kazoo.exceptions import (
    ConnectionLoss,
    NoAuthError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
    UnimplementedError,
)
from kazoo.protocol.states import ZnodeStat

from bkspark.errors import MetadataError
from bkspark.metadata import multiread
from bkspark.metadata.multiread import (
    ANSWER_BYTES,
    FIRST_REQUEST,
    GET_DATA,
    MULTI_READ,
    READS_PER_REQUEST,
    decode_get_data_many,
    encode_get_data_many,
    get_many,
)
from bkspark.metadata.retry import ZkRetry

STAT = ZnodeStat(1, 2, 1_700_000_000_000, 4, 5, 6, 7, 0, 2, 0, 9)


def header(op_type: int, done: bool, err: int) -> bytes:
    return struct.pack(">iBi", op_type, done, err)


def data_result(data: bytes | None, stat: ZnodeStat = STAT) -> bytes:
    body = struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data
    return header(GET_DATA, False, 0) + body + struct.pack(">qqqqiiiqiiq", *stat)


def error_result(code: int) -> bytes:
    return header(-1, False, code) + struct.pack(">i", code)


END = header(-1, True, -1)


def test_the_request_is_zookeepers_multi_operation_record_of_get_data_without_watch() -> None:
    assert MULTI_READ == 22 and GET_DATA == 4  # ZooDefs.OpCode.multiRead, getData
    assert encode_get_data_many(["/a", "/ledgers/00/0000/L0007"]) == (
        header(4, False, -1) + struct.pack(">i", 2) + b"/a" + b"\0"
        + header(4, False, -1) + struct.pack(">i", 22) + b"/ledgers/00/0000/L0007" + b"\0"
        + header(-1, True, -1)
    )
    assert encode_get_data_many([]) == END
    assert encode_get_data_many(["/é"]) == header(4, False, -1) + struct.pack(">i", 3) + "/é".encode() + b"\0" + END


def test_each_operation_of_the_answer_succeeds_or_fails_on_its_own() -> None:
    answer = data_result(b"meta") + error_result(-101) + data_result(None) + error_result(-102) + END
    results = decode_get_data_many(b"\0\0\0\0" + answer, 4)
    assert results[0] == (b"meta", STAT) and results[0][1].ctime == 1_700_000_000_000
    assert isinstance(results[1], NoNodeError)
    assert results[2] == (b"", STAT)  # a znode without data
    assert isinstance(results[3], NoAuthError)
    assert decode_get_data_many(END) == []


@pytest.mark.parametrize(
    "answer",
    [
        data_result(b"meta")[:-3] + END,  # a stat cut short
        data_result(b"meta"),  # no end header
        struct.pack(">iBi", 4, 0, 0) + struct.pack(">i", 1000) + b"short",  # data past the end
        header(5, False, 0) + END,  # a setData result: not a read's answer
    ],
    ids=["cut-stat", "no-end", "data-past-end", "other-type"],
)
def test_a_malformed_answer_is_a_value_error(answer: bytes) -> None:
    with pytest.raises(ValueError):
        decode_get_data_many(answer)


class Result:
    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error

    def get(self, timeout: float | None = None) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class FakeTimeout(Exception):
    """The handler's ``timeout_exception``: what ``AsyncResult.get`` raises when no answer came in time."""


class FakeZk:
    """What get_many uses of a KazooClient: ``chroot``, ``handler.async_result()`` and ``timeout_exception``,
    ``_call``, ``get_async``. ``request_error`` fails every request, ``failures`` only the next ones."""

    timeout_exception = FakeTimeout

    def __init__(self, znodes: dict[str, bytes], *, multi: bool = True, chroot: str = "",
                 request_error: BaseException | None = None, failures: list[BaseException] | None = None) -> None:
        self.znodes, self.multi, self.chroot, self.request_error = znodes, multi, chroot, request_error
        self.failures = list(failures or [])
        self.handler = self
        self.requests: list[tuple[str, ...]] = []
        self.singles: list[str] = []

    def async_result(self) -> Result:
        return Result()

    def _read(self, path: str) -> Any:
        return (self.znodes[path], STAT) if path in self.znodes else NoNodeError()

    def _call(self, request: Any, result: Result) -> None:
        assert request.type == MULTI_READ
        self.requests.append(request.paths)
        if self.failures:
            result.error = self.failures.pop(0)
        elif self.request_error is not None:
            result.error = self.request_error
        elif not self.multi:
            result.error = UnimplementedError()
        else:
            # What kazoo does with the answer: the request class decodes it.
            answer = b"".join(
                data_result(self.znodes[p]) if p in self.znodes else error_result(-101) for p in request.paths
            ) + END
            result.value = type(request).deserialize(answer, 0)

    def get_async(self, path: str) -> Result:
        self.singles.append(path)
        got = self._read(path)
        return Result(error=got) if isinstance(got, BaseException) else Result(value=got)


def test_results_come_in_path_order_over_several_requests() -> None:
    znodes = {f"/l/{i}": b"m%d" % i for i in range(10) if i != 4}
    zk = FakeZk(znodes)
    paths = [f"/l/{i}" for i in range(10)]
    got = list(get_many(zk, paths, per_request=3))  # type: ignore[arg-type]
    assert [p for p, _ in got] == paths
    assert [r for _, r in got if not isinstance(r, BaseException)] == [(znodes[p], STAT) for p in paths if p != "/l/4"]
    assert isinstance(dict(got)["/l/4"], NoNodeError)
    assert [len(r) for r in zk.requests] == [3, 3, 3, 1] and zk.singles == []


def test_the_paths_sent_carry_the_clients_chroot() -> None:
    zk = FakeZk({"/app/l/1": b"x"}, chroot="/app")
    assert list(get_many(zk, ["/l/1"])) == [("/l/1", (b"x", STAT))]  # type: ignore[arg-type]
    assert zk.requests == [("/app/l/1",)]


def test_one_request_in_flight_until_the_server_answered_a_multi_read() -> None:
    # An old server may drop the connection after its UNIMPLEMENTED: a second request must not be in flight.
    zk = FakeZk({f"/l/{i}": b"x" for i in range(9)})
    consumer = get_many(zk, [f"/l/{i}" for i in range(9)], per_request=3)  # type: ignore[arg-type]
    next(consumer)
    assert len(zk.requests) == 1
    list(consumer)
    assert len(zk.requests) == 3


def test_a_server_without_multi_read_gets_one_get_data_per_znode_from_then_on() -> None:
    zk = FakeZk({f"/l/{i}": b"x%d" % i for i in range(5)}, multi=False)
    paths = [f"/l/{i}" for i in range(5)]
    assert list(get_many(zk, paths, per_request=2)) == [(p, (b"x%d" % i, STAT)) for i, p in enumerate(paths)]  # type: ignore[arg-type]
    assert len(zk.requests) == 1 and zk.singles == paths
    assert list(get_many(zk, paths[:1])) == [(paths[0], (b"x0", STAT))]  # type: ignore[arg-type]
    assert len(zk.requests) == 1  # never asked again
    assert zk in multiread._NO_MULTI_READ


def test_a_failed_request_is_raised() -> None:
    zk = FakeZk({"/l/1": b"x"}, request_error=ConnectionLoss())
    with pytest.raises(ConnectionLoss):
        list(get_many(zk, ["/l/1"]))  # type: ignore[arg-type]


def test_without_multi_read_a_znodes_error_is_its_result_and_a_lost_connection_is_raised() -> None:
    zk = FakeZk({"/l/1": b"x"}, multi=False)
    got = list(get_many(zk, ["/l/1", "/l/2"]))  # type: ignore[arg-type]
    assert got[0] == ("/l/1", (b"x", STAT)) and isinstance(got[1][1], NoNodeError)
    zk.get_async = lambda path: Result(error=ConnectionLoss())  # type: ignore[method-assign]
    with pytest.raises(ConnectionLoss):
        list(get_many(zk, ["/l/1"]))  # type: ignore[arg-type]


def test_the_first_request_is_small_and_later_ones_are_sized_by_the_last_answers_bytes_per_znode() -> None:
    # 600 small znodes, then 1,500 of 20 KB: requests grow to the cap, then shrink to what fits the answer bound.
    znodes = {f"/s/{i}": b"m" * 300 for i in range(600)}
    znodes.update({f"/b/{i}": b"B" * 20_000 for i in range(1500)})
    paths = [f"/s/{i}" for i in range(600)] + [f"/b/{i}" for i in range(1500)]
    zk = FakeZk(znodes)
    got = list(get_many(zk, paths))  # type: ignore[arg-type]
    assert [p for p, _ in got] == paths and all(r == (znodes[p], STAT) for p, r in got)
    sizes = [len(r) for r in zk.requests]
    assert sizes[0] == FIRST_REQUEST and sizes[1] == READS_PER_REQUEST  # 300 B znodes: the cap, not the bytes
    # Two requests are in flight, so the request after next is the first sized by an answer of big znodes.
    first_big = next(i for i, r in enumerate(zk.requests) if all(p.startswith("/b/") for p in r))
    fits = ANSWER_BYTES // (20_000 + multiread._RESULT_OVERHEAD)
    assert set(sizes[first_big + 2 : -1]) == {fits} and sizes[-1] <= fits
    assert max(sum(len(znodes[p]) for p in r) for r in zk.requests[first_big + 2 :]) <= ANSWER_BYTES
    # One znode larger than the bound is still read, one at a time.
    zk = FakeZk({f"/h/{i}": b"H" * (ANSWER_BYTES + 1) for i in range(3)})
    assert len(list(get_many(zk, [f"/h/{i}" for i in range(3)], per_request=2))) == 3  # type: ignore[arg-type]
    assert [len(r) for r in zk.requests] == [2, 1]


@pytest.mark.parametrize("error", [ConnectionLoss(), OperationTimeoutError()], ids=["connection-loss", "timeout"])
def test_a_request_lost_with_the_connection_is_sent_again_under_the_retry_policy(error: BaseException) -> None:
    znodes = {f"/l/{i}": b"m%d" % i for i in range(9)}
    paths = [f"/l/{i}" for i in range(9)]
    zk = FakeZk(znodes, failures=[error, error])  # the first request, then its first retry
    retries = []

    def retry(read):  # type: ignore[no-untyped-def]
        return ZkRetry(delay=0.001)(lambda: retries.append(1) or read())

    got = list(get_many(zk, paths, per_request=3, retry=retry))  # type: ignore[arg-type]
    assert got == [(p, (znodes[p], STAT)) for p in paths]
    assert zk.requests[:3] == [tuple(paths[:3])] * 3 and len(zk.requests) == 5  # three windows, two sent again
    assert len(retries) == 5  # each send is one try of the policy, the first send included
    # Without a policy, or once the policy gives up, the request's failure is raised.
    with pytest.raises(type(error)):
        list(get_many(FakeZk(znodes, failures=[error]), paths))  # type: ignore[arg-type]
    with pytest.raises(MetadataError, match="retries exhausted"):
        list(get_many(FakeZk(znodes, request_error=error), paths,  # type: ignore[arg-type]
                      retry=ZkRetry(max_tries=3, delay=0.001)))


def test_an_expired_session_is_not_sent_again() -> None:
    zk = FakeZk({"/l/1": b"x"}, failures=[SessionExpiredError()])
    with pytest.raises(MetadataError, match="session expired"):  # the policy's own typed error
        list(get_many(zk, ["/l/1"], retry=ZkRetry(delay=0.001)))  # type: ignore[arg-type]
    assert len(zk.requests) == 1


def test_no_answer_in_time_is_zookeepers_operation_timeout_and_is_retried() -> None:
    zk = FakeZk({"/l/1": b"x"}, failures=[FakeTimeout()])
    with pytest.raises(OperationTimeoutError, match="no answer from ZooKeeper"):
        list(get_many(zk, ["/l/1"], timeout=0.01))  # type: ignore[arg-type]
    zk = FakeZk({"/l/1": b"x"}, failures=[FakeTimeout()])
    assert list(get_many(zk, ["/l/1"], retry=ZkRetry(delay=0.001))) == [("/l/1", (b"x", STAT))]  # type: ignore[arg-type]


def test_without_multi_read_a_lost_connection_is_retried_one_by_one() -> None:
    zk = FakeZk({"/l/1": b"x", "/l/2": b"y"}, multi=False)
    assert len(list(get_many(zk, ["/l/1"]))) == 1  # learns the server has no multiRead
    real_get_async, lost = zk.get_async, [ConnectionLoss()]
    zk.get_async = lambda path: Result(error=lost.pop()) if lost else real_get_async(path)  # type: ignore[method-assign]
    got = list(get_many(zk, ["/l/1", "/l/2"], retry=ZkRetry(delay=0.001)))  # type: ignore[arg-type]
    assert got == [("/l/1", (b"x", STAT)), ("/l/2", (b"y", STAT))]
    assert len(zk.requests) == 1  # still no multiRead asked
