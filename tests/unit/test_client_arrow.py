"""``bkspark.client.arrow``: the Arrow form of entries read back, and the client without pyarrow."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa

from bkspark.client.arrow import binary_array, payload_batch


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
