"""The domain's own errors: what went wrong, in the service's words, with no HTTP in them.

Domain code (stores, services, parsers, the compute front doors) raises these; ``app.web.errors`` alone maps each
kind to a status code and the error envelope, so a capability reads the same whichever door it is called through
(an HTTP route, a batch worker, the command line). ``details`` carries the contract's field/issue/provided keys
where one input is at fault; ``retry_after`` the seconds after which the same request may succeed, when known.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ServiceError(Exception):
    """Base of every outcome the service reports to its caller as an error; raised as itself, the service failed
    at something of its own (the same request may succeed later)."""

    # Whether the request itself is at fault, so sending it again unchanged fails again (a sender that retries
    # what failed, such as Prometheus' remote write, retries only the others).
    caller_at_fault: ClassVar[bool] = False

    def __init__(self, message: str, *, details: dict[str, Any] | None = None, retry_after: int | None = None
                 ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.retry_after = retry_after


class MalformedInput(ServiceError):
    """The request itself is wrong: unreadable, or a field of the wrong type, form or range, or fields that do
    not go together (the contract's request-shape problems)."""

    caller_at_fault = True


class InputTooLarge(MalformedInput):
    """The input is over a documented size limit."""

    @classmethod
    def over(cls, limit: int | None) -> InputTooLarge:
        """The body over ``limit`` bytes (MAX_BODY_BYTES or a route's own), named so a client knows how far to cut."""
        if limit is None:
            return cls("The request body is larger than the service accepts.")
        return cls(f"The request body is larger than the {size_text(limit)} the service accepts.")


def size_text(limit: int) -> str:
    """A byte count as a limit is written: whole KiB, MiB or GiB where it is one, else bytes."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if limit >= unit and limit % unit == 0:
            return f"{limit // unit} {name}"
    return f"{limit:,} bytes"


class UnsupportedFormat(MalformedInput):
    """The input comes in an encoding or format the service does not take."""


class TimedOut(MalformedInput):
    """The input did not arrive within the time the service gives a client to send it."""


class InvalidInput(ServiceError):
    """The input reads fine but its values break a documented rule (lengths, ranges, order, caps)."""

    caller_at_fault = True


class NotFound(ServiceError):
    """The named thing does not exist for this caller."""

    caller_at_fault = True


class NotPermitted(ServiceError):
    """The caller may not do this (a missing permission, another account's resource)."""

    caller_at_fault = True


class Conflict(ServiceError):
    """The request contradicts the current state of what it names (a duplicate, a finished job)."""

    caller_at_fault = True


class QuotaExceeded(ServiceError):
    """The caller holds or spent the most it may (monitors kept, requests per window); ``details`` names the limit,
    ``retry_after`` when room comes back by itself."""

    caller_at_fault = True


class Unavailable(ServiceError):
    """A dependency (database, job engine, compute workers) did not answer, or was too busy to take the work in
    time."""
