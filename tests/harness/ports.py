"""Free ports for the harness: see :mod:`bkspark.devcluster.ports`."""

from bkspark.devcluster.ports import free_port, port_is_open

__all__ = ["free_port", "port_is_open"]
