"""``bkspark`` command line: parsing, ledger names, output shapes, and one-line errors (no servers needed)."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bkspark import cli
from bkspark.shell.common import ENV_URI, LedgerName, Output, Progress, ShellError
from bkspark.shell.common import client_conf, metadata_service_uri, resolve_ledger

UNREACHABLE = "zk+hierarchical://127.0.0.1:1/ledgers"


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(list(argv))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- parsing --------------------------------------------------------------------------------------------------------


def test_every_command_has_help(capsys):
    commands = ["listorphaned", "showowner", "predictlifespan", "listledgers", "ledgermetadata", "readledger",
                "deleteledger", "listbookies", "bookieinfo", "simpletest", "auditconfig", "auditstatus",
                "initnewcluster", "metaformat", "nukeexistingcluster", "bookieformat", "recoverjobs"]
    levels = (["--help"], ["shell", "--help"], ["auditor", "--help"], ["cluster", "--help"],
              *(["cluster", c, "--help"] for c in ("start", "status", "stop")))
    for argv in (*levels, *(["shell", c, "--help"] for c in commands)):
        code, out, err = run(capsys, *argv)
        assert code == 0 and "usage:" in out and err == "", argv


def test_global_options_before_or_after_the_command():
    a = parse("shell", "--metadata-service-uri", "zk://h:1/r", "--json", "showowner", "5")
    b = parse("shell", "showowner", "5", "--metadata-service-uri", "zk://h:1/r", "--json")
    for args in (a, b):
        assert args.metadata_service_uri == "zk://h:1/r" and args.json is True and args.ledger == "5"
    assert parse("shell", "showowner", "5").json is False


def test_the_cluster_comes_from_the_flag_then_the_client_conf_then_the_environment(tmp_path, monkeypatch):
    """docs/shell.md: --metadata-service-uri (or --metadataServiceUri), else the client conf's metadataServiceUri
    (--client-conf or --conf-file), else $BKSPARK_METADATA_SERVICE_URI."""
    conf = tmp_path / "client.conf"
    conf.write_text("# a client.conf\nmetadataServiceUri=zk://from-file:1/ledgers\nzkTimeout=5000\n")
    monkeypatch.setenv(ENV_URI, "zk://from-env:1/ledgers")
    assert metadata_service_uri(parse("shell", "listledgers")) == "zk://from-env:1/ledgers"
    for flag in ("--client-conf", "--conf-file"):
        for argv in (("shell", flag, str(conf), "listledgers"), ("shell", "listledgers", flag, str(conf))):
            assert metadata_service_uri(parse(*argv)) == "zk://from-file:1/ledgers", argv
    for flag in ("--metadata-service-uri", "--metadataServiceUri"):
        args = parse("shell", "listledgers", "--client-conf", str(conf), flag, "zk://from-flag:1/ledgers")
        assert metadata_service_uri(args) == "zk://from-flag:1/ledgers"


def test_conf_settings_override_the_client_conf_file(tmp_path):
    """--conf KEY=VALUE overrides the same key of --client-conf; the file's other keys stay."""
    conf = tmp_path / "client.conf"
    conf.write_text("ensemblePlacementPolicy=random\nreppDnsResolverClass=x.Y\n")
    args = parse("shell", "--client-conf", str(conf), "listbookies", "--conf", "ensemblePlacementPolicy=rackaware")
    assert client_conf(args) == {"ensemblePlacementPolicy": "rackaware", "reppDnsResolverClass": "x.Y"}


@pytest.mark.parametrize("argv", [["simpletest"], ["readledger", "1"]])
def test_commands_that_open_a_client_pass_it_the_conf_settings(capsys, tmp_path, argv):
    """readledger and simpletest give --conf and --client-conf settings to the client they open: the client checks
    them before it connects, so a bad value is refused (exit 2) even with ZooKeeper unreachable."""
    code, out, err = run(capsys, "shell", "--metadata-service-uri", UNREACHABLE, "--zk-timeout", "0.5", *argv,
                         "--conf", "addEntryTimeoutSec=abc")
    assert code == 2 and out == "" and "addEntryTimeoutSec" in err and len(err.strip().splitlines()) == 1
    conf = tmp_path / "client.conf"
    conf.write_text("readEntryTimeoutSec=soon\n")
    code, out, err = run(capsys, "shell", "--metadata-service-uri", UNREACHABLE, "--zk-timeout", "0.5", *argv,
                         "--client-conf", str(conf))
    assert code == 2 and "readEntryTimeoutSec" in err


def test_documented_defaults_of_the_shell_and_the_auditor():
    """--zk-timeout is 10 in the shell; the auditor's flags default to 300, 3600, 0, 10 and INFO; the local
    cluster lives in ~/.bkspark/cluster."""
    assert parse("shell", "listledgers").zk_timeout == 10.0
    args = parse("auditor")
    assert (args.audit_period, args.grace_period, args.parent_grace_period, args.zk_timeout, args.log_level) == (
        300.0, 3600.0, 0.0, 10.0, "INFO"
    )
    expected = os.path.join(os.path.expanduser("~"), ".bkspark", "cluster")
    for action in ("start", "status", "stop"):
        assert parse("cluster", action).dir == expected


def test_java_flag_spellings_are_accepted():
    args = parse("shell", "readledger", "-l", "7", "-fe", "2", "-le", "9", "-m", "-r")
    assert (args.ledgerid, args.firstentryid, args.lastentryid, args.msg, args.force_recovery) == ("7", "2", "9", True, True)
    args = parse("shell", "readledger", "7", "2", "9")
    assert (args.ledger, args.start, args.end) == ("7", "2", "9")
    assert parse("shell", "ledgermetadata", "-ledgerid", "3").ledgerid == "3"
    assert parse("shell", "listledgers", "-meta").meta and parse("shell", "listledgers", "-m").meta
    args = parse("shell", "listbookies", "-rw", "-h")
    assert args.readwrite and args.hostnames and not args.readonly
    args = parse("shell", "simpletest", "-e", "1", "-w", "1", "-a", "1", "-n", "10")
    assert (args.ensemble, args.writeQuorum, args.ackQuorum, args.numEntries) == ("1", "1", "1", "10")
    assert parse("shell", "deleteledger", "-l", "4", "-f").force
    assert parse("shell", "listorphaned", "--printorphanreason").printorphanreason


def test_bp35_flags_on_every_ledger_command():
    for command in ("showowner", "predictlifespan", "ledgermetadata", "readledger", "deleteledger"):
        args = parse("shell", command, "--ledger-qualified-name", "0x" + "0" * 15 + "7" + "0" * 15 + "9")
        assert resolve_ledger(args) == LedgerName(9, 7)
        args = parse("shell", command, "9", "--ledger-scope-id", "-1")
        assert resolve_ledger(args) == LedgerName(9, -1)
    for command in ("listledgers", "listorphaned"):
        assert parse("shell", command, "--ledger-scope-id", "3").ledger_scope_id == "3"


def test_ledger_arguments_may_be_mixed_when_they_agree():
    """LEDGER, -l, --ledger-scope-id and --ledger-qualified-name together name one ledger if they agree; the scope
    is an int64 (default 0)."""
    qname = "0x" + "0" * 15 + "7" + "0" * 15 + "9"
    args = parse("shell", "showowner", "9", "-l", "9", "--ledger-scope-id", "7", "--ledger-qualified-name", qname)
    assert resolve_ledger(args) == LedgerName(9, 7)
    assert resolve_ledger(parse("shell", "readledger", "-l", "9", "--ledger-qualified-name", qname)) == LedgerName(9, 7)
    assert resolve_ledger(parse("shell", "showowner", "9")) == LedgerName(9, 0)
    low, high = str(-(2**63)), str(2**63 - 1)
    assert resolve_ledger(parse("shell", "showowner", "9", "--ledger-scope-id", low)).scope_id == -(2**63)
    assert resolve_ledger(parse("shell", "showowner", "9", "--ledger-scope-id", high)).scope_id == 2**63 - 1
    with pytest.raises(ShellError) as info:
        resolve_ledger(parse("shell", "showowner", "9", "--ledger-scope-id", str(2**63)))
    assert info.value.exit_code == 2


def test_uuid_dashed_qualified_name():
    args = parse("shell", "showowner", "--ledger-qualified-name", "00000000-0000-0007-0000-000000000009")
    assert resolve_ledger(args) == LedgerName(9, 7)


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["showowner"], "no ledger given"),
        (["showowner", "abc"], "bad ledger id 'abc'"),
        (["showowner", "-5"], "must be in"),
        (["showowner", "9223372036854775808"], "must be in"),
        (["showowner", "--ledger-qualified-name", "xyz"], "bad ledger qualified name"),
        (["showowner", "--ledger-qualified-name", "0" * 16 + "8" + "0" * 15], "top bit"),
        (["showowner", "1", "-l", "2"], "two different ledgers"),
        (["showowner", "1", "--ledger-qualified-name", "0" * 31 + "2"], "does not match"),
        (["showowner", "2", "--ledger-scope-id", "4", "--ledger-qualified-name", "0" * 31 + "2"], "does not match"),
        (["showowner", "2", "--ledger-scope-id", "x"], "bad ledger scope id"),
        (["readledger", "1", "x"], "bad first entry id"),
        (["readledger", "1", "0", "3", "-le", "4"], "two different last entries"),
        (["readledger", "1", "0", "-le", "4", "3"], "unrecognized arguments: 3"),
        (["simpletest", "-e", "1", "-w", "2"], "need ensemble >= writeQuorum"),
        (["simpletest", "-n", "ten"], "bad number of entries"),
        (["auditconfig", "--audit-period", "0"], "audit_period"),
        (["nosuchcommand"], "invalid choice"),
        (["readledger", "-l", "1", "-b", "127.0.0.1:3181"], "unrecognized arguments"),  # Java's -b: not supported
        (["nukeexistingcluster", "-p", "/ledgers", "-i", "x", "-f"], "not both"),  # exactly one of -i and -f
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, monkeypatch, argv, fragment):
    monkeypatch.setenv(ENV_URI, UNREACHABLE)
    code, out, err = run(capsys, "shell", "--zk-timeout", "0.5", *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and fragment in err and "Traceback" not in err


def test_missing_cluster_is_one_line(capsys, monkeypatch):
    monkeypatch.delenv(ENV_URI, raising=False)
    code, out, err = run(capsys, "shell", "listledgers")
    assert code == 2 and err.strip() == (
        f"bkspark shell listledgers: error: no cluster given: pass --metadata-service-uri URI or set ${ENV_URI}"
    )


@pytest.mark.parametrize("uri", ["http://x/ledgers", "zk+nosuchmanager://127.0.0.1:1/ledgers", "no scheme"])
def test_bad_uri_is_one_line(capsys, uri):
    code, out, err = run(capsys, "shell", "listledgers", "--metadata-service-uri", uri)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["listledgers"], ["listorphaned"], ["showowner", "1"], ["predictlifespan", "1"], ["ledgermetadata", "-l", "1"],
        ["deleteledger", "-l", "1", "-f"], ["listbookies"], ["bookieinfo"], ["auditconfig"], ["auditstatus"],
        ["readledger", "1"], ["simpletest", "-n", "1"], ["initnewcluster"], ["metaformat", "-n", "-f"],
        ["nukeexistingcluster", "-p", "/ledgers", "-f"], ["recoverjobs"], ["recoverjobs", "--dataset", "sales"],
        ["deleteledger", "-l", "1", "-f", "--even-if-held"],
    ],
)
def test_unreachable_zookeeper_is_one_line_exit_1(capsys, argv):
    code, out, err = run(capsys, "shell", "--metadata-service-uri", UNREACHABLE, "--zk-timeout", "0.5", *argv)
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "ZooKeeper" in err and "Traceback" not in err


def test_console_script_silences_kazoos_connection_chatter():
    """Library logging is silenced in the shell: in a real process (pytest's own log handlers hide it in-process),
    an unreachable ZooKeeper gives the one error line and none of kazoo's "Connection dropped" warnings."""
    proc = subprocess.run(
        [sys.executable, "-m", "bkspark.cli", "shell", "--metadata-service-uri", UNREACHABLE, "--zk-timeout", "1",
         "listledgers"],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("bkspark shell listledgers: error:")


def test_auditor_without_cluster_is_one_line(capsys, monkeypatch):
    monkeypatch.delenv(ENV_URI, raising=False)
    code, out, err = run(capsys, "auditor")
    assert code == 2 and "no cluster given" in err and len(err.strip().splitlines()) == 1


def test_auditor_unreachable_is_one_line(capsys):
    code, out, err = run(capsys, "auditor", "--metadata-service-uri", UNREACHABLE, "--zk-timeout", "0.5")
    assert code == 1 and "cannot connect to ZooKeeper" in err and "Traceback" not in err


class Terminal(io.StringIO):
    """Typed answers on stdin that claim to come from a terminal (what the format commands ask on)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("typed, formatted", [("N\n", False), ("", False), ("y\n", True)], ids=["N", "EOF", "y"])
def test_bookieformat_asks_before_emptying_a_journal_that_holds_anything(
    capsys, monkeypatch, tmp_path, typed, formatted
):
    """docs/shell.md, bookieformat: it asks Java's question when a journal directory holds anything; only a yes
    empties the directories (no cluster given: the directories alone are formatted, nothing else is asked)."""
    monkeypatch.delenv(ENV_URI, raising=False)
    journal, ledgers = tmp_path / "journal", tmp_path / "ledgers"
    (journal / "current").mkdir(parents=True)
    (journal / "current" / "1.txn").write_bytes(b"x")
    ledgers.mkdir()
    (ledgers / "entries").write_bytes(b"y")
    conf = tmp_path / "bk_server.conf"
    conf.write_text(f"journalDirectories={journal}\nledgerDirectories={ledgers}\nbookiePort=3181\n")
    monkeypatch.setattr("sys.stdin", Terminal(typed))
    code, out, err = run(capsys, "shell", "bookieformat", "--bookie-conf", str(conf))
    assert out.startswith("Are you sure to format Bookie data..? (Y or N)") and "Traceback" not in err
    assert code == (0 if formatted else 1)
    assert (not any(journal.iterdir()) and not any(ledgers.iterdir())) is formatted


# -- output helpers -------------------------------------------------------------------------------------------------


def test_document_has_the_seed_pretty_shape_and_compact_json():
    stream = io.StringIO()
    Output(argparse.Namespace(json=False), stream).document({"createdBy": None, "dataSet": "d"})
    assert stream.getvalue() == '{\n    "createdBy" : null,\n    "dataSet" : "d"\n}\n'
    stream = io.StringIO()
    Output(argparse.Namespace(json=True), stream).document({"a": [1]})
    assert json.loads(stream.getvalue()) == {"a": [1]} and stream.getvalue().count("\n") == 1


def test_progress_line_only_when_enabled():
    stream = io.StringIO()
    progress = Progress("scan", enabled=True, stream=stream)
    progress(5, 10)
    progress(10, 10)
    progress.finish()
    assert "10/10" in stream.getvalue() and stream.getvalue().endswith("\n")
    quiet = io.StringIO()
    Progress("scan", enabled=None, stream=quiet)(1, 2)
    assert quiet.getvalue() == ""


def test_shell_error_carries_its_exit_code():
    assert ShellError("x", 2).exit_code == 2 and ShellError("y").exit_code == 1
