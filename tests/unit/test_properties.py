"""The one Java-properties parser (bkspark.properties): bk_server.conf and client.conf."""

from __future__ import annotations

from bkspark.properties import parse_properties


def test_separators_comments_and_trimming() -> None:
    text = (
        "# a comment\n! another\n\n"
        "bookiePort=3181\nledgerDirectories : /a, /b\nmetadataServiceUri zk+hierarchical://h:2181/ledgers\n"
        "  indented = value with spaces   \nempty=\nonlykey\n"
    )
    assert parse_properties(text) == {
        "bookiePort": "3181",
        "ledgerDirectories": "/a, /b",
        "metadataServiceUri": "zk+hierarchical://h:2181/ledgers",
        "indented": "value with spaces",
        "empty": "",
        "onlykey": "",
    }


def test_continuations_count_backslashes() -> None:
    text = "list=a,\\\n    b,\\\n    c\nescaped=path\\\\\nnext=1\nlast=x\\"
    assert parse_properties(text) == {"list": "a,b,c", "escaped": "path\\\\", "next": "1", "last": "x"}


def test_escaped_separators_stay_in_the_key_and_later_keys_win() -> None:
    assert parse_properties("a\\=b=c\nk=1\nk=2\n") == {"a\\=b": "c", "k": "2"}
