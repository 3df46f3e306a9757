"""BP-35 qualified names and UUID-derived ids (docs/scoped-ledger-paths.md)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkspark.errors import InvalidOptionError
from bkspark.protocol.ledger_name import ids_from_uuid, parse_qualified_name, qualified_name


def test_format() -> None:
    assert qualified_name(0, 5) == "00000000000000000000000000000005"
    assert qualified_name(1, 2**63 - 1) == "00000000000000017fffffffffffffff"
    assert qualified_name(-1, 0) == "ffffffffffffffff0000000000000000"
    assert qualified_name(-(2**63), 255) == "800000000000000000000000000000ff"


@pytest.mark.parametrize(
    "text",
    [
        "00000000000000070000000000000005",
        "0x00000000000000070000000000000005",
        "0X00000000000000070000000000000005",
        "00000000-0000-0007-0000-000000000005",
        "0x00000000-0000-0007-0000-000000000005",
        "00000000000000070000000000000005".upper(),
    ],
)
def test_parse_forms(text: str) -> None:
    assert parse_qualified_name(text) == (7, 5)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0x",
        "7",
        "0000000000000007000000000000005",  # 31 digits
        "000000000000000700000000000000050",  # 33 digits
        "00000000-0000-0007-0000-00000000000-5",
        "0000000000000007-0000000000000005",
        " 00000000000000070000000000000005",
        "0000000000000007000000000000000g",
        "00000000000000078000000000000005",  # ledger half >= 2^63
        "\u0660" * 32,
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(InvalidOptionError) as info:
        parse_qualified_name(text)
    assert repr(text) in str(info.value)


def test_bad_ids() -> None:
    for scope, ledger in ((0, -1), (0, 2**63), (2**63, 0), (-(2**63) - 1, 0)):
        with pytest.raises(InvalidOptionError):
            qualified_name(scope, ledger)


@given(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**63 - 1))
def test_round_trip(scope_id: int, ledger_id: int) -> None:
    name = qualified_name(scope_id, ledger_id)
    assert len(name) == 32 and name == name.lower()
    assert parse_qualified_name(name) == (scope_id, ledger_id)
    dashed = str(uuid.UUID(hex=name))
    assert parse_qualified_name(dashed) == (scope_id, ledger_id)


def test_ids_from_uuid() -> None:
    u = uuid.UUID("12345678-9abc-4def-8123-456789abcdef")
    scope, ledger = ids_from_uuid(u)
    assert scope == 0x123456789ABC4DEF and ledger == 0x0123456789ABCDEF
    assert qualified_name(scope, ledger) == "123456789abc4def0123456789abcdef"
    negative = uuid.UUID("f2345678-9abc-4def-b123-456789abcdef")
    assert ids_from_uuid(negative) == (0xF2345678_9ABC4DEF - 2**64, 0x3123456789ABCDEF)
    with pytest.raises(InvalidOptionError, match="scope 0"):
        ids_from_uuid(uuid.UUID(int=5))
    with pytest.raises(InvalidOptionError):
        ids_from_uuid("12345678-9abc-4def-8123-456789abcdef")  # type: ignore[arg-type]


@given(st.uuids(version=4))
def test_v4_uuids_lose_nothing(u: uuid.UUID) -> None:
    scope, ledger = ids_from_uuid(u)
    assert scope != 0 and 0 <= ledger < 2**63
    # Only the constant variant bit was dropped: setting it back restores the UUID.
    restored = ((scope % 2**64) << 64) | ledger | (1 << 63)
    assert restored == u.int
