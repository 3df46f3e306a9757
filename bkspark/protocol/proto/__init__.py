"""Protobuf schemas (BookKeeper field numbers plus bkspark extensions) and their generated modules."""
