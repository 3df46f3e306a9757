"""Fuzzing the metadata readers: bad bytes raise only the documented typed errors.

Random and mutated inputs for every reader of stored metadata (ledger
metadata V1/V2/V3, cookies, LAYOUT, BookieServiceInfo, ledger znode paths,
qualified names), and serialize/parse round trips of random valid metadata.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bkspark.errors import BadMetadataError, InvalidOptionError
from bkspark.protocol import zk_paths
from bkspark.protocol.cookie import Cookie
from bkspark.protocol.digest import DigestType
from bkspark.protocol.layout import LedgerLayout
from bkspark.protocol.ledger_metadata import HEADER_KEY, LedgerMetadata, LedgerState, parse, serialize
from bkspark.protocol.ledger_name import parse_qualified_name, qualified_name
from bkspark.protocol.service_info import parse as parse_service_info
from bkspark.protocol.service_info import serialize as serialize_service_info

from tests.unit.test_ledger_metadata import JAVA_V1, JAVA_V2, JAVA_V3, SPEC_V2_EXAMPLE, SPEC_V3_EXAMPLE

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VALID_BLOBS = [JAVA_V1, JAVA_V2, JAVA_V3, SPEC_V2_EXAMPLE, SPEC_V3_EXAMPLE]


def _parse_or_bad(data: bytes) -> LedgerMetadata | None:
    try:
        md = parse(data)
    except BadMetadataError:
        return None
    assert isinstance(md, LedgerMetadata)
    return md


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    _parse_or_bad(data)


@FUZZ
@given(st.sampled_from([b"1", b"2", b"3", b"+3", b"0", b"-1"]), st.binary(max_size=300))
def test_random_body_after_header(version: bytes, body: bytes) -> None:
    _parse_or_bad(HEADER_KEY + version + b"\n" + body)


@FUZZ
@given(st.sampled_from([b"1", b"2"]), st.text(alphabet="0123456789\t\n:-abcLOSED{}\"\\ ", max_size=200))
def test_text_like_bodies(version: bytes, body: str) -> None:
    _parse_or_bad(HEADER_KEY + version + b"\n" + body.encode())


def test_every_truncation_of_valid_metadata() -> None:
    for blob in VALID_BLOBS:
        for end in range(len(blob)):
            _parse_or_bad(blob[:end])


@FUZZ
@given(st.sampled_from(VALID_BLOBS), st.data())
def test_mutated_valid_metadata(blob: bytes, data: st.DataObject) -> None:
    mutated = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(mutated) - 1))
        mutated[pos] = data.draw(st.integers(0, 255))
    _parse_or_bad(bytes(mutated))


BOOKIE = st.from_regex(r"[a-z0-9.\-]{1,12}:[0-9]{1,5}", fullmatch=True)
INT64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def ledger_metadata(draw: st.DrawFn) -> LedgerMetadata:
    ensemble = draw(st.integers(1, 5))
    write = draw(st.integers(1, ensemble))
    ack = draw(st.integers(1, write))
    keys = sorted(draw(st.sets(st.integers(0, 2**63 - 1), min_size=1, max_size=4)))
    ensembles = {k: tuple(draw(st.lists(BOOKIE, min_size=ensemble, max_size=ensemble))) for k in keys}
    state = draw(st.sampled_from(list(LedgerState)))
    closed = state is LedgerState.CLOSED
    version = draw(st.sampled_from([1, 2, 3]))
    with_password = version != 1
    return LedgerMetadata(
        ensemble_size=ensemble,
        write_quorum_size=write,
        ack_quorum_size=write if version == 1 else ack,
        state=state,
        last_entry_id=draw(INT64) if closed else -1,
        length=draw(INT64) if closed else 0,
        digest_type=draw(st.sampled_from(list(DigestType))) if with_password else None,
        password=draw(st.binary(max_size=20)) if with_password else None,
        ensembles=ensembles,
        ctime=draw(INT64) if with_password else -1,
        store_ctime=with_password,
        custom_metadata=draw(st.dictionaries(st.text(max_size=8), st.binary(max_size=8), max_size=3))
        if with_password
        else {},
        ctoken=draw(INT64) if version == 3 else 0,
        format_version=version,
    )


@FUZZ
@given(ledger_metadata())
def test_round_trip(md: LedgerMetadata) -> None:
    data = serialize(md)
    assert parse(data) == md
    assert serialize(parse(data)) == data


@FUZZ
@given(ledger_metadata(), st.data())
def test_truncated_random_metadata(md: LedgerMetadata, data: st.DataObject) -> None:
    blob = serialize(md)
    _parse_or_bad(blob[: data.draw(st.integers(0, len(blob) - 1))])


@FUZZ
@given(st.binary(max_size=200))
def test_other_readers(data: bytes) -> None:
    # Whatever parses must survive its own serialize/parse round trip.
    try:
        cookie = Cookie.parse(data)
    except BadMetadataError:
        pass
    else:
        again = Cookie.parse(cookie.serialize())
        assert (again.bookie_host, again.journal_dirs, again.ledger_dirs) == (
            cookie.bookie_host,
            cookie.journal_dirs,
            cookie.ledger_dirs,
        )
    try:
        layout = LedgerLayout.parse(data)
    except BadMetadataError:
        pass
    else:
        assert LedgerLayout.parse(layout.serialize()) == layout
    try:
        info = parse_service_info(data, "h:1")
    except BadMetadataError:
        pass
    else:
        if info.endpoints or info.properties:  # an empty info serializes to b"", which means "legacy"
            assert parse_service_info(serialize_service_info(info), "h:1") == info
        else:
            assert serialize_service_info(info) == b""


@FUZZ
@given(st.text(max_size=200))
def test_cookie_text(text: str) -> None:
    try:
        cookie = Cookie.parse(("5\n" + text).encode())
    except BadMetadataError:
        return
    assert Cookie.parse(cookie.serialize()) == cookie


@FUZZ
@given(st.lists(st.text(alphabet="0123456789Lscope/", max_size=6), max_size=12))
def test_ledger_paths(levels: list[str]) -> None:
    path = "/ledgers/" + "/".join(levels)
    for scheme in zk_paths.SCHEMES:
        try:
            scope_id, ledger_id = zk_paths.parse_ledger_path("/ledgers", path, scheme)
        except BadMetadataError:
            continue
        assert zk_paths.ledger_path("/ledgers", ledger_id, scheme, scope_id) == path


@FUZZ
@given(st.text(max_size=40))
def test_qualified_names(text: str) -> None:
    try:
        scope_id, ledger_id = parse_qualified_name(text)
    except InvalidOptionError:
        return
    normalized = (text[2:] if text[:2].lower() == "0x" else text).replace("-", "").lower()
    assert qualified_name(scope_id, ledger_id) == normalized
