"""Bookie configuration: :mod:`bkspark.config.bookie`'s names, under the server's own spelling.

The settings live under ``bkspark`` so that the shell (``bkspark shell bookieformat``) reads a bookie's
configuration without importing the server (docs/architecture.md, "Layers").
"""

from bkspark.config.bookie import BookieConfig, load_conf, parse_conf_text

__all__ = ["BookieConfig", "parse_conf_text", "load_conf"]
