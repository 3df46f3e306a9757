"""The compiled fast path (bkspark/protocol/_speedups.c) against the pure-Python reference it stands in for.

Every case runs both ways, the compiled module on and off (``_speedups`` of every module in :data:`USERS` set to
None, what ``BKSPARK_NO_EXTENSIONS=1`` does at import), and the results must be equal: the same payload bytes, the
same error type and message (docs/architecture.md, "Compiled fast path").
"""

from __future__ import annotations

import os
import collections
import random
from array import array
import subprocess
import sys

import crc32c
import pytest

from bkspark.client import arrow as arrow_module
from bkspark.client import ops as ops_module
from bkspark.client.ops import BookieOps
from bkspark.client.payloads import PackedPayloads
from bkspark.errors import (
    DigestMismatchError,
    FrameTooLargeError,
    InvalidOptionError,
    LocalProtocolError,
    MalformedFrameError,
)
from bkspark.protocol import correlation as correlation_module
from bkspark.protocol import digest as digest_module
from bkspark.protocol import framing as framing_module
from bkspark.protocol import v2, v2_bulk
from bkspark.protocol.digest import Digester, DigestType, master_key
from bkspark.protocol.framing import FrameSplitter
from bkspark.protocol.speedups import DISABLE_ENV, speedups

LEDGER = 42

#: Every module that takes the compiled path when it is on (each reads ``_speedups`` at call time).
USERS = (digest_module, v2, v2_bulk, framing_module, ops_module, arrow_module, correlation_module)


def test_the_compiled_path_is_built_and_on() -> None:
    """make builds it (pip install runs the C compiler); CI must run the compiled path, not only the reference."""
    assert speedups is not None, "bkspark.protocol._speedups was not built: run `make venv` (needs a C compiler)"
    assert all(module._speedups is speedups for module in USERS)


def test_the_switch_turns_it_off_in_a_new_process() -> None:
    """One switch for both compiled modules, the protocol's and the bookie's (bookie_server/_speedups.c)."""
    code = ("from bkspark.protocol import correlation, digest, v2, v2_bulk, framing, speedups; "
            "from bkspark.client import ops, arrow; from bookie_server import journal, v2_handlers, entry_logs; "
            "print(speedups.speedups, *{m._speedups for m in (digest, v2, v2_bulk, framing, ops, arrow, correlation, "
            "journal, v2_handlers, entry_logs)})")
    for value, want in (("1", "None None"), ("0", None)):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, DISABLE_ENV: value},
                             capture_output=True, text=True, check=True).stdout.strip()
        if want is None:
            assert "None" not in out and "_speedups" in out
        else:
            assert out == want


def test_crc32c_matches_the_crc32c_package() -> None:
    rng = random.Random(3)
    for size in [0, 1, 7, 8, 9, 31, 32, 33, 64, 100, 1024, 4099]:
        data = rng.randbytes(size)
        for value in (0, 1, 0xFFFFFFFF, rng.getrandbits(32)):
            assert speedups.crc32c(data, value) == crc32c.crc32c(data, value)
            assert speedups.crc32c_table(data, value) == crc32c.crc32c(data, value)  # CPUs without crc32
    assert speedups.crc32c(b"123456789") == speedups.crc32c_table(b"123456789") == 0xE3069283


def entries(first: int, count: int, rng: random.Random, ledger: int = LEDGER) -> list[bytes]:
    d = Digester(DigestType.CRC32C, b"pw")
    out, length = [], 0
    for entry_id in range(first, first + count):
        payload = rng.randbytes(rng.choice([0, 1, 5, 100, 1024, 3000]))
        length += len(payload)
        out.append(bytes(d.package_entry(ledger, entry_id, entry_id - 1, length, payload)))
    return out


def both_ways(monkeypatch: pytest.MonkeyPatch, call):  # type: ignore[no-untyped-def]
    """call() with the compiled path, then with the reference; each result, or the error's (type, text)."""
    results = []
    for module in (speedups, None):
        for user in USERS:
            monkeypatch.setattr(user, "_speedups", module)
        try:
            got = call()
        except Exception as exc:  # noqa: BLE001 - compared below
            got = (type(exc), str(exc))
        results.append(got)
    return results


def normalised(result):  # type: ignore[no-untyped-def]
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], list):
        payloads, error = result
        return [bytes(p) for p in payloads], None if error is None else (type(error), str(error))
    return result


def corruptions(items: list[bytes], rng: random.Random) -> list[tuple[str, list]]:
    """(what, items) cases: clean, and one item made wrong in each way the check looks at."""
    cases: list[tuple[str, list]] = [("clean", list(items))]
    k = rng.randrange(len(items))
    flipped = bytearray(items[k])
    flipped[-1 if len(flipped) > 36 else 40 % len(flipped)] ^= 0x01
    cases.append(("payload or digest byte flipped", items[:k] + [bytes(flipped)] + items[k + 1 :]))
    crc_flipped = bytearray(items[k])
    crc_flipped[33] ^= 0x80
    cases.append(("digest flipped", items[:k] + [bytes(crc_flipped)] + items[k + 1 :]))
    cases.append(("another ledger's entry", items[:k] + entries(k, 1, rng, ledger=LEDGER + 1) + items[k + 1 :]))
    cases.append(("out of order", items[:k] + items[k + 1 :]))
    cases.append(("too short", items[:k] + [items[k][:20]] + items[k + 1 :]))
    cases.append(("empty item", items[:k] + [b""] + items[k + 1 :]))
    return cases


@pytest.mark.parametrize("detach", [True, False])
@pytest.mark.parametrize("as_views", [True, False])
def test_verify_payloads_same_both_ways(monkeypatch: pytest.MonkeyPatch, detach: bool, as_views: bool) -> None:
    rng = random.Random(7)
    d = Digester(DigestType.CRC32C, b"pw")
    for _ in range(30):
        first = rng.randrange(0, 1 << 40)
        items = entries(first, rng.randint(1, 40), rng)
        for what, case in corruptions(items, rng):
            given = [memoryview(i) for i in case] if as_views else case
            fast, reference = both_ways(monkeypatch, lambda: d.verify_payloads(list(given), LEDGER, first, 0, detach))
            assert normalised(fast) == normalised(reference), what
            if what == "clean":
                assert normalised(fast)[1] is None and len(fast[0]) == len(items)
                assert all(type(p) is (bytes if detach or not as_views else type(given[0])) for p in fast[0])


def test_other_digests_and_scopes_never_take_the_compiled_path(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(9)
    for dtype, scope in ((DigestType.CRC32, 0), (DigestType.HMAC, 0), (DigestType.CRC32C, 7)):
        d = Digester(dtype, b"pw")
        items = [bytes(d.package_entry(LEDGER, i, i - 1, 10 * (i + 1), rng.randbytes(10), scope_id=scope))
                 for i in range(5)]
        fast, reference = both_ways(monkeypatch, lambda: d.verify_payloads(list(items), LEDGER, 0, scope, True))
        assert normalised(fast) == normalised(reference) and normalised(fast)[1] is None


def batch_body(items: list[bytes]) -> bytes:
    frame = v2.encode_batch_read_response(0, LEDGER, 0, 9, items)
    return frame[4:]  # the body after the frame's length prefix


def test_split_batch_items_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    for _ in range(50):
        items = [rng.randbytes(rng.choice([0, 1, 50, 2000])) for _ in range(rng.randint(0, 30))]
        body = batch_body(items)
        fast, reference = both_ways(monkeypatch, lambda: [bytes(i) for i in v2.decode_batch_read_response_entries(body)])
        assert fast == reference == items
        response_fast, response_ref = both_ways(monkeypatch, lambda: v2.decode_response(body))
        assert [bytes(i) for i in response_fast.entries] == [bytes(i) for i in response_ref.entries] == items


@pytest.mark.parametrize("cut", ["truncated length", "item past the end", "negative length"])
def test_malformed_batch_bodies_raise_the_reference_error(monkeypatch: pytest.MonkeyPatch, cut: str) -> None:
    body = bytearray(batch_body([b"x" * 10, b"y" * 20]))
    if cut == "truncated length":
        body += b"\x00\x00"
    elif cut == "item past the end":
        body = body[:-5]
    else:
        body[32:36] = (-3).to_bytes(4, "big", signed=True)
    fast, reference = both_ways(monkeypatch, lambda: v2.decode_batch_read_response_entries(bytes(body)))
    assert fast == reference and fast[0] is MalformedFrameError


def test_a_mismatch_is_reported_with_the_verified_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(1)
    d = Digester(DigestType.CRC32C, b"")
    items = entries(100, 10, rng)
    bad = bytearray(items[6])
    bad[-1] ^= 0xFF
    items[6] = bytes(bad) if len(bad) > 36 else items[6][:30]
    monkeypatch.setattr(digest_module, "_speedups", speedups)
    payloads, error = d.verify_payloads(items, LEDGER, 100, 0, True)
    assert len(payloads) == 6 and isinstance(error, DigestMismatchError)


# -- the packed check: verify and gather in one pass -----------------------------------------------------------


def test_the_packed_check_takes_what_the_reference_takes() -> None:
    """verify_payloads_packed (one pass over a received answer, no object per entry) takes a prefix of what
    verify_payloads takes, byte for byte: all of a clean answer up to the limit; where it stops, the reference
    checks that entry and names the error."""
    rng = random.Random(13)
    d = Digester(DigestType.CRC32C, b"pw")
    start = v2.BATCH_RESPONSE_HEADER_SIZE
    for _ in range(30):
        first = rng.randrange(0, 1 << 40)
        items = entries(first, rng.randint(1, 40), rng)
        for what, case in corruptions(items, rng):
            body = batch_body(case)
            for limit in (len(case), rng.randint(0, len(case)), len(case) + 5):
                got = d.verify_payloads_packed(memoryview(body), start, limit, LEDGER, first)
                assert got is not None
                data, bounds, max_size, count, next_offset = got
                payloads = [data[bounds[i] : bounds[i + 1]] for i in range(count)]
                reference, _error = d.verify_payloads(case[:limit], LEDGER, first)
                assert len(bounds) == count + 1 and bounds[0] == 0 and len(data) == bounds[count], what
                assert payloads == reference[:count] and count <= len(reference), what
                assert max_size == max(map(len, payloads), default=0), what
                assert next_offset == start + sum(4 + len(item) for item in case[:count]), what
                if what == "clean":
                    assert count == min(limit, len(case))


def test_the_packed_check_stops_at_items_that_do_not_fit() -> None:
    rng = random.Random(17)
    d = Digester(DigestType.CRC32C, b"pw")
    items = entries(5, 6, rng)
    body = bytearray(batch_body(items))
    whole = d.verify_payloads_packed(bytes(body), v2.BATCH_RESPONSE_HEADER_SIZE, 10, LEDGER, 5)
    assert whole is not None and whole[3] == 6
    cut = bytes(body[:-3])  # the last item runs past the end
    got = d.verify_payloads_packed(cut, v2.BATCH_RESPONSE_HEADER_SIZE, 10, LEDGER, 5)
    assert got is not None and got[3] == 5 and got[4] == len(cut) - (4 + len(items[5]) - 3)
    for offset in (-1, len(body) + 1, len(body)):  # nothing to take: the caller's check reports it
        got = d.verify_payloads_packed(bytes(body), offset, 10, LEDGER, 5)
        assert got is not None and got[3] == 0 and got[0] == b"" and list(got[1]) == [0]


def test_the_packed_check_is_for_crc32c_scope_0_on_the_compiled_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(19)
    body = batch_body(entries(0, 3, rng))
    for dtype, scope in ((DigestType.CRC32, 0), (DigestType.HMAC, 0), (DigestType.CRC32C, 7)):
        assert Digester(dtype, b"pw").verify_payloads_packed(body, 32, 3, LEDGER, 0, scope) is None
    monkeypatch.setattr(digest_module, "_speedups", None)
    assert Digester(DigestType.CRC32C, b"pw").verify_payloads_packed(body, 32, 3, LEDGER, 0) is None


def test_a_received_batch_is_counted_and_cut_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoder checks the items fit and counts them (no view per item); indexing, slicing, iterating and
    comparing give the reference split's views."""
    rng = random.Random(23)
    items = [rng.randbytes(rng.choice([0, 1, 50, 2000])) for _ in range(12)]
    body = batch_body(items)
    assert speedups.count_batch_items(body, v2.BATCH_RESPONSE_HEADER_SIZE) == 12
    for broken in (body[:-1], body + b"\x00\x00"):
        assert speedups.count_batch_items(broken, v2.BATCH_RESPONSE_HEADER_SIZE) is None
    response = v2.decode_response(body)
    received = response.entries
    assert type(received) is v2.BatchItems and received._items is None and len(received) == 12
    assert bytes(received[3]) == items[3] and [bytes(i) for i in received[2:5]] == items[2:5]
    assert [bytes(i) for i in received] == items and received == items and received._items is not None
    assert response == v2.BatchReadResponse(0, LEDGER, 0, 9, items)
    monkeypatch.setattr(v2, "_speedups", None)
    assert type(v2.decode_response(body).entries) is list  # the reference: split at once


# -- the Arrow gather ------------------------------------------------------------------------------------------


def test_binary_arrays_are_equal_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    pa = pytest.importorskip("pyarrow")
    rng = random.Random(11)
    for _ in range(40):
        payloads = [rng.randbytes(rng.choice([0, 1, 7, 100, 1024, 5000])) for _ in range(rng.randint(0, 60))]
        kinds = (bytes, memoryview, bytearray, lambda b: memoryview(b"--" + b + b"--")[2 : 2 + len(b)])
        given = [rng.choice(kinds)(p) for p in payloads]
        fast, reference = both_ways(monkeypatch, lambda: arrow_module.binary_array(list(given)))
        assert fast.equals(reference) and fast.to_pylist() == payloads
        assert fast.type == pa.binary() and fast.offset == 0 and fast.null_count == 0


def test_a_non_contiguous_view_fails_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyarrow")
    fast, reference = both_ways(monkeypatch, lambda: arrow_module.binary_array([b"ab", memoryview(b"abcdef")[::2]]))
    assert fast == reference and fast[0] in (TypeError, BufferError)


def test_over_2_gib_of_payloads_is_refused_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """int32 offsets address 2 GiB - 1 bytes: the compiled pass stops before allocating, the reference raises."""
    pytest.importorskip("pyarrow")
    half = memoryview(bytes(1 << 30))  # zero pages from calloc: nothing is touched
    if speedups is not None:  # BKSPARK_NO_EXTENSIONS=1: both runs below take the reference
        assert speedups.gather_binary([half, half]) is None
    fast, reference = both_ways(monkeypatch, lambda: arrow_module.binary_array([half, half]))
    assert fast == reference and fast[0] is InvalidOptionError


# -- the bulk append's frames -----------------------------------------------------------------------------------


def add_frames(**overrides):  # type: ignore[no-untyped-def]
    args = dict(digester=Digester(DigestType.CRC32C, b"pw"), master_key=master_key(b"pw"), flags=0, ledger_id=LEDGER,
                first_entry_id=0, lac=-1, length=0, payloads=[b"x"])
    args.update(overrides)
    return [bytes(f) for f in BookieOps.encode_v2_adds(**args)]


def test_bulk_append_frames_are_equal_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(13)
    for _ in range(40):
        payloads = [rng.randbytes(rng.choice([0, 1, 7, 100, 1024, 5000])) for _ in range(rng.randint(0, 40))]
        case = dict(
            ledger_id=rng.choice([0, 1, LEDGER, (1 << 63) - 1]), first_entry_id=rng.choice([0, 5, 1 << 40]),
            lac=rng.choice([-1, 0, 4, 1 << 39]), length=rng.choice([0, 100, 1 << 45]),
            flags=rng.choice([0, v2.FLAG_RECOVERY_ADD, v2.FLAG_HIGH_PRIORITY]), payloads=payloads,
        )
        fast, reference = both_ways(monkeypatch, lambda: add_frames(**case))
        assert fast == reference and len(fast) == len(payloads)
        for frame in fast:  # each decodes as the ADDENTRY a Java bookie would read
            request = v2.decode_request(frame[4:])
            assert isinstance(request, v2.AddRequest) and request.flags == case["flags"]


@pytest.mark.parametrize(
    "what, case",
    [
        ("negative ledger id", dict(ledger_id=-1)),
        ("master key of 19 bytes", dict(master_key=b"k" * 19)),
        ("entry id past int64", dict(first_entry_id=(1 << 63) - 1, payloads=[b"a", b"b"])),
        ("length past int64", dict(length=(1 << 63) - 2, payloads=[b"abc"])),
        ("a payload that is not bytes", dict(payloads=[b"a", bytearray(b"b")])),
        ("flags over 16 bits", dict(flags=1 << 16)),
    ],
)
def test_bulk_append_frames_hand_back_what_the_reference_checks(
    monkeypatch: pytest.MonkeyPatch, what: str, case: dict
) -> None:
    fast, reference = both_ways(monkeypatch, lambda: add_frames(**case))
    assert fast == reference, what


def packed_payloads(payloads: list[bytes], lead: bytes = b"") -> PackedPayloads:
    """The payloads end to end after ``lead`` (bounds that do not start at 0, as a slice's)."""
    bounds = array("q", [len(lead)])
    for p in payloads:
        bounds.append(bounds[-1] + len(p))
    return PackedPayloads(lead + b"".join(payloads), bounds)


def test_packed_bulk_append_frames_are_equal_both_ways_and_to_the_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames straight from one buffer are the frames of the same payloads as a list of bytes, both ways; a
    slice of the run (sharing its buffer) frames its own payloads."""
    rng = random.Random(19)
    for _ in range(40):
        payloads = [rng.randbytes(rng.choice([0, 1, 7, 100, 1024, 5000])) for _ in range(rng.randint(0, 40))]
        run = packed_payloads(payloads, lead=rng.randbytes(rng.choice([0, 3])))
        case = dict(ledger_id=rng.choice([0, LEDGER, (1 << 63) - 1]), first_entry_id=rng.choice([0, 1 << 40]),
                    lac=rng.choice([-1, 4]), length=rng.choice([0, 1 << 45]), flags=rng.choice([0, v2.FLAG_RECOVERY_ADD]))
        fast, reference = both_ways(monkeypatch, lambda: add_frames(payloads=run, **case))
        listed = add_frames(payloads=payloads, **case)
        assert fast == reference == listed and len(fast) == len(payloads)
        lo, hi = sorted(rng.sample(range(len(payloads) + 1), 2)) if len(payloads) > 1 else (0, len(payloads))
        fast, reference = both_ways(monkeypatch, lambda: add_frames(payloads=run[lo:hi], **case))
        assert fast == reference == add_frames(payloads=payloads[lo:hi], **case)


@pytest.mark.parametrize(
    "what, case",
    [
        ("negative ledger id", dict(ledger_id=-1)),
        ("master key of 19 bytes", dict(master_key=b"k" * 19)),
        ("entry id past int64", dict(first_entry_id=(1 << 63) - 1, payloads=packed_payloads([b"a", b"b"]))),
        ("length past int64", dict(length=(1 << 63) - 2, payloads=packed_payloads([b"abc"]))),
        ("flags over 16 bits", dict(flags=1 << 16)),
    ],
)
def test_packed_bulk_append_frames_hand_back_what_the_reference_checks(
    monkeypatch: pytest.MonkeyPatch, what: str, case: dict
) -> None:
    case.setdefault("payloads", packed_payloads([b"x", b"yz"]))
    fast, reference = both_ways(monkeypatch, lambda: add_frames(**case))
    assert fast == reference, what


def test_packed_frames_refuse_bounds_outside_the_data() -> None:
    """The compiled call checks every bound before reading (PackedPayloads checks them too, in Python): bounds
    out of order, negative, past the data, or not whole int64 values hand the payloads back (None)."""
    if speedups is None:
        pytest.skip("the compiled module is off (BKSPARK_NO_EXTENSIONS=1): nothing compiled to check")
    call = lambda data, bounds: speedups.v2_add_frames_packed(  # noqa: E731
        v2.add_request_header(0), master_key(b"pw"), LEDGER, 0, -1, 0, data, bounds
    )
    assert len(call(b"abc", array("q", [0, 1, 3]))) == 2
    assert call(b"abc", array("q", [0])) == []
    for bounds in (array("q", [0, 2, 1]), array("q", [-1, 2]), array("q", [0, 4]), array("q"), b"\0" * 12):
        assert call(b"abc", bounds) is None, bounds


def test_other_digests_package_through_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    for dtype in (DigestType.CRC32, DigestType.HMAC, DigestType.DUMMY):
        d = Digester(dtype, b"pw")
        fast, reference = both_ways(monkeypatch, lambda: add_frames(digester=d, payloads=[b"a", b"bc"]))
        assert fast == reference
        entry = fast[1][4 + v2.ADD_REQUEST_OVERHEAD - 4 :]
        assert d.verify_entry(entry, LEDGER, 1).payload == b"bc"


# -- the frame splitter -----------------------------------------------------------------------------------------


def split_stream(stream: bytes, cuts: list[int], limit: int) -> list:
    """Feed ``stream`` in pieces ending at ``cuts``; every body, then the error that stopped it (if any)."""
    splitter = FrameSplitter(limit)
    out: list = []
    start = 0
    for end in [*cuts, len(stream)]:
        try:
            out.extend(bytes(b) for b in splitter.feed(stream[start:end]))
        except FrameTooLargeError as exc:
            out.append((type(exc), str(exc)))
            break
        start = end
    out.append(splitter.buffered)
    return out


def test_frame_splitting_is_equal_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(17)
    for _ in range(60):
        bodies = [rng.randbytes(rng.choice([0, 1, 3, 24, 100, 3000])) for _ in range(rng.randint(0, 30))]
        limit = rng.choice([4, 30, 200, 5 << 20])
        stream = b"".join(len(b).to_bytes(4, "big") + b for b in bodies) + rng.randbytes(rng.randint(0, 6))
        cuts = sorted(rng.sample(range(len(stream) + 1), rng.randint(0, min(8, len(stream)))))
        fast, reference = both_ways(monkeypatch, lambda: split_stream(stream, cuts, limit))
        assert fast == reference
        if limit == 5 << 20 and not any(isinstance(x, tuple) for x in fast):
            assert fast[: len(bodies)] == bodies


def test_a_length_over_the_limit_raises_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """Including an unsigned length past 2**31 (Netty reads the prefix unsigned)."""
    for prefix in ((100).to_bytes(4, "big"), b"\xff\xff\xff\xf0"):
        stream = (3).to_bytes(4, "big") + b"abc" + prefix + b"z" * 100
        fast, reference = both_ways(monkeypatch, lambda: split_stream(stream, [], 64))
        assert fast == reference and fast[-2][0] is FrameTooLargeError


# -- a bookie's received adds -----------------------------------------------------------------------------------


def test_received_adds_are_decoded_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ADDENTRY body becomes what decode_request makes of it (every header form: legacy version 0, flags,
    the shortest add, bytes and views); every other body, malformed ones too, is left for decode_request."""
    rng = random.Random(23)
    key = master_key(b"pw")
    bodies: list[object] = []
    for i in range(300):
        entry = rng.randbytes(rng.choice([16, 17, 100, 1100]))
        flags = rng.choice([0, v2.FLAG_RECOVERY_ADD, v2.FLAG_HIGH_PRIORITY | v2.FLAG_RECOVERY_ADD])
        body = v2.encode_add_request(flags, key, entry, version=rng.choice([0, 2, 3, -1]))[4:]
        bodies.append(memoryview(body) if i % 3 else body)
    bodies += [
        v2.encode_read_request(LEDGER, 5)[4:],  # another request
        v2.encode_add_request(0, key, b"e" * 16)[4:-1],  # an add one byte short: decode_request's error
        b"\x00\x00",  # too short for a header
        memoryview(b"x" * 80)[::2],  # not contiguous
    ]
    rng.shuffle(bodies)
    fast, reference = both_ways(monkeypatch, lambda: v2_bulk.decode_add_requests(list(bodies)))
    assert fast == reference
    for body, decoded in zip(bodies, fast):
        if type(decoded) is v2.AddRequest:
            assert decoded == v2.decode_request(body) and type(decoded.entry) is memoryview
        else:
            assert decoded is body
    assert sum(type(d) is v2.AddRequest for d in fast) == 300


def test_received_plain_reads_are_decoded_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each READENTRY body that does not ask for fencing becomes the ``(ledger id, entry id, version)``
    decode_request reads from it (every header form: legacy version 0, which drops the flags, other flags, bad
    versions, ids at both ends of int64, longer bodies); fencing reads, adds already decoded, other requests,
    short, non-bytes and garbage bodies are left for decode_request."""
    rng = random.Random(27)
    key = master_key(b"pw")
    items: list[object] = []
    for _ in range(400):
        ledger = rng.choice([0, LEDGER, 2**63 - 1, -(2**63), -1])
        entry = rng.choice([0, -1, 5, 2**40, 2**63 - 1, -(2**63)])
        version = rng.choice([0, 1, 2, 2, 2, 3, 127, -1, -128])
        flags = rng.choice([0, 0, v2.FLAG_HIGH_PRIORITY, v2.FLAG_DO_FENCING, v2.FLAG_DO_FENCING | 0x8000])
        fence_key = key if flags & v2.FLAG_DO_FENCING and rng.random() < 0.7 else None
        body = v2.encode_read_request(ledger, entry, flags, fence_key, version=version)[4:]
        items.append(body + b"tail" if rng.random() < 0.1 else body)
    plain = v2.encode_read_request(LEDGER, 5)[4:]
    items += [
        v2_bulk.decode_add_requests([v2.encode_add_request(0, key, b"e" * 16)[4:]])[0],  # an add, decoded
        v2.encode_batch_read_request(LEDGER, 0, 1, 10, 1000)[4:],  # another request
        plain[:-1],  # one byte short: decode_request's error
        memoryview(plain),  # not bytes: left for decode_request
        bytearray(plain),
        b"\x00\x00",
        b"",
    ]
    rng.shuffle(items)
    fast, reference = both_ways(monkeypatch, lambda: v2_bulk.decode_plain_reads(list(items)))
    assert fast == reference
    decoded = 0
    for item, got in zip(items, fast):
        if type(got) is tuple and type(item) is bytes:
            request = v2.decode_request(item)
            assert type(request) is v2.ReadRequest and not request.flags & v2.FLAG_DO_FENCING
            assert got == (request.ledger_id, request.entry_id, request.version)
            decoded += 1
        else:
            assert got is item
            if type(item) is bytes and len(item) >= 20:
                try:
                    request = v2.decode_request(item)
                except MalformedFrameError:
                    continue  # a fencing read without its key
                assert type(request) is not v2.ReadRequest or request.flags & v2.FLAG_DO_FENCING
    assert 150 < decoded < 400


def test_read_responses_of_a_run_are_the_single_responses_joined() -> None:
    """encode_read_responses (a run's answers) is encode_read_response of each, joined; an id past int64 raises
    its error."""
    rng = random.Random(28)
    ids = [(rng.choice([0, LEDGER, 2**63 - 1, -1]), rng.choice([0, 7, 2**63 - 1]), rng.choice([0, 1, 2, 3]))
           for _ in range(200)]
    entries = [rng.randbytes(rng.choice([0, 1, 100, 5000])) for _ in ids]
    want = b"".join(v2.encode_read_response(v2.EOK, ledger, entry, data, version)
                    for (ledger, entry, version), data in zip(ids, entries))
    assert v2_bulk.encode_read_responses(ids, entries) == want
    assert v2_bulk.encode_read_responses([], []) == b""
    with pytest.raises(LocalProtocolError):
        v2_bulk.encode_read_responses([(2**63, 0, 2)], [b"x"])


# -- a client's received acknowledgements -------------------------------------------------------------------------


def test_received_answers_are_keyed_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each successful ADDENTRY response (a bytes body, as the splitter hands small ones over) becomes its table key,
    each successful READENTRY response (bytes, or a flat memoryview as the splitter hands large ones over) its key
    and a view of its stored entry; failed ones, other responses, short, long-ledger-id, strided, other-format and
    garbage bodies are left as they are."""
    rng = random.Random(29)
    bodies: list[object] = []
    for _ in range(300):
        rc = rng.choice([v2.EOK, v2.EOK, v2.EOK, v2.EFENCED, v2.ENOLEDGER, v2.ENOENTRY])
        ledger = rng.choice([LEDGER, 2**63 - 1, 0, -5, -(2**63)])
        entry = rng.choice([0, 1, -1, 2**40, 2**63 - 1])
        if rng.random() < 0.5:
            bodies.append(v2.encode_response(v2.AddResponse(rc, ledger, max(entry, 0)))[4:])
        else:
            stored = rng.randbytes(rng.choice([0, 1, 40, 41, 300]))
            body = v2.encode_response(v2.ReadResponse(rc, ledger, entry, stored if rc == v2.EOK else b""))[4:]
            # large bodies come from the splitter as views of the chunk they arrived in
            bodies.append(memoryview(b"\0" * 7 + body)[7:] if rng.random() < 0.5 else body)
    ok_add = v2.encode_response(v2.AddResponse(v2.EOK, LEDGER, 3))[4:]
    ok_read = v2.encode_response(v2.ReadResponse(v2.EOK, LEDGER, 5, b"x" * 50))[4:]
    bodies += [
        v2.encode_response(v2.BatchReadResponse(v2.EOK, LEDGER, 5, 9, [b"x"]))[4:],  # another response
        ok_add[:-1],  # one byte short: decode_response's error
        ok_read[:23],
        ok_add + b"tail",  # longer: still an acknowledgement, as decode_response reads it
        memoryview(ok_add),  # not bytes: left for decode_response
        memoryview(ok_read + ok_read)[::2],  # not contiguous
        memoryview(ok_read).cast("b"),  # signed bytes
        bytearray(ok_read),
        b"\x00\x00",
    ]
    rng.shuffle(bodies)
    fast, reference = both_ways(monkeypatch, lambda: correlation_module.v2_ok_answers(list(bodies)))
    assert fast == reference
    assert [type(x) for x in fast] == [type(x) for x in reference]
    kinds = collections.Counter()
    for body, keyed in zip(bodies, fast):
        if type(keyed) in (tuple, int):
            response = v2.decode_response(body)  # type: ignore[arg-type]
            assert response.rc == v2.EOK
            if type(keyed) is tuple:
                key, stored = keyed
                assert type(stored) is memoryview and key == correlation_module.v2_response_key(response)
                assert correlation_module.v2_read_response(key, stored) == response
                kinds["read"] += 1
            else:
                assert keyed == correlation_module.v2_response_key(response)
                assert correlation_module.v2_add_response(keyed) == response
                kinds["add"] += 1
        else:
            assert keyed is body
    assert kinds["read"] > 50 and kinds["add"] > 50


def test_a_group_of_add_responses_is_encoded_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bookie's answer to a group of adds: the frames encode_add_response makes, joined, for every return code,
    id and version it takes; what it refuses (an id past int64, a version past a byte) is the same error."""
    rng = random.Random(31)
    for _round in range(50):
        rc = rng.choice([v2.EOK, v2.EIO, v2.EFENCED, -1, 2**31 - 1])
        ids = [(rng.choice([0, LEDGER, 2**63 - 1, -5]), rng.choice([-1, 0, 7, 2**40, 2**63 - 1]),
                rng.choice([0, 1, 2, 3, 127, 128, 255, -1, -128])) for _ in range(rng.randrange(0, 40))]
        fast, reference = both_ways(monkeypatch, lambda: v2_bulk.encode_add_responses(rc, ids))
        assert fast == reference == b"".join(v2.encode_add_response(rc, *i) for i in ids)
    for bad in ([(2**63, 0, 2)], [(1, 0, 256)], [(1, 2, 3, 4)]):
        fast, reference = both_ways(monkeypatch, lambda: v2_bulk.encode_add_responses(v2.EOK, bad))
        assert fast == reference and isinstance(fast, tuple) and issubclass(fast[0], Exception), bad
    fast, reference = both_ways(monkeypatch, lambda: v2_bulk.encode_add_responses(v2.EOK, [[1, 2, 3]]))  # not a tuple
    assert fast == reference == v2.encode_add_response(v2.EOK, 1, 2, 3)
    if speedups is not None:  # handed to the reference
        assert speedups.v2_add_responses(v2.EOK, [(2**63, 0, 2)], v2.ADD_ENTRY) is None
        assert speedups.v2_add_responses(2**31, [], v2.ADD_ENTRY) is None


def test_batch_read_responses_are_encoded_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bookie's batch-read answer: the same frame both ways for random entries, return codes, ids and versions,
    decoded back to the entries; what the reference refuses (an id past int64, rc past int32, a version past a
    byte) is the same error, and entries that are not a list of bytes (views, a tuple) take the reference."""
    rng = random.Random(37)
    for _round in range(60):
        entries = [rng.randbytes(rng.choice([0, 1, 33, 1024, rng.randrange(5000)])) for _ in range(rng.randrange(0, 30))]
        rc = rng.choice([v2.EOK, v2.ENOENTRY, -1, 2**31 - 1])
        ids = (rng.choice([0, LEDGER, 2**63 - 1, -2]), rng.choice([-1, 0, 2**40]), rng.choice([0, 2**63 - 1, -7]))
        version = rng.choice([0, 2, 3, 127, 128, 255, -1])
        fast, reference = both_ways(monkeypatch, lambda: v2.encode_batch_read_response(rc, *ids, entries, version))
        assert fast == reference
        assert fast == v2.encode_batch_read_response_reference(rc, *ids, entries, version)
        if rc == v2.EOK and version in (2, 3):
            response = v2.decode_response(fast[4:])
            assert list(map(bytes, response.entries)) == entries and response.request_id == ids[2]
    for bad in ((2**63, 0, 0), (0, 0, -(2**63) - 1)):
        fast, reference = both_ways(monkeypatch, lambda: v2.encode_batch_read_response(v2.EOK, *bad, [b"e"]))
        assert fast == reference and isinstance(fast, tuple) and fast[0] is LocalProtocolError
    fast, reference = both_ways(monkeypatch, lambda: v2.encode_batch_read_response(2**31, 1, 0, 0, [b"e"]))
    assert fast == reference and isinstance(fast, tuple) and fast[0] is LocalProtocolError
    for entries in ([memoryview(b"view"), b"b"], (b"a", b"b"), [bytearray(b"ba")]):
        fast, reference = both_ways(monkeypatch, lambda: v2.encode_batch_read_response(v2.EOK, 1, 0, 0, entries))
        assert fast == reference == v2.encode_batch_read_response_reference(v2.EOK, 1, 0, 0, list(entries))
    if speedups is not None:
        assert speedups.v2_batch_read_frame(0, v2.EOK, 1, 0, 0, [memoryview(b"v")]) is None  # handed back


def test_a_connection_answers_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk of acknowledgements, failures and reads through BookieConnection: the same callbacks in the same order."""
    import asyncio

    from bkspark.client.connection import V2, BookieConnection
    from bkspark.protocol.correlation import add_key, read_key

    class Sink(asyncio.Transport):
        def write(self, data: object) -> None:
            pass

        def writelines(self, lines: object) -> None:
            pass

        def abort(self) -> None:
            pass

    def run() -> list[tuple[object, ...]]:
        async def main() -> list[tuple[object, ...]]:
            conn = BookieConnection("b:1", V2, max_frame_size=1 << 20, sweep_interval=60)
            conn.connection_made(Sink())
            got: list[tuple[object, ...]] = []
            conn.send_v2_many([add_key(1, e) for e in range(6)], [b"f"] * 6, list(range(6)), 5.0,
                              lambda r, e, a: got.append(("one", a, r, type(e).__name__)),
                              lambda args: got.append(("many", tuple(args))))
            conn.send_v2(add_key(2, 0), b"f", 5.0, lambda r, e, a: got.append(("single", a, r, e)), "s")
            conn.send_v2(read_key(1, 9), b"f", 5.0, lambda r, e, a: got.append(("read", a, bytes(r.entry), e)), "r")
            conn.data_received(b"".join(v2.encode_response(r) for r in (
                v2.AddResponse(v2.EOK, 1, 4), v2.AddResponse(v2.EOK, 1, 0), v2.AddResponse(v2.EOK, 2, 0),
                v2.AddResponse(v2.EOK, 1, 1), v2.ReadResponse(v2.EOK, 1, 9, b"nine"),
                v2.AddResponse(v2.EFENCED, 1, 2), v2.AddResponse(v2.EOK, 1, 3), v2.AddResponse(v2.EOK, 1, 5),
            )))
            return got

        return asyncio.run(main())

    fast, reference = both_ways(monkeypatch, run)
    assert fast == reference
    assert fast == [
        ("many", (4, 0)), ("single", "s", v2.AddResponse(v2.EOK, 2, 0), None), ("many", (1,)),
        ("read", "r", b"nine", None), ("one", 2, v2.AddResponse(v2.EFENCED, 1, 2), "LedgerFencedError"),
        ("many", (3, 5)),
    ]
