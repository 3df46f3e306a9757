"""Every exception bkspark raises, in one place.

Bookie return codes map to one class each, registered by their v2 ``rc`` and
v3 ``StatusCode`` (as kazoo registers ZooKeeper codes).  Each class also
carries the Java client's ``BKException.Code`` so messages and logs line up
with what a BookKeeper user already knows, and flags that say what to do,
read by the code that decides instead of matching on types (as aiokafka's
``retriable`` / ``invalid_metadata``):

* ``retriable``: trying again (on the same or another bookie, or after
  re-reading the metadata) can succeed; :mod:`bkspark.retry` policies retry
  exactly these;
* ``ends_writes``: a ledger writer that gets it stops (fails every pending
  and later add) instead of replacing the bookie that answered: no ensemble
  change can help (fenced, wrong password, closed);
* ``invalidates_client``: a long-lived client (the connector's cached one)
  may hold stale connections or sessions after it: start a fresh one.

:func:`is_retriable`, :func:`ends_writes` and :func:`invalidates_client` read
them for any exception (False for what is not a :class:`BKError`).

Errors say whose fault it was (as h11 does): :class:`ProtocolError` means a
peer sent bytes that break the protocol; :class:`LocalProtocolError` means our
own caller asked for something the protocol cannot express.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "BKError",
    "ProtocolError",
    "FrameTooLargeError",
    "MalformedFrameError",
    "UnknownOpcodeError",
    "LocalProtocolError",
    "BookieError",
    "NoSuchLedgerError",
    "NoSuchEntryError",
    "BadRequestError",
    "BookieIOError",
    "UnauthorizedAccessError",
    "ProtocolVersionError",
    "LedgerFencedError",
    "WriteOnReadOnlyBookieError",
    "TooManyRequestsError",
    "DataUnknownError",
    "DigestMismatchError",
    "CorruptEntryError",
    "IllegalOpError",
    "NotEnoughBookiesError",
    "LedgerClosedError",
    "LedgerExistsError",
    "MetadataError",
    "MetadataVersionError",
    "NoSuchLedgerMetadataError",
    "BadMetadataError",
    "BadLedgerContextError",
    "BookieUnavailableError",
    "BookieTimeoutError",
    "AddEntryQuorumTimeoutError",
    "InvalidBookieIdError",
    "CookieMismatchError",
    "CorruptJournalError",
    "InvalidOptionError",
    "InvalidRowError",
    "MisspelledSecurityKeyError",
    "InvalidTopologyError",
    "ClientClosedError",
    "LocalClusterError",
    "SecurityError",
    "TlsHandshakeError",
    "AuthenticationError",
    "error_for_rc",
    "error_for_status",
    "rc_for_error",
    "status_for_error",
    "EntryTooLargeError",
    "is_retriable",
    "ends_writes",
    "invalidates_client",
    "one_line",
]


class BKError(Exception):
    """Base of every bkspark error.

    ``code`` is the Java client's ``BKException.Code`` for the same condition
    (0 where Java has none); ``retriable`` says whether trying again (on the
    same or another bookie) can succeed.
    """

    code: ClassVar[int] = -999  # BKException.Code.UnexpectedConditionException
    retriable: ClassVar[bool] = False
    ends_writes: ClassVar[bool] = False
    invalidates_client: ClassVar[bool] = False

    def __init__(self, message: str = "", **context: object) -> None:
        self.context = context
        if context:
            details = ", ".join(f"{k}={v!r}" for k, v in context.items())
            message = f"{message} ({details})" if message else details
        super().__init__(message or self.__class__.__doc__.strip().splitlines()[0])


# --------------------------------------------------------------------------
# Bytes that break the protocol (the peer's fault) or a request the protocol
# cannot express (our caller's fault).


class ProtocolError(BKError):
    """A peer sent bytes that do not follow the BookKeeper wire protocol."""

    code = -2  # ReadException-like: the connection is no longer usable


class FrameTooLargeError(ProtocolError):
    """A frame is larger than nettyMaxFrameSizeBytes allows."""


class MalformedFrameError(ProtocolError):
    """A frame body could not be decoded (truncated, bad field, bad protobuf)."""


class UnknownOpcodeError(ProtocolError):
    """A v2 packet names an opcode the codec does not handle."""


class LocalProtocolError(BKError):
    """Our caller asked for something the protocol cannot express."""


# --------------------------------------------------------------------------
# Bookie return codes.  v2 sends an int32 ``rc``; v3 a ``StatusCode``.

_BY_V2_RC: dict[int, type["BookieError"]] = {}
_BY_V3_STATUS: dict[int, type["BookieError"]] = {}


class BookieError(BKError):
    """A bookie answered a request with a non-OK return code."""

    invalidates_client = True

    v2_rc: ClassVar[int | None] = None
    v3_status: ClassVar[int | None] = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.v2_rc is not None:
            _BY_V2_RC[cls.v2_rc] = cls
        if cls.v3_status is not None:
            _BY_V3_STATUS[cls.v3_status] = cls


class NoSuchLedgerError(BookieError):
    """The bookie has no such ledger (ENOLEDGER)."""

    v2_rc, v3_status, code = 1, 402, -7


class NoSuchEntryError(BookieError):
    """The bookie has no such entry (ENOENTRY)."""

    v2_rc, v3_status, code = 2, 403, -13


class BadRequestError(BookieError):
    """The bookie rejected the request as malformed or unsupported (EBADREQ)."""

    v2_rc, v3_status, code = 100, 404, -1


class BookieIOError(BookieError):
    """The bookie hit an I/O error (EIO)."""

    v2_rc, v3_status, code, retriable = 101, 501, -1, True


class UnauthorizedAccessError(BookieError):
    """Wrong ledger password / master key, or an unauthenticated connection (EUA)."""

    v2_rc, v3_status, code = 102, 502, -102
    ends_writes = True


class ProtocolVersionError(BookieError):
    """The bookie does not speak this protocol version (EBADVERSION)."""

    v2_rc, v3_status, code = 103, 503, -16


class LedgerFencedError(BookieError):
    """The ledger is fenced: a recovery took it over, adds are refused (EFENCED)."""

    v2_rc, v3_status, code = 104, 504, -101
    ends_writes = True


class WriteOnReadOnlyBookieError(BookieError):
    """The bookie is read-only and refuses adds (EREADONLY)."""

    v2_rc, v3_status, code, retriable = 105, 505, -104, True


class TooManyRequestsError(BookieError):
    """The bookie is overloaded (ETOOMANYREQUESTS)."""

    v2_rc, v3_status, code, retriable = 106, 506, -105, True


class DataUnknownError(BookieError):
    """The bookie does not know whether it has the ledger (EUNKNOWNLEDGERSTATE)."""

    v2_rc, v3_status, code, retriable = 107, 507, -108, True


def error_for_rc(rc: int) -> type[BookieError]:
    """The exception class for a v2 ``rc`` (unknown codes map to BookieError)."""
    return _BY_V2_RC.get(rc, BookieError)


def error_for_status(status: int) -> type[BookieError]:
    """The exception class for a v3 ``StatusCode`` (unknown codes map to BookieError)."""
    return _BY_V3_STATUS.get(status, BookieError)


def rc_for_error(error: BaseException) -> int:
    """The v2 ``rc`` a bookie sends for ``error`` (EBADREQ where none fits)."""
    rc = getattr(error, "v2_rc", None)
    return rc if isinstance(rc, int) else BadRequestError.v2_rc  # type: ignore[return-value]


def status_for_error(error: BaseException) -> int:
    """The v3 ``StatusCode`` a bookie sends for ``error`` (EBADREQ where none fits)."""
    status = getattr(error, "v3_status", None)
    return status if isinstance(status, int) else BadRequestError.v3_status  # type: ignore[return-value]


# --------------------------------------------------------------------------
# Client-side conditions (no bookie return code).


class DigestMismatchError(BKError):
    """An entry's digest, ledger id or entry id does not match what was asked for."""

    code, retriable = -5, True


class CorruptEntryError(BKError):
    """An entry's bytes do not have the format its ledger's metadata declares (e.g. packed rows,
    docs/connector.md "Rows per entry"): reading it again gives the same bytes."""


class IllegalOpError(BKError):
    """The operation is not allowed here (e.g. a scope id != 0 over the v2 protocol)."""

    code, ends_writes = -100, True


class EntryTooLargeError(BKError, ValueError):
    """An entry cannot fit one frame of ``nettyMaxFrameSizeBytes``: refused before it is sent.

    The ledger stays writable and no bookie is blamed (every bookie would drop
    the connection on such a frame).
    """

    code = -2  # Java's client fails such an add locally too (its encoder refuses the frame)


class NotEnoughBookiesError(BKError):
    """Not enough writable bookies to form or repair the ensemble."""

    code, retriable = -6, True


class LedgerClosedError(BKError):
    """The ledger is closed (or this handle was closed) and takes no more adds."""

    code, ends_writes = -11, True


class LedgerExistsError(BKError):
    """A ledger with this id already exists."""

    code = -20


class MetadataError(BKError):
    """The metadata store (ZooKeeper) failed or holds something unexpected."""

    code, retriable, invalidates_client = -9, True, True


class MetadataVersionError(MetadataError):
    """Compare-and-set on ledger metadata lost against a concurrent update."""

    code, retriable, invalidates_client = -17, True, False


class NoSuchLedgerMetadataError(MetadataError):
    """No ledger metadata exists for this ledger id."""

    code, retriable, invalidates_client = -25, False, False


class BadMetadataError(MetadataError):
    """Stored metadata (ledger, cookie, layout, service info) cannot be parsed."""

    code, retriable, invalidates_client = -999, False, False


class BadLedgerContextError(BadMetadataError):
    """A ledger's create/close context in customMetadata cannot be parsed (BP-44, docs/context-and-audit.md)."""

    code, retriable = -999, False


class BookieUnavailableError(BKError):
    """The bookie cannot be reached or its BookieId cannot be resolved."""

    code, retriable, invalidates_client = -8, True, True


class BookieTimeoutError(BookieUnavailableError):
    """The bookie did not answer in time."""

    code, retriable = -23, True


class AddEntryQuorumTimeoutError(BKError):
    """An add did not reach its ack quorum within ``addEntryQuorumTimeoutSec`` (Java's
    ``BKAddEntryQuorumTimeoutException``): the writer stops, failing it and every add behind it, as Java's
    ledger handle does."""

    code, retriable, ends_writes = -21, False, True


class InvalidBookieIdError(BKError):
    """A string is not a valid BookieId (BP-41 rules)."""

    code = -999


class CookieMismatchError(BKError):
    """The bookie's cookie in ZooKeeper or its directories does not match its config."""

    code = -999


class InvalidOptionError(BKError, ValueError):
    """A configuration or data source option has a bad value."""

    code = -999


class InvalidRowError(BKError, ValueError):
    """A row of a DataFrame to write has a value the writer cannot take (e.g. a ``dataset`` column naming no
    valid dataset); ``context`` names the column, the row and the value."""

    code = -999


class MisspelledSecurityKeyError(InvalidOptionError):
    """An unknown configuration key one edit away from a security key: refused, since ignoring it would run the
    job without the TLS or authentication its author asked for (docs/security.md, "Nothing silently ignored").

    ``key`` is the key as given, ``meant`` the security key it probably names.
    """

    def __init__(self, key: str, meant: str, role: str = "client") -> None:
        super().__init__(
            f"unknown {role} configuration key {key!r} looks like the security key {meant!r} misspelled: "
            "refused, so that TLS or authentication is not silently left off (correct the key)",
        )
        self.key = key
        self.meant = meant


class InvalidTopologyError(BKError, ValueError):
    """A network location is malformed or at another depth than the topology's leaves."""

    code = -999


class LocalClusterError(BKError, RuntimeError):
    """A local server (ZooKeeper, bookie) of a dev cluster or the test harness did not start, answer or stop."""

    code = -999


class SecurityError(BKError):
    """TLS or authentication is misconfigured, or the peer refused it (Java's SecurityException)."""

    code = -24


class TlsHandshakeError(SecurityError, BookieUnavailableError):
    """The TLS upgrade with a bookie failed (untrusted certificate, no client certificate, START_TLS refused)."""

    code, retriable = -24, False


class AuthenticationError(SecurityError, BookieUnavailableError):
    """A bookie refused our SASL credentials, or we refused its proof, or we have none to offer (a Kerberos
    ticket we cannot get): Java's UnauthorizedAccessException, which closes the ledger a writer holds
    (another bookie would not take credentials this one refused)."""

    code, retriable, ends_writes = -102, False, True


class ClientClosedError(BKError):
    """The client was closed and can do no more work."""

    code, ends_writes, invalidates_client = -19, True, True


def is_retriable(error: BaseException) -> bool:
    """Whether trying again can succeed (the ``retriable`` flag; False for non-bkspark errors)."""
    return isinstance(error, BKError) and error.retriable


def ends_writes(error: BaseException) -> bool:
    """Whether a ledger writer must stop on ``error`` rather than replace the bookie that answered."""
    return isinstance(error, BKError) and error.ends_writes


def invalidates_client(error: BaseException) -> bool:
    """Whether a cached client should be dropped after ``error`` (its connections or session may be stale)."""
    return isinstance(error, BKError) and error.invalidates_client


class CorruptJournalError(BKError):
    """A bookie journal holds a damaged record that is not a torn tail: replaying past it would lose data."""


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (a command's errors are one line on stderr): for the CLI and the bookie."""
    return " ".join(str(exc).split()) or type(exc).__name__
