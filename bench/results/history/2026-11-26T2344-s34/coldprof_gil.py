"""coldprof.py of 2026-11-26T2010-s33 (py-spy of one Python bookie during a cold striped read), with py-spy keeping
only the samples that hold the GIL, by thread (``--gil --threads``); stacks to coldprof-bookie-gil.txt here. The
s33 script's own text is run with those two changes, so the set-up stays the one of that session."""
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "2026-11-26T2010-s33" / "coldprof.py"
code = SOURCE.read_text()
code = code.replace('OUT = Path(__file__).with_name("coldprof-bookie.txt")', f'OUT = Path({str(HERE / "coldprof-bookie-gil.txt")!r})')
code = code.replace('"--nonblocking"]', '"--nonblocking", "--gil", "--threads"]')
assert "--gil" in code and "coldprof-bookie-gil.txt" in code, "the s33 script changed: update the replacements"
exec(compile(code, str(SOURCE), "exec"), {"__name__": "__main__", "__file__": str(SOURCE)})
