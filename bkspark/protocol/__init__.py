"""Sans-IO BookKeeper protocol: frames, v2/v3 codecs, entries and digests, metadata formats."""
