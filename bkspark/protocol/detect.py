"""Per-connection v2/v3 detection, decided exactly as the Java bookie decides it.

``BookieProtoEncoding.RequestDecoder`` (docs/protocol.md §1) starts every
connection in v3 mode and parses each frame body as a protobuf ``Request``; the
first frame that protobuf-java refuses flips the connection to v2 for good, and
that frame and every later one are decoded as v2.

A v2 body starts with its version byte (0, 1 or 2; a legacy version-0 header is
the opcode as an int, so it starts with 0x00 too).  Read as a protobuf tag, any
first byte below 0x08 names field number 0, which protobuf rejects: every v2
frame classifies as v2 without ever reaching the protobuf parser.  Everything
else goes through :func:`bkspark.protocol.v3.decode_request`, which accepts
exactly what protobuf-java accepts with BookKeeper's schema (required fields
checked, our extension fields treated as unknown when broken).
"""

from __future__ import annotations

from typing import Literal

from bkspark.errors import MalformedFrameError
from bkspark.protocol import v3
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb

__all__ = ["ProtocolDetector", "Version"]

Version = Literal["v3", "v2"]

# A first byte below this is a tag with field number 0: never a valid protobuf message.
_FIRST_VALID_TAG_BYTE = 0x08


class ProtocolDetector:
    """Sticky v3-then-v2 classification of one connection's request frames."""

    __slots__ = ("_version",)

    def __init__(self) -> None:
        self._version: Version = "v3"

    @property
    def version(self) -> Version:
        """The connection's mode now: "v3" until a frame failed to parse as v3."""
        return self._version

    def parse(self, body: v3.Buffer) -> pb.Request | None:
        """Classify ``body`` and, in v3 mode, return its parsed Request (None means v2).

        Use this instead of :meth:`classify` followed by ``v3.decode_request`` to parse
        each v3 frame once.  A None result is sticky: every later frame is v2.
        """
        if self._version == "v2":
            return None
        if len(body) == 0 or body[0] < _FIRST_VALID_TAG_BYTE:
            self._version = "v2"
            return None
        try:
            return v3.decode_request(body)
        except MalformedFrameError:
            self._version = "v2"
            return None

    def classify(self, body: v3.Buffer) -> Version:
        """ "v3" or "v2" for this frame body, updating the connection's sticky mode."""
        return "v2" if self.parse(body) is None else "v3"
