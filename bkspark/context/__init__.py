"""Ledger create and close context (this project's BP-44): who made a ledger, why it closed, when it may go.

Two modules: :mod:`bkspark.context.codec` (the contexts, their builders and
their encoding in ``customMetadata``; no I/O) and :mod:`bkspark.context.client`
(creating and closing ledgers with a context through the client).  Everything
both export is importable from here.  docs/context-and-audit.md is the
reference for the encoding.
"""

from bkspark.context.client import *  # noqa: F403 - the package's public face
from bkspark.context.client import __all__ as _client_all
from bkspark.context.codec import *  # noqa: F403
from bkspark.context.codec import __all__ as _codec_all

__all__ = [*_codec_all, *_client_all]
