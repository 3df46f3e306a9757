"""Configuration shared by every part of bkspark: typed keys and values, secrets, the bookie's settings.

* :mod:`bkspark.config.typed` -- the rules for reading a BookKeeper-style mapping (key lookup, booleans,
  conversion, "an int, not a bool", the ledger defaults);
* :mod:`bkspark.config.secrets` -- passwords that never print (:class:`~bkspark.config.secrets.Secret`);
* :mod:`bkspark.config.bookie` -- a bookie's settings (``bk_server.conf``), read by the bookie and by the shell.

Bottom layer: these modules import only :mod:`bkspark.errors` and :mod:`bkspark.properties`, so the protocol
codecs, the security settings, the client and the bookie all import them without a back-arrow
(docs/architecture.md, "Layers").
"""
