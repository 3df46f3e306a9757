"""Cookies: text equal to Java 4.17.3's Cookie.toString, parse and verify semantics of Cookie.java."""

from __future__ import annotations

import pytest

from bkspark.errors import BadMetadataError, CookieMismatchError
from bkspark.protocol.cookie import Cookie, decode_dir_paths, encode_dir_paths

# Cookie.newBuilder().setBookieId("bk-1").setJournalDirs("/j1,/j2")
#   .setLedgerDirs(encodeDirPaths({"/l1", "/l\u00e9"})).setInstanceId("6f1c")
#   .setIndexDirs(encodeDirPaths({"/i"})).build().toString()   (4.17.3)
JAVA_COOKIE = bytes.fromhex(
    "350a626f6f6b6965486f73743a2022626b2d31220a6a6f75726e616c4469723a20222f6a312c2f6a32220a6c6564676572"
    "446972733a2022325c742f6c315c742f6c5c3330335c323531220a696e7374616e636549643a202236663163220a696e64"
    "6578446972733a2022315c742f69220a"
)
COOKIE = Cookie.generate("bk-1", ["/j1", "/j2"], ["/l1", "/l\u00e9"], "6f1c", ["/i"])


def test_serialize_equals_java() -> None:
    assert COOKIE.serialize() == JAVA_COOKIE
    assert Cookie.parse(JAVA_COOKIE) == COOKIE


def test_layout_4_and_empty_optionals() -> None:
    # Java reads an empty instanceId as absent and writes it back without the field.
    data = b'4\nbookieHost: "b"\njournalDir: "/j"\nledgerDirs: "1\\t/l"\ninstanceId: ""\n'
    cookie = Cookie.parse(data)
    assert (cookie.instance_id, cookie.index_dirs, cookie.layout_version) == (None, None, 4)
    assert cookie.serialize() == b'5\nbookieHost: "b"\njournalDir: "/j"\nledgerDirs: "1\\t/l"\n'


def test_layout_3_lines() -> None:
    cookie = Cookie.parse(b"3\nb:1\n/j\n1\t/l\n")
    assert (cookie.bookie_host, cookie.journal_dirs, cookie.ledger_directories, cookie.layout_version) == (
        "b:1",
        "/j",
        ["/l"],
        3,
    )


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "empty"),
        (b"five\n", "cannot parse cookie"),
        (b'5\nbookieHost: "b"\n', "missing required fields"),
        (b'5\nbookieHost: "b"\njournalDir: "/j"\nledgerDirs: "1\\t/l"\nfoo: 1\n', "no field named"),
        (b"3\nb:1\n/j\n", "layout 3 cookie"),
        (b"2\nb:1\n/j\n1\t/l\n", "too old"),
    ],
)
def test_bad_cookies(data: bytes, message: str) -> None:
    with pytest.raises(BadMetadataError, match=message):
        Cookie.parse(data)


def test_dir_encoding() -> None:
    assert encode_dir_paths(["/a", "/b"]) == "2\t/a\t/b"
    assert decode_dir_paths("2\t/a\t/b") == ["/a", "/b"]
    assert decode_dir_paths("/a") == ["/a"]  # no count: Java keeps the whole string
    assert COOKIE.index_directories == ["/i"] and Cookie("b", "/j", "1\t/l").index_directories is None


def test_verify_names_the_differing_field() -> None:
    COOKIE.verify(Cookie.parse(JAVA_COOKIE))
    assert COOKIE.matches(COOKIE)
    cases = {
        "bookieHost": Cookie.generate("bk-2", ["/j1", "/j2"], ["/l1", "/l\u00e9"], "6f1c", ["/i"]),
        "journalDir": Cookie.generate("bk-1", ["/j1"], ["/l1", "/l\u00e9"], "6f1c", ["/i"]),
        "ledgerDirs": Cookie.generate("bk-1", ["/j1", "/j2"], ["/l1"], "6f1c", ["/i"]),
        "indexDirs": Cookie.generate("bk-1", ["/j1", "/j2"], ["/l1", "/l\u00e9"], "6f1c", ["/x"]),
        "instanceId": Cookie.generate("bk-1", ["/j1", "/j2"], ["/l1", "/l\u00e9"], None, ["/i"]),
    }
    for field, other in cases.items():
        with pytest.raises(CookieMismatchError) as info:
            COOKIE.verify(other)
        assert info.value.context["field"] == field
        assert not COOKIE.matches(other)


def test_index_dirs_default_to_ledger_dirs() -> None:
    # A stored cookie without indexDirs matches a config whose index dirs equal its ledger dirs.
    config = Cookie.generate("b", ["/j"], ["/l"], "i", ["/l"])
    config.verify(Cookie.generate("b", ["/j"], ["/l"], "i"))


def test_superset_allows_added_directories() -> None:
    stored = Cookie.generate("b", ["/j"], ["/l1"], "i")
    grown = Cookie.generate("b", ["/j"], ["/l1", "/l2"], "i")
    with pytest.raises(CookieMismatchError):
        grown.verify(stored)
    grown.verify_is_super_set(stored)
    with pytest.raises(CookieMismatchError, match="ledgerDirs"):
        stored.verify_is_super_set(grown)


def test_too_old_layout() -> None:
    old = Cookie("b", "/j", "1\t/l", layout_version=2)
    with pytest.raises(CookieMismatchError, match="too old"):
        COOKIE.verify(old)
