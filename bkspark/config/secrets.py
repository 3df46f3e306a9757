"""Secrets that never print: passwords held in a :class:`Secret`, read from files or environment variables.

A :class:`Secret`'s ``repr``/``str`` are a fixed mask, so a secret that ends up in a log line, an
exception's context, a dataclass ``repr`` or Spark's plan output shows ``'***'``; only
:meth:`Secret.reveal` gives the value, at the one place that needs it.
"""

from __future__ import annotations

import os

from bkspark.errors import InvalidOptionError

__all__ = ["Secret", "MASK", "read_password_file", "secret_from"]

MASK = "***"


class Secret:
    """A password or key; prints as ``***``; picklable (Spark ships options to executors)."""

    __slots__ = ("_value",)

    def __init__(self, value: str | bytes) -> None:
        self._value = value

    def reveal(self) -> str | bytes:
        """The secret itself (use it, never log it)."""
        return self._value

    def reveal_bytes(self) -> bytes:
        """The secret as UTF-8 bytes."""
        v = self._value
        return v if isinstance(v, bytes) else v.encode("utf-8")

    def __repr__(self) -> str:
        return MASK

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __bool__(self) -> bool:
        return bool(self._value)

    def __reduce__(self) -> tuple[type, tuple[str | bytes]]:
        return (Secret, (self._value,))


def read_password_file(path: str) -> Secret:
    """The password in ``path`` (BookKeeper's ``*PasswordPath`` files): its bytes, one trailing newline dropped."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise InvalidOptionError("cannot read the password file", path=path, error=exc.strerror) from None
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    return Secret(data.decode("utf-8"))


def secret_from(*, value: str | None = None, file: str | None = None, env: str | None = None, what: str) -> Secret | None:
    """Exactly one of a plain value, a file path or an environment variable name, as a :class:`Secret`."""
    given = [name for name, v in (("value", value), ("file", file), ("env", env)) if v not in (None, "")]
    if len(given) > 1:
        raise InvalidOptionError(f"give {what} one way only", given=given)
    if file:
        return read_password_file(file)
    if env:
        if env not in os.environ:
            raise InvalidOptionError(f"environment variable for {what} is not set", variable=env)
        return Secret(os.environ[env])
    if value not in (None, ""):
        return Secret(value)  # type: ignore[arg-type]
    return None
