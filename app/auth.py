"""Who is calling: HTTPS rule (D6.6), Bearer parsing (D2.1), key state (D2.6), permissions (D2.4)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from flask import Flask, g, request

from app import ratelimit
from app.cors import is_allowed_preflight
from app.errors import Forbidden, Unauthorized
from app.keys.records import ApiKey
from app.services import current_services

_KEY_FORMAT = re.compile(r"^ak_[0-9a-f]{64}$")
_ACCEPTED_FORM = "Send the key as 'Authorization: Bearer <API_KEY>'."

def _view_attribute(app: Flask, name: str) -> object | None:
    view = app.view_functions.get(request.endpoint or "")
    return getattr(view, name, None) if view is not None else None


def _presented_key() -> str:
    header = request.headers.get("Authorization")
    if header is None or not header.strip():
        raise Unauthorized(f"Missing API key. {_ACCEPTED_FORM}")
    scheme, _, credential = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        if _KEY_FORMAT.match(scheme):
            raise Unauthorized(f"The key was sent without the word Bearer. {_ACCEPTED_FORM}")
        raise Unauthorized(f"Unsupported authorization scheme. {_ACCEPTED_FORM}")
    credential = credential.strip()
    if not _KEY_FORMAT.match(credential):
        raise Unauthorized("Malformed API key: expected ak_ followed by 64 lowercase hexadecimal characters.")
    return credential


def _authenticate() -> ApiKey:
    plain_key = _presented_key()
    key = current_services().keys.lookup(plain_key)
    now = datetime.now(UTC)
    if key is None:
        raise Unauthorized("Invalid API key.")
    status = key.status(now)
    if status == "revoked":
        raise Unauthorized("This API key has been revoked.")
    if status == "expired":
        raise Unauthorized("This API key has expired.")
    return key


def init_auth(app: Flask) -> None:
    """Registers the checks that must run before the rate limiter's own hook (D1 order)."""

    @app.before_request
    def _require_https() -> None:
        if current_services().settings.require_https and request.scheme != "https" and not _is_public(app):
            raise Forbidden("HTTPS is required.", details={"required_scheme": "https"})

    @app.before_request
    def _identify_caller() -> None:
        g.api_key = None
        if _is_public(app) or is_allowed_preflight(current_services().settings.cors_origins):
            return
        try:
            key = _authenticate()
        except Unauthorized:
            ratelimit.count_failed_authentication()
            raise
        g.api_key = key
        current_services().usage.record(key.id)
        required = _view_attribute(app, "required_permission")
        if isinstance(required, str) and required not in key.permissions:
            # Raised after the limiter has counted the request (D3.3), but wins over a 429 (D1 order).
            g.permission_error = Forbidden(
                f"This API key lacks the '{required}' permission this endpoint needs.",
                details={"required_permission": required, "permissions": list(key.permissions)},
            )


def init_permission_check(app: Flask) -> None:
    """Registered after the limiter so a request refused for its permission still counts."""

    @app.before_request
    def _enforce_permission() -> None:
        error = g.get("permission_error")
        if error is not None:
            raise error


def _is_public(app: Flask) -> bool:
    return bool(_view_attribute(app, "public"))
