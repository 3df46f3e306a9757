"""Security settings shared by the client, the bookie and the tools: TLS, SASL, ZooKeeper auth, secrets.

See docs/security.md.
"""
