"""Protobuf schemas of Apache Pulsar 4.0.7 (only the messages a reader of topics needs) and their generated
modules: ``make pulsar-proto`` regenerates them."""
