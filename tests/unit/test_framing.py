"""Frame splitting: Netty's LengthFieldBasedFrameDecoder(max, 0, 4, 0, 4) rules, incremental feeding."""

from __future__ import annotations

import struct

import pytest

from bkspark.errors import FrameTooLargeError, LocalProtocolError
from bkspark.protocol.framing import DEFAULT_MAX_FRAME_SIZE, SMALL_BODY, FrameSplitter, encode_frame


def test_default_limit_is_netty_max_frame_size() -> None:
    assert DEFAULT_MAX_FRAME_SIZE == 5_242_880


def test_encode_frame_prefixes_big_endian_length() -> None:
    # docs/protocol.md §6: a READENTRY request body is 20 bytes -> prefix 00000014.
    body = bytes.fromhex("02020000" "0000000000000001" "0000000000000000")
    assert encode_frame(body) == bytes.fromhex("00000014") + body
    assert encode_frame(b"") == b"\x00\x00\x00\x00"
    assert encode_frame(memoryview(b"abc")) == b"\x00\x00\x00\x03abc"
    assert encode_frame(bytearray(b"xy")) == b"\x00\x00\x00\x02xy"


def test_feed_returns_every_complete_body_in_order() -> None:
    bodies = [b"", b"a", b"hello world", bytes(range(256)) * 3]
    stream = b"".join(encode_frame(b) for b in bodies)
    splitter = FrameSplitter()
    assert [bytes(v) for v in splitter.feed(stream)] == bodies
    assert splitter.buffered == 0


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 4, 5, 7, 64, 1000])
def test_feed_in_chunks_of_any_size(chunk_size: int) -> None:
    bodies = [bytes([i]) * i for i in range(40)]
    stream = b"".join(encode_frame(b) for b in bodies)
    splitter = FrameSplitter()
    got: list[bytes] = []
    for start in range(0, len(stream), chunk_size):
        got.extend(bytes(v) for v in splitter.feed(stream[start : start + chunk_size]))
    assert got == bodies
    assert splitter.buffered == 0


def test_partial_frame_is_buffered_until_complete() -> None:
    splitter = FrameSplitter()
    frame = encode_frame(b"0123456789")
    assert splitter.feed(frame[:2]) == []
    assert splitter.buffered == 2
    assert splitter.feed(frame[2:9]) == []
    assert splitter.buffered == 9
    assert [bytes(v) for v in splitter.feed(frame[9:] + frame[:1])] == [b"0123456789"]
    assert splitter.buffered == 1


def test_handed_out_views_stay_valid_after_more_feeding() -> None:
    """Bodies must not be overwritten by later data (the caller may keep them)."""
    splitter = FrameSplitter()
    first = encode_frame(b"A" * 100)
    second = encode_frame(b"B" * 100)
    kept = splitter.feed(first[:50])
    kept += splitter.feed(first[50:] + second[:30])
    kept += splitter.feed(second[30:])
    # A caller buffer that is reused must not leak into the bodies either.
    reused = bytearray(encode_frame(b"C" * 10))
    kept += splitter.feed(reused)
    reused[:] = b"\xff" * len(reused)
    assert [bytes(v) for v in kept] == [b"A" * 100, b"B" * 100, b"C" * 10]


def test_large_frame_in_many_chunks() -> None:
    body = bytes(range(256)) * (4 * 1024 * 4)  # 4 MiB
    frame = encode_frame(body)
    splitter = FrameSplitter()
    got = []
    for start in range(0, len(frame), 65536):
        got.extend(splitter.feed(frame[start : start + 65536]))
    assert len(got) == 1 and got[0] == body


def test_limit_counts_the_length_field_like_netty() -> None:
    splitter = FrameSplitter(max_frame_size=104)
    assert [bytes(v) for v in splitter.feed(encode_frame(b"x" * 100))] == [b"x" * 100]
    with pytest.raises(FrameTooLargeError):
        FrameSplitter(max_frame_size=104).feed(encode_frame(b"x" * 101))


def test_default_limit_boundary() -> None:
    largest = DEFAULT_MAX_FRAME_SIZE - 4
    assert FrameSplitter().feed(struct.pack(">I", largest)) == []
    with pytest.raises(FrameTooLargeError):
        FrameSplitter().feed(struct.pack(">I", largest + 1))


def test_too_large_raises_as_soon_as_prefix_arrives_and_stays_failed() -> None:
    splitter = FrameSplitter(max_frame_size=64)
    assert splitter.feed(b"\x00\x00") == []
    with pytest.raises(FrameTooLargeError) as info:
        splitter.feed(b"\x01\x00")
    assert info.value.context["length"] == 256
    with pytest.raises(FrameTooLargeError):
        splitter.feed(encode_frame(b"ok"))


def test_length_is_unsigned() -> None:
    # 0xFFFFFFFF is 4 GiB - 1 for Netty (getUnsignedInt), not -1.
    with pytest.raises(FrameTooLargeError) as info:
        FrameSplitter().feed(b"\xff\xff\xff\xff")
    assert info.value.context["length"] == 0xFFFFFFFF
    with pytest.raises(FrameTooLargeError):
        FrameSplitter().feed(b"\x80\x00\x00\x00rest")


def test_frames_before_a_bad_prefix_in_the_same_chunk_are_lost() -> None:
    splitter = FrameSplitter(max_frame_size=64)
    with pytest.raises(FrameTooLargeError):
        splitter.feed(encode_frame(b"fine") + b"\x00\x00\x10\x00")


def test_invalid_max_frame_size() -> None:
    with pytest.raises(LocalProtocolError):
        FrameSplitter(max_frame_size=3)


def test_many_small_frames_are_linear() -> None:
    """100k tiny frames in one chunk: each body is a small bytes copy (framing.SMALL_BODY), no re-copying
    of the tail; larger bodies are views over the one immutable chunk."""
    stream = encode_frame(b"abcd") * 100_000
    splitter = FrameSplitter()
    bodies = splitter.feed(stream)
    assert len(bodies) == 100_000
    assert all(type(b) is bytes for b in bodies) and bodies[-1] == b"abcd"
    body = bytes(range(SMALL_BODY + 1))
    bodies = splitter.feed(encode_frame(body) * 10_000)
    assert len(bodies) == 10_000 and bytes(bodies[-1]) == body
    assert bodies[0].obj is bodies[-1].obj  # all views over one immutable chunk
