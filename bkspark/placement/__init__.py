"""Ensemble placement: which bookies hold a ledger, and in which order to read them.

``policy_from_conf`` picks the policy named by ``ensemblePlacementPolicy``, the
key a BookKeeper client uses, so the same configuration works for both.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from bkspark.errors import InvalidOptionError
from bkspark.placement.base import EnsemblePlacementPolicy, PlacementResult, conf_get
from bkspark.placement.random_policy import RandomEnsemblePlacementPolicy

__all__ = [
    "EnsemblePlacementPolicy",
    "PlacementResult",
    "RandomEnsemblePlacementPolicy",
    "POLICY_KEY",
    "POLICY_NAMES",
    "policy_class",
    "policy_from_conf",
]

POLICY_KEY = "ensemblePlacementPolicy"

#: Accepted names -> "module:Class".  Java class names map to our equivalents.
POLICY_NAMES: dict[str, str] = {
    "random": "bkspark.placement.random_policy:RandomEnsemblePlacementPolicy",
    "default": "bkspark.placement.random_policy:RandomEnsemblePlacementPolicy",
    "rackaware": "bkspark.placement.rackaware:RackawareEnsemblePlacementPolicy",
    "regionaware": "bkspark.placement.regionaware:RegionAwareEnsemblePlacementPolicy",
    "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy":
        "bkspark.placement.random_policy:RandomEnsemblePlacementPolicy",
    "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy":
        "bkspark.placement.rackaware:RackawareEnsemblePlacementPolicy",
    "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicyImpl":
        "bkspark.placement.rackaware:RackawareEnsemblePlacementPolicy",
    "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy":
        "bkspark.placement.regionaware:RegionAwareEnsemblePlacementPolicy",
}


def _load(path: str) -> Any:
    """Import ``module:Class`` or ``module.Class``; None when it does not exist."""
    if ":" in path:
        module_name, _, attr = path.partition(":")
    else:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        return None
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    return getattr(module, attr, None)


def policy_class(name: str | type[EnsemblePlacementPolicy] | None) -> type[EnsemblePlacementPolicy]:
    """The policy class for a configured name (None or "" means the random default)."""
    if name is None or (isinstance(name, str) and not name.strip()):
        return RandomEnsemblePlacementPolicy
    if isinstance(name, type):
        cls: Any = name
    else:
        text = name.strip()
        target = POLICY_NAMES.get(text) or POLICY_NAMES.get(text.lower()) or text
        cls = _load(target)
    if not (isinstance(cls, type) and issubclass(cls, EnsemblePlacementPolicy)):
        raise InvalidOptionError(
            "unknown ensemble placement policy",
            key=POLICY_KEY,
            value=name,
            choices=sorted(POLICY_NAMES) + ["<python.module:Class>"],
        )
    return cls


def policy_from_conf(conf: Mapping[str, Any]) -> EnsemblePlacementPolicy:
    """A new policy of the class ``conf["ensemblePlacementPolicy"]`` names, initialized with ``conf``.

    Accepts BookKeeper's Java class names, our short names (``random``,
    ``rackaware``, ``regionaware``) and Python import paths; anything else is an
    :class:`InvalidOptionError` naming the key and the choices.
    """
    cls = policy_class(conf_get(conf, POLICY_KEY))
    return cls().initialize(conf)
