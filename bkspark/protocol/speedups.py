"""Which path the protocol's two hottest loops take: the compiled one, when it was built, or pure Python.

The compiled module (``bkspark/protocol/_speedups.c``, built by ``pip install`` when a C compiler is there)
splits batch-read responses into items and checks CRC32C digests of scope-0 entries without a Python
statement per entry; the pure-Python code it replaces stays in ``v2.py`` and ``digest.py`` as the reference
that tests compare it with, and handles every case the compiled code hands back (docs/architecture.md,
"Compiled fast path").  ``BKSPARK_NO_EXTENSIONS=1`` in the environment turns the compiled path off, as
aiokafka's ``AIOKAFKA_NO_EXTENSIONS`` does.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["DISABLE_ENV", "speedups", "load_compiled"]

#: The environment variable that turns the compiled path off (any value but "" and "0").
DISABLE_ENV = "BKSPARK_NO_EXTENSIONS"


def load_compiled(module: str) -> ModuleType | None:
    """A compiled module of bkspark's (this one, ``bkspark.protocol._speedups``, or the bookie's
    ``bookie_server._speedups``), or None when
    the switch turns compiled paths off or the module was not built: the one home of that rule."""
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


#: What the codecs use, decided once at import.
speedups = load_compiled("bkspark.protocol._speedups")
