"""``bkspark shell`` metadata commands against a real ZooKeeper (no bookies): output shapes and bad input."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from bkspark import cli
from bkspark.context import CLOSE_KEY, SEAL_TIME_KEY, LedgerCloseContext, LedgerCreateContext
from bkspark.errors import NoSuchLedgerMetadataError
from bkspark.metadata.store import ZkMetadataStore
from bkspark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bkspark.protocol.ledger_name import qualified_name

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def shell(capsys: pytest.CaptureFixture[str], uri: str, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["shell", "--metadata-service-uri", uri, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_seed_output_shapes_for_a_scoped_ledger(zk_root, capsys) -> None:
    create = (
        LedgerCreateContext.builder()
        .created_by("Company X", "System y", "service.z", "host1.z.companyx.com")
        .part_of_data_set("persistent://public/default/test_topic")
        .expected_max_open_duration(timedelta(hours=4))
        .build()
    )
    close = LedgerCloseContext.builder().because_inactive().expect_delete_after(
        datetime.fromtimestamp(1615839671, timezone.utc)
    ).build()
    custom = create.to_custom_metadata()
    custom[CLOSE_KEY] = close.to_bytes()
    custom[SEAL_TIME_KEY] = b"1615827501000"
    md = LedgerMetadata(
        ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, state=LedgerState.CLOSED, last_entry_id=0, length=1,
        ensembles={0: ("127.0.0.1:3181",)}, custom_metadata=custom, ctime=1615815339000, store_ctime=True,
    )
    with ZkMetadataStore(zk_root.metadata_service_uri) as store:
        store.create_ledger_metadata(100456, md, scope_id=9)
    uri = zk_root.metadata_service_uri
    name = qualified_name(9, 100456)

    code, out, err = shell(capsys, uri, "showowner", "--ledger-qualified-name", name)
    assert code == 0 and err == ""
    assert out == (
        "{\n"
        '    "createdBy" : {\n'
        '        "enterprise" : "Company X",\n'
        '        "system" : "System y",\n'
        '        "service" : "service.z",\n'
        '        "instance" : "host1.z.companyx.com"\n'
        "    },\n"
        '    "onBehalfOf" : null,\n'
        '    "dataSet" : "persistent://public/default/test_topic"\n'
        "}\n"
    )
    code, out, err = shell(capsys, uri, "predictlifespan", "100456", "--ledger-scope-id", "9", "--json")
    assert json.loads(out) == {
        "createTime": 1615815339,
        "expectedSealTime": 1615829739,
        "actualSealTime": 1615827501,
        "expectedReadUntilTime": None,
        "expectedDeleteTime": 1615839671,
    }
    # Scope 0 has no ledger 100456.
    code, out, err = shell(capsys, uri, "showowner", "100456")
    assert code == 1 and "no such ledger" in err
    code, out, _ = shell(capsys, uri, "listledgers", "--ledger-scope-id", "9")
    assert out.strip() == f"ledgerID: 100456 (scope 9, {name})"


@pytest.mark.parametrize(
    "argv",
    [
        ["showowner", "77"],
        ["predictlifespan", "77"],
        ["ledgermetadata", "-l", "77"],
        ["deleteledger", "-l", "77", "-f"],
        ["showowner", "--ledger-qualified-name", "0" * 15 + "1" + "0" * 14 + "4d"],
    ],
)
def test_unknown_ledger_is_one_line_exit_1(zk_root, capsys, argv) -> None:
    code, out, err = shell(capsys, zk_root.metadata_service_uri, *argv)
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "no such ledger" in err and "Traceback" not in err


def test_a_root_that_is_not_a_cluster_is_one_line(zookeeper, capsys) -> None:
    uri = f"zk+hierarchical://{zookeeper.connect_string}/no-such-cluster-root"
    for argv in (["listledgers"], ["listorphaned"], ["showowner", "1"], ["auditconfig"]):
        code, out, err = shell(capsys, uri, *argv)
        assert code == 1 and "not a BookKeeper cluster root" in err and len(err.strip().splitlines()) == 1


def test_console_script_reports_bad_input_without_traceback(zk_root) -> None:
    cases = [
        (["shell", "showowner", "--ledger-qualified-name", "nothex"], 2, "bad ledger qualified name"),
        (["shell", "showowner", "12345678"], 1, "no such ledger"),
        (["shell", "readledger", "-l", "x"], 2, "bad ledger id"),
        (["shell", "listbookies", "--bogus"], 2, "unrecognized arguments"),
    ]
    for argv, status, fragment in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "bkspark.cli", *argv, "--metadata-service-uri", zk_root.metadata_service_uri],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )
        assert proc.returncode == status, (argv, proc.stderr)
        assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1 and fragment in proc.stderr


class Terminal(io.StringIO):
    """Typed answers on stdin that claim to come from a terminal (what ``deleteledger`` asks on)."""

    def isatty(self) -> bool:
        return True


def test_deleteledger_asks_on_a_terminal_and_without_one_refuses_unless_forced(zk_root, capsys, monkeypatch) -> None:
    """docs/shell.md: deleteledger asks `Are you sure to delete Ledger : N? (Y or N)` on a terminal; without a
    terminal it refuses unless -f. Neither a refusal nor an "N" deletes anything."""
    uri = zk_root.metadata_service_uri
    md = LedgerMetadata(
        ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, state=LedgerState.CLOSED, last_entry_id=-1, length=0,
        ensembles={0: ("127.0.0.1:3181",)},
    )
    with ZkMetadataStore(uri) as store:
        store.create_ledger_metadata(4242, md)

        monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # not a terminal
        code, out, err = shell(capsys, uri, "deleteledger", "-l", "4242")
        assert code != 0 and out == "" and len(err.strip().splitlines()) == 1 and "-f" in err
        assert store.read_ledger_metadata(4242).metadata.state == LedgerState.CLOSED

        monkeypatch.setattr(sys, "stdin", Terminal("N\n"))
        code, out, err = shell(capsys, uri, "deleteledger", "-l", "4242")
        assert out.startswith("Are you sure to delete Ledger : 4242? (Y or N)") and code != 0
        assert store.read_ledger_metadata(4242).metadata.state == LedgerState.CLOSED

        monkeypatch.setattr(sys, "stdin", Terminal(""))  # Ctrl-D at the question: no answer, no traceback
        code, out, err = shell(capsys, uri, "deleteledger", "-l", "4242")
        assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) <= 1
        assert store.read_ledger_metadata(4242).metadata.state == LedgerState.CLOSED

        monkeypatch.setattr(sys, "stdin", Terminal("Y\n"))
        code, out, err = shell(capsys, uri, "deleteledger", "4242")
        assert code == 0 and out.startswith("Are you sure to delete Ledger : 4242? (Y or N)") and err == ""
        with pytest.raises(NoSuchLedgerMetadataError):
            store.read_ledger_metadata(4242)


def test_listledgers_meta_and_bookieid_and_ledgermetadata_json(zk_root, capsys) -> None:
    """docs/shell.md: `listledgers -m` adds Java's LedgerMetadataImpl.toString line with the password omitted and
    custom metadata as text or `base64:`, with progress on stderr while reading metadata; `-bookieid` keeps the ledgers with that bookie in any ensemble;
    `ledgermetadata --json` gives every field with custom metadata base64 and the decoded context."""
    uri = zk_root.metadata_service_uri
    create = LedgerCreateContext.builder().part_of_data_set("ds").build()

    def md(ensembles: dict[int, tuple[str, ...]], custom: dict[str, bytes]) -> LedgerMetadata:
        return LedgerMetadata(
            ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, state=LedgerState.CLOSED, last_entry_id=9,
            length=90, ensembles=ensembles, custom_metadata=custom, password=b"s3cret-pw",
        )

    with ZkMetadataStore(uri) as store:
        store.create_ledger_metadata(11, md({0: ("10.0.0.1:3181",)}, {"app": b"demo", "bin": b"\x00\xff"}))
        ensembles = {0: ("10.0.0.2:3181",), 5: ("10.0.0.3:3181",)}
        store.create_ledger_metadata(12, md(ensembles, create.to_custom_metadata()))

    code, out, err = shell(capsys, uri, "listledgers", "-m", "--no-progress")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "ledgerID: 11" and lines[2] == "ledgerID: 12" and len(lines) == 4
    assert lines[1] == (
        "LedgerMetadata{formatVersion=3, ensembleSize=1, writeQuorumSize=1, ackQuorumSize=1, state=CLOSED, length=90, "
        "lastEntryId=9, digestType=CRC32C, password=OMITTED, ensembles={0=[10.0.0.1:3181]}, "
        "customMetadata={app=demo, bin=base64:AP8=}}"
    )
    assert "s3cret" not in out
    code, with_progress, err = shell(capsys, uri, "listledgers", "-m", "--progress")  # progress: stderr only
    assert code == 0 and with_progress == out and "reading ledger metadata" in err and "2/2" in err
    for bookie, expected in (("10.0.0.1:3181", [11]), ("10.0.0.3:3181", [12]), ("10.0.0.9:3181", [])):
        rows = json.loads(shell(capsys, uri, "listledgers", "-bookieid", bookie, "--json")[1])
        assert [r["ledgerId"] for r in rows] == expected, bookie

    doc = json.loads(shell(capsys, uri, "ledgermetadata", "-l", "12", "--json")[1])
    assert {k: doc[k] for k in ("ledgerId", "state", "ensembleSize", "lastEntryId", "length", "ensembles")} == {
        "ledgerId": 12, "state": "CLOSED", "ensembleSize": 1, "lastEntryId": 9, "length": 90,
        "ensembles": {"0": ["10.0.0.2:3181"], "5": ["10.0.0.3:3181"]},
    }
    assert doc["customMetadata"] == {"bkspark.ctx.create": base64.b64encode(create.to_bytes()).decode()}
    assert doc["context"]["create"] == create.to_json() and "s3cret" not in json.dumps(doc)
