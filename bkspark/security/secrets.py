"""Secrets that never print: the names of :mod:`bkspark.config.secrets`, where they live.

They moved below the protocol layer (the SASL codec in :mod:`bkspark.protocol.sasl` holds passwords as
:class:`Secret`); this module keeps the security package's spelling for its callers.
"""

from bkspark.config.secrets import MASK, Secret, read_password_file, secret_from

__all__ = ["Secret", "MASK", "read_password_file", "secret_from"]
