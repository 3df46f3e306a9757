"""Reading Apache Pulsar topics straight from the bookies (docs/pulsar.md).

Pulsar's own layering, kept: :mod:`bkspark.pulsar.entry` turns one BookKeeper entry a broker wrote into messages
(sans-IO, over bytes), :mod:`bkspark.pulsar.managed_ledger` parses a topic's managed-ledger znode, and
:mod:`bkspark.pulsar.topics` resolves topic names to their ledgers over ZooKeeper, reading only.  The Spark side
lives in :mod:`bkspark.datasource.pulsar_reader`.
"""
