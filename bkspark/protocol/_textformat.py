"""protobuf-java's ``TextFormat`` printer and a lenient parser, for BookKeeper's text records.

BookKeeper writes ledger metadata V2, cookies and the underreplication records
with protobuf-java's ``TextFormat.printer().print(...)``.  Python's
``text_format`` prints the same layout except for four byte escapes (Java uses
``\\a \\b \\f \\v`` where Python prints octal), so byte-exact output needs this
small printer.  Parsing goes through ``text_format.Merge`` (like Java's
``TextFormat.merge``: later values of a singular field overwrite earlier ones,
unknown fields are rejected) and then checks required fields as Java's
``Builder.build()`` does.
"""

from __future__ import annotations

from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from google.protobuf import text_format

from bkspark.errors import BadMetadataError

__all__ = ["java_escape_bytes", "print_java", "parse_text"]

_FD = _descriptor.FieldDescriptor

# protobuf-java TextFormatEscaper.escapeBytes: the named escapes it uses.
_JAVA_ESCAPES = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x5C: "\\\\",
    0x27: "\\'",
    0x22: '\\"',
}
_ESCAPE_TABLE = [
    _JAVA_ESCAPES.get(b, chr(b) if 0x20 <= b <= 0x7E else f"\\{(b >> 6) & 3}{(b >> 3) & 7}{b & 7}")
    for b in range(256)
]

_INT_TYPES = {
    _FD.TYPE_INT32,
    _FD.TYPE_INT64,
    _FD.TYPE_SINT32,
    _FD.TYPE_SINT64,
    _FD.TYPE_SFIXED32,
    _FD.TYPE_SFIXED64,
    _FD.TYPE_UINT32,
    _FD.TYPE_UINT64,
    _FD.TYPE_FIXED32,
    _FD.TYPE_FIXED64,
}


def java_escape_bytes(data: bytes) -> str:
    """Escape bytes exactly as protobuf-java's ``TextFormat.escapeBytes`` does."""
    return "".join(_ESCAPE_TABLE[b] for b in data)


def _value_text(field: _descriptor.FieldDescriptor, value: object) -> str:
    if field.type in _INT_TYPES:
        return str(value)
    if field.type == _FD.TYPE_BOOL:
        return "true" if value else "false"
    if field.type == _FD.TYPE_ENUM:
        enum_value = field.enum_type.values_by_number.get(value)  # type: ignore[arg-type]
        return enum_value.name if enum_value is not None else str(value)
    if field.type == _FD.TYPE_STRING:
        # Java escapes the UTF-8 bytes of the string (escapeText), non-ASCII as octal.
        raw = value if isinstance(value, bytes) else str(value).encode("utf-8")
        return '"' + java_escape_bytes(raw) + '"'
    if field.type == _FD.TYPE_BYTES:
        return '"' + java_escape_bytes(bytes(value)) + '"'  # type: ignore[call-overload]
    raise TypeError(f"field {field.full_name}: type {field.type} is not printed by bkspark")


def _print_into(msg: _message.Message, out: list[str], indent: str) -> None:
    # ListFields() is ordered by field number, as Java's getAllFields() is.
    for field, value in msg.ListFields():
        is_map = (
            field.type == _FD.TYPE_MESSAGE
            and field.message_type.GetOptions().map_entry  # type: ignore[union-attr]
        )
        if is_map:
            # Java prints map entries sorted by key.
            items = [(k, value[k]) for k in sorted(value)]  # type: ignore[attr-defined]
            for key, item in items:
                entry = getattr(msg, field.name).GetEntryClass()(key=key, value=item)
                out.append(f"{indent}{field.name} {{\n")
                _print_into(entry, out, indent + "  ")
                out.append(f"{indent}}}\n")
            continue
        values = value if field.is_repeated else [value]
        for item in values:  # type: ignore[union-attr]
            if field.type in (_FD.TYPE_MESSAGE, _FD.TYPE_GROUP):
                out.append(f"{indent}{field.name} {{\n")
                _print_into(item, out, indent + "  ")
                out.append(f"{indent}}}\n")
            else:
                out.append(f"{indent}{field.name}: {_value_text(field, item)}\n")


def print_java(msg: _message.Message) -> str:
    """``TextFormat.printer().print(msg)`` of protobuf-java 3.x, character for character."""
    out: list[str] = []
    _print_into(msg, out, "")
    return "".join(out)


def parse_text(text: str, msg: _message.Message, what: str) -> None:
    """Merge ``text`` into ``msg`` as Java's ``TextFormat.merge`` + ``build()`` would.

    Raises :class:`BadMetadataError` naming ``what`` on a syntax error, an
    unknown field or a missing required field.
    """
    try:
        text_format.Merge(text, msg)
    except Exception as exc:  # noqa: BLE001 - ParseError mostly, but text_format raises others on odd input
        raise BadMetadataError(f"{what}: bad protobuf text format: {exc}") from None
    missing = msg.FindInitializationErrors()
    if missing:
        raise BadMetadataError(f"{what}: missing required fields: {', '.join(missing)}")
