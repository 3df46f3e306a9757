"""``bkspark.client.arrow``: the Arrow form of entries read back, and the client without pyarrow."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from array import array

import pyarrow as pa
import pytest

from bkspark.client.arrow import binary_array, payload_batch, payload_runs_batch
from bkspark.client.payloads import PackedPayloads, payload_bytes
from bkspark.errors import InvalidOptionError


def test_payload_batch_from_bytes_and_views() -> None:
    frame = b"..hello..world"
    view = memoryview(frame)
    payloads = [b"", b"abc", view[2:7], view[9:14]]
    batch = payload_batch(41, payloads)
    assert batch.schema.names == ["entry_id", "payload"]
    assert batch.schema.field("entry_id").type == pa.int64()
    assert batch.column(0).to_pylist() == [41, 42, 43, 44]
    assert batch.column(1).to_pylist() == [b"", b"abc", b"hello", b"world"]
    batch.validate(full=True)
    assert len(binary_array([])) == 0


def packed(payloads: list[bytes]) -> PackedPayloads:
    bounds = array("q", [0])
    for p in payloads:
        bounds.append(bounds[-1] + len(p))
    return PackedPayloads(b"".join(payloads), bounds)


def test_runs_become_the_payload_column_with_one_copy_at_most() -> None:
    """payload_runs_batch: one run's buffer is the column's data (no copy), a slice of a run keeps its first
    offset, several runs are joined once; lists among them take the gather; all equal payload_batch's."""
    a = [b"alpha", b"", b"beta", b"g" * 300]
    b = [b"x", b"yy"]
    c = [b"", b"zzz"]
    run = packed(a)
    one = payload_runs_batch(7, [run])
    assert one.column(1).buffers()[2].address == pa.py_buffer(run.data).address  # the run's own bytes
    cases = [
        ([run], a),
        ([run[1:3]], a[1:3]),
        ([run[2:], packed(b), packed(c)[1:]], a[2:] + b + c[1:]),
        ([packed(b), list(c), run[:1]], b + c + a[:1]),
        ([packed([]), packed(b)], b),
    ]
    for pieces, want in cases:
        batch = payload_runs_batch(7, pieces)
        batch.validate(full=True)
        assert batch.column(0).to_pylist() == list(range(7, 7 + len(want)))
        assert batch.column(1).to_pylist() == want
        assert batch.equals(payload_batch(7, want))
    assert payload_runs_batch(3, []).num_rows == 0


def test_packed_runs_count_their_bytes_without_a_pass_per_payload() -> None:
    assert payload_bytes(packed([b"", b"defg"])[1:]) == 4 and payload_bytes([b"ab", b"c"]) == 3


def test_runs_over_2_gib_are_refused_clearly() -> None:
    huge = PackedPayloads._sharing(b"", memoryview(array("q", [0, 1 << 31])), 1 << 31)
    with pytest.raises(InvalidOptionError, match="do not fit one Arrow binary array"):
        payload_runs_batch(0, [huge])


def test_the_client_imports_and_fails_clearly_without_pyarrow() -> None:
    """The base install has no pyarrow: importing the client works, read_batches' check names the extra."""
    code = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("pyarrow", "numpy"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import bkspark.client
        from bkspark.client.arrow import require_pyarrow
        from bkspark.errors import InvalidOptionError
        try:
            require_pyarrow()
        except InvalidOptionError as exc:
            print("REFUSED", "bkspark[arrow]" in str(exc))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "REFUSED True", out.stderr


def test_read_batches_defaults_are_the_documented_ones() -> None:
    """docs/client.md: ``read_batches(first, last, batch_size=100, max_size=0, bytes_in_flight=8 MiB, batch=True,
    rows_per_group=10_000, bytes_per_group=64 MiB)``; docs/connector.md: the Spark reader's Arrow batches hold at most
    10,000 rows and about 64 MiB of payload, the same bounds."""
    import inspect

    from bkspark.client.aio import AsyncReadHandle
    from bkspark.datasource import reader, schema

    params = inspect.signature(AsyncReadHandle.read_payload_runs).parameters
    defaults = {name: p.default for name, p in params.items() if p.default is not inspect.Parameter.empty}
    mib = 1024 * 1024
    assert defaults == {"batch_size": 100, "max_size": 0, "bytes_in_flight": 8 * mib, "batch": True,
                        "rows_per_group": 10_000, "bytes_per_group": 64 * mib}
    assert (reader.ROWS_PER_BATCH, schema.MAX_BATCH_PAYLOAD_BYTES) == (10_000, 64 * mib)
