"""Pulsar's payload codecs (``CompressionType`` of ``MessageMetadata``), through cramjam.

Each codec is what Pulsar's ``CompressionCodec*`` classes write: a raw block or stream whose uncompressed size
travels in the message's metadata, not a framed file: LZ4 is an LZ4 *block* (no frame header), ZLIB a zlib stream
(``Deflater``'s default), ZSTD a Zstandard frame, SNAPPY a raw Snappy block (no framing format).
"""

from __future__ import annotations

from typing import Callable

from bkspark.pulsar.errors import PulsarEntryError

__all__ = ["NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY", "CODEC_NAMES", "decompress"]

NONE, LZ4, ZLIB, ZSTD, SNAPPY = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "NONE", LZ4: "LZ4", ZLIB: "ZLIB", ZSTD: "ZSTD", SNAPPY: "SNAPPY"}


def _lz4(data: bytes | memoryview, size: int) -> bytes:
    import cramjam

    return bytes(cramjam.lz4.decompress_block(data, output_len=size))


def _zlib(data: bytes | memoryview, size: int) -> bytes:
    import zlib

    return zlib.decompress(data, bufsize=max(size, 1))


def _zstd(data: bytes | memoryview, size: int) -> bytes:
    import cramjam

    return bytes(cramjam.zstd.decompress(data, output_len=size))


def _snappy(data: bytes | memoryview, size: int) -> bytes:
    import cramjam

    return bytes(cramjam.snappy.decompress_raw(data, output_len=size))


_DECODERS: dict[int, Callable[[bytes | memoryview, int], bytes]] = {
    LZ4: _lz4, ZLIB: _zlib, ZSTD: _zstd, SNAPPY: _snappy,
}


def decompress(codec: int, data: bytes | memoryview, uncompressed_size: int) -> bytes | memoryview:
    """The payload as the producer gave it: ``data`` itself for ``NONE``; a :class:`PulsarEntryError` for an
    unknown codec, bytes that do not decompress, or a result of another size than the metadata says."""
    if codec == NONE:
        return data
    decoder = _DECODERS.get(codec)
    if decoder is None:
        raise PulsarEntryError(f"unknown Pulsar compression type {codec}")
    try:
        out = decoder(data, uncompressed_size)
    except Exception as exc:  # noqa: BLE001 - each library has its own error types
        raise PulsarEntryError(
            f"{CODEC_NAMES[codec]} payload does not decompress ({type(exc).__name__}: {exc})"
        ) from None
    if len(out) != uncompressed_size:
        raise PulsarEntryError(
            f"{CODEC_NAMES[codec]} payload decompressed to {len(out)} bytes, its metadata says {uncompressed_size}"
        )
    return out
