"""The shared typed-config rules (bkspark/config/typed.py) and the misspelled-security-key refusal (issue 47 item 6).

One boolean rule set for the client, the bookie and the security settings; one key lookup; one conversion; a key
one edit away from a security key refused at client start, at bookie start and at the connector's load()/save().
"""

from __future__ import annotations

import dataclasses
import logging

import pytest

from bkspark.client.conf import ClientConf
from bkspark.config.bookie import BookieConfig, load_conf
from bkspark.config.typed import (
    DEFAULT_ACK_QUORUM_SIZE,
    DEFAULT_ENSEMBLE_SIZE,
    DEFAULT_WRITE_QUORUM_SIZE,
    FALSE_WORDS,
    TRUE_WORDS,
    KeyIndex,
    coerce,
    flag,
    is_int,
    lookup,
    parse_bool,
)
from bkspark.confkeys import (
    BOOKIE_KEYS,
    CLIENT_KEYS,
    SECURITY_KEYS,
    check_keys,
    misspelled_security_key,
    one_edit_apart,
    refuse_misspelled_security_keys,
)
from bkspark.errors import InvalidOptionError, MisspelledSecurityKeyError, one_line
from bkspark.security.tls import TlsSettings
from bkspark.security.zk import ZkSecurity


def test_is_int_refuses_bools_and_non_ints() -> None:
    assert is_int(0) and is_int(-(2**70))
    assert not is_int(True) and not is_int(False) and not is_int(1.0) and not is_int("1")


@pytest.mark.parametrize("word", sorted(TRUE_WORDS | FALSE_WORDS))
def test_one_boolean_rule_set_for_client_bookie_and_security(word: str) -> None:
    """The same words mean the same thing to every reader of a boolean key, in any case."""
    want = word in TRUE_WORDS
    for spelled in (word, word.upper(), f" {word} "):
        assert parse_bool(spelled) is want
        assert ClientConf.from_mapping({"batchReadEnabled": spelled}).batchReadEnabled is want
        assert BookieConfig.from_mapping({"journalSyncData": spelled}).journalSyncData is want
        assert ZkSecurity.from_conf({"zkEnableSecurity": spelled}).enable_acls is want
        assert flag({"tlsClientAuthentication": spelled}, "tlsClientAuthentication", not want) is want


def test_a_bad_boolean_is_the_same_typed_error_everywhere() -> None:
    with pytest.raises(InvalidOptionError, match="batchReadEnabled"):
        ClientConf.from_mapping({"batchReadEnabled": "maybe"})
    with pytest.raises(InvalidOptionError, match="journalSyncData"):
        BookieConfig.from_mapping({"journalSyncData": "maybe"})
    with pytest.raises(InvalidOptionError, match="zkEnableSecurity"):
        ZkSecurity.from_conf({"zkEnableSecurity": "maybe"})
    with pytest.raises(InvalidOptionError, match="tlsHostnameVerificationEnabled"):
        TlsSettings.from_conf(
            {
                "tlsProviderFactoryClass": "org.apache.bookkeeper.tls.TLSContextFactory",
                "tlsTrustStore": "/nonexistent/ca.pem",
                "tlsHostnameVerificationEnabled": "maybe",
            },
            server_side=False,
        )


def test_lookup_ignores_case_and_treats_empty_as_absent() -> None:
    conf = {"tlstruststore": "/ca.pem", "tlsProvider": ""}
    assert lookup(conf, "tlsTrustStore") == "/ca.pem"
    assert lookup(conf, "tlsProvider", "OpenSSL") == "OpenSSL"
    assert flag({}, "zookeeper.sasl.client", True) is True


def test_key_index_answers_exact_any_case_snake_case_and_aliases() -> None:
    index = KeyIndex(["addEntryTimeoutSec", "maxPendingAdds"], {"throttle": "maxPendingAdds"})
    assert index.field_for("addEntryTimeoutSec") == "addEntryTimeoutSec"
    assert index.field_for("addentrytimeoutsec") == "addEntryTimeoutSec"
    assert index.field_for("add_entry_timeout_sec") == "addEntryTimeoutSec"
    assert index.field_for("THROTTLE") == "maxPendingAdds"
    assert index.field_for("addEntryTimeout") is None


def test_the_bookie_reads_keys_as_the_client_does() -> None:
    """Case-insensitive and snake_case keys reach the bookie's fields too (the shared index)."""
    conf = BookieConfig.from_mapping({"bookieport": "3999", "journal_sync_data": "false", "ledgerDirectory": "/l"})
    assert (conf.bookiePort, conf.journalSyncData, conf.ledgerDirectories) == (3999, False, ["/l"])


@pytest.mark.parametrize(
    "ftype, raw, want",
    [
        ("bool", "on", True),
        ("int", "42", 42),
        ("float", "2.5", 2.5),
        ("list[str]", " a, b ,,c ", ["a", "b", "c"]),
        ("str | None", "  ", None),
        ("str | None", None, None),
        ("str", " x ", "x"),
    ],
)
def test_coerce_converts_to_the_field_type(ftype: str, raw: object, want: object) -> None:
    assert coerce("k", ftype, raw) == want


@pytest.mark.parametrize("ftype, raw", [("int", "4x"), ("float", "fast"), ("bool", "2x"), ("str", None)])
def test_coerce_names_the_key_of_a_bad_value(ftype: str, raw: object) -> None:
    with pytest.raises(InvalidOptionError, match="someKey"):
        coerce("someKey", ftype, raw)


def test_ledger_defaults_are_defined_once_and_used_by_both_clients() -> None:
    import inspect

    from bkspark.client.aio import AsyncBookKeeper
    from bkspark.client.bookkeeper import BookKeeper

    want = (DEFAULT_ENSEMBLE_SIZE, DEFAULT_WRITE_QUORUM_SIZE, DEFAULT_ACK_QUORUM_SIZE)
    assert want == (3, 2, 2)  # Apache BookKeeper's own defaults
    for cls in (BookKeeper, AsyncBookKeeper):
        params = inspect.signature(cls.create_ledger).parameters
        assert tuple(params[n].default for n in ("ensemble_size", "write_quorum_size", "ack_quorum_size")) == want


def test_one_line_lives_at_the_bottom_and_flattens_a_message() -> None:
    assert one_line(ValueError("a\n  b")) == "a b"
    assert one_line(ValueError()) == "ValueError"


# -- issue 47 item 6: a misspelled security key is an error -------------------------------------------------


@pytest.mark.parametrize(
    "given, meant",
    [
        ("tlsProviderFactoryClas", "tlsProviderFactoryClass"),  # a letter dropped
        ("tlsproviderfactoryclas", "tlsProviderFactoryClass"),  # as Spark passes it, lower-cased
        ("tlsTrustStroe", "tlsTrustStore"),  # two neighbours swapped
        ("saslJaasClientSectionNme", "saslJaasClientSectionName"),
        ("clientAuthProviderFactoryClasss", "clientAuthProviderFactoryClass"),  # a letter added
        ("zkDigestAuthPth", "zkDigestAuthPath"),
        ("java.security.auth.login.confg", "java.security.auth.login.config"),
        ("tlsKeyStorx", "tlsKeyStore"),  # a letter changed
    ],
)
def test_a_key_one_edit_from_a_security_key_is_refused_at_client_start(given: str, meant: str) -> None:
    with pytest.raises(MisspelledSecurityKeyError) as info:
        ClientConf.from_mapping({given: "x"})
    assert info.value.key == given and info.value.meant == meant
    assert isinstance(info.value, InvalidOptionError)  # the CLI's exit 2, the connector's option error
    assert repr(meant) in str(info.value)


def test_a_misspelled_security_key_stops_the_bookie_too() -> None:
    with pytest.raises(MisspelledSecurityKeyError, match="tlsCertificatePath"):
        check_keys({"tlsCertificatPath": "/cert.pem"}, BOOKIE_KEYS, "bookie")


def test_other_unknown_keys_keep_the_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="bkspark.conf"):
        conf = ClientConf.from_mapping({"tlsSomethingElseEntirely": "1", "minNumRackPerWriteQuorum": "2"})
    assert set(conf.extra) == {"tlsSomethingElseEntirely", "minNumRackPerWriteQuorum"}
    assert "'minNumRackPerWriteQuorum' is ignored (did you mean 'minNumRacksPerWriteQuorum'?)" in caplog.text
    assert "'tlsSomethingElseEntirely' is ignored" in caplog.text


def test_no_known_key_or_field_counts_as_a_misspelling() -> None:
    """Every key bkspark reads (client and bookie fields, registry keys) is accepted as itself, in any case."""
    fields = [f.name for cls in (ClientConf, BookieConfig) for f in dataclasses.fields(cls) if f.name != "extra"]
    for key in [*fields, *CLIENT_KEYS, *BOOKIE_KEYS, *SECURITY_KEYS]:
        assert misspelled_security_key(key, fields) is None, key
        assert misspelled_security_key(key.lower(), fields) is None, key
    ClientConf.from_mapping({f.name: getattr(ClientConf(), f.name) for f in dataclasses.fields(ClientConf) if f.name != "extra"})


def test_the_connector_names_the_key_as_the_user_wrote_it() -> None:
    with pytest.raises(MisspelledSecurityKeyError) as info:
        refuse_misspelled_security_keys({"tlsprovider": "JDK", "tlsclientauthenticaton": "true"}, prefix="bookkeeper.")
    assert info.value.key == "bookkeeper.tlsclientauthenticaton" and info.value.meant == "bookkeeper.tlsClientAuthentication"


@pytest.mark.parametrize(
    "a, b, want",
    [("abc", "abd", True), ("abc", "ab", True), ("abc", "abcd", True), ("abc", "acb", True), ("abc", "abc", False),
     ("abc", "cba", False), ("abc", "a", False), ("abcd", "abdc", True), ("abcd", "badc", False)],
)
def test_one_edit_apart(a: str, b: str, want: bool) -> None:
    assert one_edit_apart(a, b) is want and one_edit_apart(b, a) is want


def test_load_conf_reads_the_bookie_file_for_the_shell(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The shell's bookieformat reads a bookie's directories through bkspark.config, not bookie_server."""
    path = tmp_path / "bk_server.conf"
    path.write_text("journalDirectories=/j1, /j2\nledgerDirectories: /l\nbookiePort 3182\n", encoding="utf-8")
    conf = load_conf(path)
    assert (conf.journalDirectories, conf.ledgerDirectories, conf.bookiePort) == (["/j1", "/j2"], ["/l"], 3182)


def test_the_client_refuses_a_misspelled_security_key_before_it_connects() -> None:
    """Through the blocking and the async client: the refusal comes at construction, before any ZooKeeper session
    (the URI's port 1 is never dialled) and before any bookie is reached in plain text."""
    from bkspark.client.aio import AsyncBookKeeper
    from bkspark.client.bookkeeper import BookKeeper

    uri = "zk+hierarchical://127.0.0.1:1/ledgers"
    with pytest.raises(MisspelledSecurityKeyError, match="'tlsProviderFactoryClass'"):
        BookKeeper(uri, {"tlsProviderFactoryClas": "org.apache.bookkeeper.tls.TLSContextFactory"})
    with pytest.raises(MisspelledSecurityKeyError, match="'clientAuthProviderFactoryClass'"):
        AsyncBookKeeper(uri, clientAuthProviderFactoryClas="org.apache.bookkeeper.sasl.SASLClientProviderFactory")
