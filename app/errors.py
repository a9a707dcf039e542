"""The domain's own errors: what went wrong, in the service's words, with no HTTP in them.

Domain code (stores, services, parsers, the compute front doors) raises these; ``app.web.errors`` alone maps each
kind to a status code and the error envelope, so a capability reads the same whichever door it is called through
(an HTTP route, a batch worker, the command line). ``details`` carries the contract's field/issue/provided keys
where one input is at fault.
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """Base of every outcome the service reports to its caller as an error."""

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class MalformedInput(ServiceError):
    """The input cannot be read as what it claims to be (syntax, shape, types)."""


class InputTooLarge(MalformedInput):
    """The input is over a documented size limit."""


class UnsupportedFormat(MalformedInput):
    """The input comes in an encoding or format the service does not take."""


class InvalidInput(ServiceError):
    """The input reads fine but its values break a documented rule (lengths, ranges, order, caps)."""


class NotFound(ServiceError):
    """The named thing does not exist for this caller."""


class NotPermitted(ServiceError):
    """The caller may not do this (a missing permission, another account's resource)."""


class Conflict(ServiceError):
    """The request contradicts the current state of what it names (a duplicate, a finished job)."""


class Unavailable(ServiceError):
    """A dependency (database, job engine, compute workers) did not answer."""
