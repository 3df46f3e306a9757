"""PackedPayloads (bkspark/client/payloads.py): payloads end to end in one buffer, as a bulk append takes them
from the Spark writer; what it accepts, what it refuses, and that it reads as the list of its payloads."""

from __future__ import annotations

from array import array

import numpy as np
import pytest

from bkspark.client.aio import check_payloads
from bkspark.client.payloads import PackedPayloads


def test_reads_as_the_list_of_its_payloads() -> None:
    run = PackedPayloads(b"xxabcdefg", np.array([2, 5, 5, 9], dtype=np.int64))
    assert len(run) == 3 and list(run) == [b"abc", b"", b"defg"]
    assert run[0] == b"abc" and run[-1] == b"defg" and run.sizes() == [3, 0, 4]
    assert run.max_size == 4 and run.nbytes == 7 and run.ends(10) == [13, 13, 17]
    with pytest.raises(IndexError):
        run[3]


def test_a_slice_shares_the_buffer_and_keeps_the_bound() -> None:
    run = PackedPayloads(b"abcdefg", array("q", [0, 3, 3, 7]))
    part = run[1:]
    assert type(part) is PackedPayloads and part.data is run.data and list(part) == [b"", b"defg"]
    assert part.ends(0) == [0, 4] and part.nbytes == 4
    assert list(run[2:1]) == [] and list(run[:0]) == [] and list(run[-1:]) == [b"defg"]
    with pytest.raises(ValueError, match="step 1"):
        run[::2]


@pytest.mark.parametrize(
    "data, bounds, error, match",
    [
        (bytearray(b"abc"), array("q", [0, 3]), TypeError, "held in bytes"),
        (b"abc", array("i", [0, 3]), TypeError, "int64"),
        (b"abc", np.array([0.0, 3.0]), TypeError, "int64"),
        (b"abc", array("q"), ValueError, "at least one bound"),
        (b"abc", array("q", [0, 2, 1]), ValueError, "non-decreasing"),
        (b"abc", array("q", [-1, 2]), ValueError, "non-decreasing"),
        (b"abc", array("q", [0, 4]), ValueError, "within the 3 bytes"),
    ],
)
def test_bad_buffers_are_refused(data: object, bounds: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        PackedPayloads(data, bounds)  # type: ignore[arg-type]


def test_the_bounds_are_copied_so_the_caller_may_reuse_its_array() -> None:
    bounds = np.array([0, 1, 3], dtype=np.int64)
    run = PackedPayloads(b"abc", bounds)
    bounds[1] = 2  # the caller's next batch, say: the run was framed later, on the client's loop thread
    assert list(run) == [b"a", b"bc"] and run.sizes() == [1, 2]


def test_bounds_in_a_strided_view_are_read_in_order() -> None:
    run = PackedPayloads(b"abcd", np.array([0, 9, 1, 9, 4, 9], dtype=np.int64)[::2])
    assert list(run) == [b"a", b"bcd"]


def test_a_bulk_append_takes_it_as_it_is() -> None:
    run = PackedPayloads(b"ab", array("q", [0, 1, 2]))
    assert check_payloads(run) is run
