"""Bookie cookies (``bookie/Cookie.java``): a bookie's identity and directory set.

The same text is stored in ``<root>/cookies/<bookieId>`` and in each journal
and ledger directory's ``current/VERSION``.  Java writes layout version 5: the
line ``5\\n``, then ``CookieFormat`` in protobuf text format (``toString()`` of
the message, i.e. ``TextFormat.printer()``).  Java reads layout 3 (plain lines:
bookie id, journal dirs, ledger dirs) and layouts >= 4 (text format).

``ledgerDirs``/``indexDirs`` are encoded ``"<count>\\t<dir1>\\t<dir2>..."``,
``journalDir`` is the journal directories joined with ``,``.  An empty
``instanceId``/``indexDirs`` reads as absent, as in Java.

One deliberate difference: for a cookie read as layout 3, Java's ``toString``
writes ``5\n`` followed by the old plain lines, which Java itself cannot read
back; :meth:`Cookie.serialize` always writes the layout 5 text format.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bkspark.errors import BadMetadataError, CookieMismatchError
from bkspark.protocol._textformat import parse_text, print_java
from bkspark.protocol.bookie_id import java_parse_int, java_split
from bkspark.protocol.proto import DataFormats_pb2 as pb

__all__ = ["Cookie", "CURRENT_COOKIE_LAYOUT_VERSION", "encode_dir_paths", "decode_dir_paths", "VERSION_FILENAME"]

#: ``Cookie.CURRENT_COOKIE_LAYOUT_VERSION``.
CURRENT_COOKIE_LAYOUT_VERSION = 5
#: ``BookKeeperConstants.VERSION_FILENAME``: the cookie file in ``<dir>/current``.
VERSION_FILENAME = "VERSION"
_SEPARATOR = "\t"
_LINE_RE = re.compile(r"\r\n|\r|\n")


def encode_dir_paths(dirs: Sequence[str]) -> str:
    """``Cookie.encodeDirPaths``: ``"<count>\\t<dir1>\\t<dir2>..."``."""
    return _SEPARATOR.join([str(len(dirs)), *dirs])


def decode_dir_paths(encoded: str) -> list[str]:
    """``decodeDirPathFromCookie``: everything after the first tab, split on tabs (Java's split)."""
    rest = encoded[encoded.index(_SEPARATOR) + 1 :] if _SEPARATOR in encoded else encoded
    return java_split(rest, _SEPARATOR)


def _blank(value: str | None) -> bool:
    return value is None or value.strip() == ""


@dataclass(frozen=True, slots=True)
class Cookie:
    """One cookie; field names follow ``CookieFormat`` (``bookie_host`` is the BookieId)."""

    bookie_host: str
    journal_dirs: str
    ledger_dirs: str
    instance_id: str | None = None
    index_dirs: str | None = None
    layout_version: int = CURRENT_COOKIE_LAYOUT_VERSION

    @classmethod
    def generate(
        cls,
        bookie_id: str,
        journal_directories: Sequence[str],
        ledger_directories: Sequence[str],
        instance_id: str | None = None,
        index_directories: Sequence[str] | None = None,
    ) -> "Cookie":
        """``Cookie.generateCookie(conf)`` plus the cluster's instance id, from configured directories."""
        return cls(
            bookie_host=bookie_id,
            journal_dirs=",".join(journal_directories),
            ledger_dirs=encode_dir_paths(ledger_directories),
            instance_id=instance_id,
            index_dirs=encode_dir_paths(index_directories) if index_directories is not None else None,
        )

    @property
    def ledger_directories(self) -> list[str]:
        """The ledger directories this cookie names."""
        return decode_dir_paths(self.ledger_dirs)

    @property
    def index_directories(self) -> list[str] | None:
        """The index directories, or ``None`` when the cookie has none (then the ledger dirs hold the index)."""
        return None if self.index_dirs is None else decode_dir_paths(self.index_dirs)

    def serialize(self) -> bytes:
        """The bytes Java writes (``Cookie.toString()``, layout 5 text format), UTF-8."""
        if self.layout_version <= 3:  # Java's toStringVersion3: plain lines, yet headed "5" (CURRENT_...)
            lines = (str(CURRENT_COOKIE_LAYOUT_VERSION), self.bookie_host, self.journal_dirs, self.ledger_dirs)
            return "".join(f"{line}\n" for line in lines).encode("utf-8")
        fmt = pb.CookieFormat(bookieHost=self.bookie_host, journalDir=self.journal_dirs, ledgerDirs=self.ledger_dirs)
        if self.instance_id is not None:
            fmt.instanceId = self.instance_id
        if self.index_dirs is not None:
            fmt.indexDirs = self.index_dirs
        return f"{CURRENT_COOKIE_LAYOUT_VERSION}\n{print_java(fmt)}".encode("utf-8")

    @classmethod
    def parse(cls, data: bytes | bytearray | memoryview) -> "Cookie":
        """``Cookie.parseFromBytes``; raises :class:`BadMetadataError` where Java fails.

        Layouts below 3 carry no fields Java can use (its ``verify`` rejects them
        as "too old"), so they are refused here already.
        """
        text = bytes(data).decode("utf-8", errors="replace")
        lines = _LINE_RE.split(text, maxsplit=1)
        if not text:
            raise BadMetadataError("Exception in parsing cookie: it is empty")
        version = java_parse_int(lines[0].strip())
        if version is None:
            raise BadMetadataError(f"Invalid string {lines[0].strip()!r}, cannot parse cookie.")
        rest = lines[1] if len(lines) > 1 else ""
        if version == 3:
            fields = _LINE_RE.split(rest)
            if fields[-1] == "":
                fields.pop()  # readLine() yields no empty line after a final terminator
            if len(fields) < 3:
                raise BadMetadataError("layout 3 cookie needs bookie id, journal dirs and ledger dirs lines")
            return cls(fields[0], fields[1], fields[2], layout_version=3)
        if version >= 4:
            fmt = pb.CookieFormat()
            parse_text(rest, fmt, "cookie")
            return cls(
                bookie_host=fmt.bookieHost,
                journal_dirs=fmt.journalDir,
                ledger_dirs=fmt.ledgerDirs,
                instance_id=fmt.instanceId or None,
                index_dirs=fmt.indexDirs or None,
                layout_version=version,
            )
        raise BadMetadataError(f"Cookie is of too old version {version}")

    def _dirs_match(self, mine: str, theirs: str, superset: bool) -> bool:
        if not superset:
            return mine == theirs
        return set(decode_dir_paths(theirs)) <= set(decode_dir_paths(mine))

    def _verify(self, other: "Cookie", superset: bool) -> None:
        if other.layout_version < 3 and other.layout_version != self.layout_version:
            raise CookieMismatchError(f"Cookie is of too old version {other.layout_version}", field="layoutVersion")
        my_index = self.ledger_dirs if _blank(self.index_dirs) else self.index_dirs
        their_index = other.ledger_dirs if _blank(other.index_dirs) else other.index_dirs
        checks = (
            ("layoutVersion", other.layout_version >= 3, self.layout_version, other.layout_version),
            ("bookieHost", other.bookie_host == self.bookie_host, self.bookie_host, other.bookie_host),
            ("journalDir", other.journal_dirs == self.journal_dirs, self.journal_dirs, other.journal_dirs),
            (
                "ledgerDirs",
                self._dirs_match(self.ledger_dirs, other.ledger_dirs, superset),
                self.ledger_dirs,
                other.ledger_dirs,
            ),
            ("indexDirs", self._dirs_match(my_index or "", their_index or "", superset), my_index, their_index),
            ("instanceId", self.instance_id == other.instance_id, self.instance_id, other.instance_id),
        )
        for name, ok, mine, theirs in checks:
            if not ok:
                raise CookieMismatchError(
                    f"cookie field {name} does not match", field=name, expected=mine, actual=theirs
                )

    def verify(self, other: "Cookie") -> None:
        """``Cookie.verify``: ``other`` (e.g. the stored cookie) must equal this one field by field.

        ``self`` is the cookie built from the configuration.  Raises
        :class:`CookieMismatchError` naming the first differing field.
        """
        self._verify(other, superset=False)

    def verify_is_super_set(self, other: "Cookie") -> None:
        """``Cookie.verifyIsSuperSet``: like :meth:`verify`, but this cookie's ledger and index
        directories need only include ``other``'s (directories were added)."""
        self._verify(other, superset=True)

    def matches(self, other: "Cookie") -> bool:
        """Whether :meth:`verify` passes."""
        try:
            self.verify(other)
        except CookieMismatchError:
            return False
        return True
