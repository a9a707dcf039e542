"""Who is calling: the HTTPS rule, the key's form and its state. The order of checks is app.web.pipeline's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from flask import request

from app.web.errors import Forbidden, Unauthorized
from app.web.observability import KEY_FORMAT as _KEY_FORMAT

if TYPE_CHECKING:
    from app.api_key import ApiKey
    from app.services import KeyLookup

_ACCEPTED_FORM = "Send the key as 'Authorization: Bearer <API_KEY>'."


def _refused(message: str, issue: str, field: str = "Authorization") -> Unauthorized:
    # The details name the header and the problem, never what was sent: it may be a real key.
    return Unauthorized(message, details={"field": field, "issue": issue})


def require_https() -> None:
    if request.scheme != "https":
        raise Forbidden("HTTPS is required.", details={"required_scheme": "https"})


def presents_credentials(key_header: str | None) -> bool:
    return bool(request.headers.get("Authorization", "").strip()) or (
        key_header is not None and bool(request.headers.get(key_header, "").strip())
    )


def presented_key(key_header: str | None) -> str:
    """The plain key from the Authorization header (Bearer), or from ``key_header`` where a view allows it."""
    header = request.headers.get("Authorization")
    if (header is None or not header.strip()) and key_header is not None:
        alternative = request.headers.get(key_header, "").strip()
        if alternative:
            if not _KEY_FORMAT.match(alternative):
                raise _refused(
                    f"Malformed API key in {key_header}: expected ak_ followed by 64 lowercase hexadecimal characters.",
                    "malformed API key", key_header)
            return alternative
    if header is None or not header.strip():
        accepted = _ACCEPTED_FORM if key_header is None else f"{_ACCEPTED_FORM[:-1]} or '{key_header}: <API_KEY>'."
        raise _refused(f"Missing API key. {accepted}", "missing API key")
    scheme, _, credential = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        if _KEY_FORMAT.match(scheme):
            raise _refused(f"The key was sent without the word Bearer. {_ACCEPTED_FORM}", "no Bearer word")
        raise _refused(f"Unsupported authorization scheme. {_ACCEPTED_FORM}", "unsupported authorization scheme")
    credential = credential.strip()
    if not _KEY_FORMAT.match(credential):
        raise _refused("Malformed API key: expected ak_ followed by 64 lowercase hexadecimal characters.",
                       "malformed API key")
    return credential


def usable_key(key: ApiKey | None) -> ApiKey:
    """The key if it may be used now; 401 for an unknown, revoked or expired key."""
    if key is None:
        raise _refused("Invalid API key.", "unknown API key")
    status = key.status(datetime.now(UTC))
    if status == "revoked":
        raise _refused("This API key has been revoked.", "revoked API key")
    if status == "expired":
        raise _refused("This API key has expired.", "expired API key")
    return key


def authenticate(keys: KeyLookup, key_header: str | None) -> ApiKey:
    return usable_key(keys.lookup(presented_key(key_header)))


def check_permission(key: ApiKey, required: str) -> None:
    if required not in key.permissions:
        raise Forbidden(
            f"This API key lacks the '{required}' permission this endpoint needs.",
            details={"required_permission": required, "permissions": list(key.permissions)},
        )
