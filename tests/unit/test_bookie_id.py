"""BookieId validation: the verdicts are those of Java 4.17.3's ``BookieId.parse`` on the same strings."""

from __future__ import annotations

import pytest

from bkspark.errors import InvalidBookieIdError
from bkspark.protocol.bookie_id import BookieId, java_parse_int, java_split, validate_bookie_id

# Checked against org.apache.bookkeeper.net.BookieId.parse (4.17.3): OK.
JAVA_ACCEPTS = ["10.0.0.1:3181", "a", "b_x", "a;b<c=d>e?f@g[h\\i]j^k_l", "x.y-z", "bookie-1.rack-2", "readonly2"]
# ... and IllegalArgumentException.
JAVA_REJECTS = ["readonly", "ReadOnly", "a/b", "a b", "\u00e9", "a,b", "a+b", "a`", "a|b", "a~", ""]


@pytest.mark.parametrize("text", JAVA_ACCEPTS)
def test_accepts_what_java_accepts(text: str) -> None:
    assert str(BookieId.parse(text)) == text
    assert validate_bookie_id(text) == text


@pytest.mark.parametrize("text", JAVA_REJECTS)
def test_rejects_what_java_rejects(text: str) -> None:
    with pytest.raises(InvalidBookieIdError, match="is not valid"):
        BookieId.parse(text)


def test_error_names_the_bad_characters_and_the_reserved_name() -> None:
    with pytest.raises(InvalidBookieIdError, match=r"'/'"):
        BookieId.parse("host/x:1")
    with pytest.raises(InvalidBookieIdError, match="reserved"):
        BookieId.parse("READONLY")
    with pytest.raises(InvalidBookieIdError, match="string"):
        validate_bookie_id(3181)


def test_no_length_limit() -> None:
    assert BookieId.parse("a" * 10_000).id == "a" * 10_000


def test_equality_is_string_equality() -> None:
    assert BookieId.parse("h:1") == BookieId("h:1") and BookieId("h:1") != BookieId("H:1")
    assert len({BookieId("h:1"), BookieId("h:1")}) == 1


@pytest.mark.parametrize(
    "text, expected",
    [
        ("10.0.0.1:3181", ("10.0.0.1", 3181)),
        ("host:0", ("host", 0)),  # the placement policies' dummy local-node ids
        ("a:1:b", ("a", 1)),  # BookieSocketAddress ignores later parts
        ("a:1:", ("a", 1)),
    ],
)
def test_legacy_host_port(text: str, expected: tuple[str, int]) -> None:
    bid = BookieId.parse(text)
    assert bid.is_legacy_address and bid.host_port() == expected


@pytest.mark.parametrize("text", ["bookie-1", "host:", "host:port", "host:99999999999", ":"])
def test_not_an_address(text: str) -> None:
    bid = BookieId.parse(text)
    assert not bid.is_legacy_address
    with pytest.raises(InvalidBookieIdError, match="not a host:port"):
        bid.host_port()


def test_java_string_helpers() -> None:
    assert java_split("a:b::", ":") == ["a", "b"]
    assert java_split("", ":") == [""] and java_split("::", ":") == []
    assert java_split(":a", ":") == ["", "a"]
    assert java_parse_int("-12") == -12 and java_parse_int(" 1") is None and java_parse_int("1_0") is None
    assert java_parse_int("2147483648") is None and java_parse_int("2147483648", 0, 2**63 - 1) == 2**31


def test_accepted_ids_are_remembered_within_a_bound_and_refused_ones_never(monkeypatch) -> None:
    from bkspark.protocol import bookie_id as module

    monkeypatch.setattr(module, "_ACCEPTED", set())
    monkeypatch.setattr(module, "_ACCEPTED_MAX", 2)
    for text in ("b1:3181", "b2:3181", "b3:3181", "b1:3181"):
        assert validate_bookie_id(text) == text
    assert module._ACCEPTED == {"b1:3181", "b2:3181"}
    for bad in ("readonly", "bad id", ""):
        with pytest.raises(InvalidBookieIdError):
            validate_bookie_id(bad)
        with pytest.raises(InvalidBookieIdError):
            validate_bookie_id(bad)  # the second time too
    assert module._ACCEPTED == {"b1:3181", "b2:3181"}

    class Text(str):
        pass

    assert validate_bookie_id(Text("b4:3181")) == "b4:3181" and "b4:3181" not in module._ACCEPTED
