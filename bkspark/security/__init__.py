"""Security settings shared by the client, the bookie and the tools: TLS, SASL, ZooKeeper auth (secrets that never
print are :mod:`bkspark.config.secrets`).

See docs/security.md.
"""
