"""The dashboard's key pages: the list, create, usage and edit, rotate, revoke (on the dashboard's blueprint)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from flask import (
    Response,
    redirect,
    request,
    url_for,
)

from app.api_key import PERMISSIONS, ApiKey
from app.dashboard import sessions
from app.dashboard.views import base_context, bp, counted, current_session, page, secure_cookies, signed_in
from app.errors import Unavailable
from app.keys import manage
from app.keys.limits import TIERS
from app.keys.records import OUTCOMES
from app.keys.safe_view import display_form, key_body, rate_windows
from app.keys.usage import usage_history
from app.services import current_services

GRACE_CHOICES: tuple[tuple[int, str], ...] = (
    (0, "Now (the old key stops at once)"),
    (3600, "1 hour"),
    (86400, "24 hours"),
    (7 * 86400, "7 days"),
)


def _int_field(form: dict[str, str], name: str, errors: dict[str, str]) -> int | None:
    raw = (form.get(name) or "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        errors[name] = "Enter a whole number of at least 1."
        return None
    return int(raw)


def _limit_fields(form: dict[str, str], errors: dict[str, str]) -> tuple[str | None, dict[str, int | None]]:
    tier = (form.get("tier") or "").strip() or None
    if tier is not None and tier != "custom" and tier not in TIERS:
        errors["tier"] = f"Choose one of: {', '.join(TIERS)}, or custom."
    limits = {name: _int_field(form, name, errors) for name in manage.LIMIT_FIELDS}
    if tier == "custom":
        tier = None
        if not any(limits.values()) and not errors:
            errors["per_minute"] = "Give at least one custom limit, or pick a tier."
    return tier, limits


def _expiry_field(form: dict[str, str], errors: dict[str, str]) -> datetime | None:
    raw = (form.get("expires_on") or "").strip()
    if not raw:
        return None
    try:
        day = datetime.strptime(raw, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        errors["expires_on"] = "Enter a date as YYYY-MM-DD."
        return None
    if day <= datetime.now(UTC):
        errors["expires_on"] = "Choose a date in the future."
        return None
    return day


# The form field that shows a refusal from app.keys.manage, by the field it names; any other (the calling key
# itself, for one) is shown above the form.
_FORM_FIELDS = {"expires_at": "expires_on"}


def _refusal(errors: dict[str, str], refused: manage.Refused, fields: tuple[str, ...]) -> None:
    field = _FORM_FIELDS.get(refused.field, refused.field)
    errors[field if field in fields else "form"] = refused.message


def _keys_page(status: int = 200, **extra: Any) -> Response:
    session = current_session()
    assert session is not None
    keys = manage.list_keys(current_services().database, session.key)
    now = datetime.now(UTC)
    context = {
        "keys": [key_body(key, now) for key in keys],
        "permissions": PERMISSIONS,
        "tiers": TIERS,
        "form": {},
        "errors": {},
        "created": None,
        **base_context(),
        **extra,
    }
    return page("dashboard/keys.html", status, **context)


@bp.get("/keys")
@signed_in
def keys() -> Response:
    return _keys_page()


@bp.post("/keys")
@signed_in
def create_key() -> Response:
    session = current_session()
    assert session is not None
    form = request.form.to_dict()
    errors: dict[str, str] = {}
    name = (form.get("name") or "").strip()
    if len(name) > 200:
        errors["name"] = "Use at most 200 characters."
    elif any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        errors["name"] = "Use letters, digits, spaces and punctuation only."
    permissions = tuple(p for p in request.form.getlist("permissions") if p)
    unknown = [p for p in permissions if p not in PERMISSIONS]
    if not permissions:
        errors["permissions"] = "Choose at least one permission."
    elif unknown:
        errors["permissions"] = f"Unknown permission: {', '.join(unknown)}."
    tier, limits = _limit_fields(form, errors)
    expires_at = _expiry_field(form, errors)
    form["permissions"] = list(permissions)  # type: ignore[assignment]
    if not errors:
        try:
            created = manage.create_key(
                current_services().database, session.key, permissions=permissions, name=name, tier=tier,
                expires_at=expires_at, **limits,
            )
        except manage.Refused as refused:
            _refusal(errors, refused, ("name", "permissions", "expires_on", "tier", *manage.LIMIT_FIELDS))
        else:
            return _keys_page(201, created={**key_body(created.key), "key": created.plain_key})
    return _keys_page(400, form=form, errors=errors)


def _own_key(key_id: str) -> ApiKey | None:
    session = current_session()
    assert session is not None
    try:
        return manage.get_key(current_services().database, session.key, key_id)
    except manage.KeyNotFound:
        return None


def _not_found() -> Response:
    return page("dashboard/error.html", 404, title="No such key",
                 message="There is no key with that id in this account.", **base_context())


def _usage_series(key_id: str, hours: int) -> dict[str, Any]:
    with current_services().database.transaction() as connection:
        buckets = usage_history(connection, key_id=key_id, hours=hours)
    return {
        "hours": [int(b.hour.timestamp()) for b in buckets],
        **{outcome: [b.counts[outcome] for b in buckets] for outcome in OUTCOMES},
        "totals": {outcome: sum(b.counts[outcome] for b in buckets) for outcome in OUTCOMES},
    }


def _key_page(key: ApiKey, status: int = 200, **extra: Any) -> Response:
    try:
        windows: list[dict[str, Any]] | None = rate_windows(key)
    except Unavailable:
        windows = None  # the page still shows history while the limiter store is away
    usage = {"day": _usage_series(key.id, 24), "week": _usage_series(key.id, 168)}
    context = {
        "key": key_body(key),
        "display": display_form(key),
        "windows": windows,
        # Where the limiter keeps its counters: in memory they start afresh when the server restarts.
        "limiter_shared": bool(current_services().settings.redis_url),
        "usage": usage,
        "tiers": TIERS,
        "grace_choices": GRACE_CHOICES,
        "form": {},
        "errors": {},
        "rotated": None,
        "outcomes": OUTCOMES,
        **base_context(),
        **extra,
    }
    return page("dashboard/key.html", status, **context)


@bp.get("/keys/<key_id>")
@signed_in
def key_detail(key_id: str) -> Response:
    key = _own_key(key_id)
    return _not_found() if key is None else _key_page(key)


@bp.post("/keys/<key_id>/edit")
@signed_in
def edit_key(key_id: str) -> Response:
    session = current_session()
    assert session is not None
    key = _own_key(key_id)
    if key is None:
        return _not_found()
    form = request.form.to_dict()
    errors: dict[str, str] = {}
    name = (form.get("name") or "").strip()
    if len(name) > 200:
        errors["name"] = "Use at most 200 characters."
    elif any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        errors["name"] = "Use letters, digits, spaces and punctuation only."
    tier, limits = _limit_fields(form, errors)
    if not errors:
        try:
            key = manage.update_key(current_services().database, session.key, key_id, name=name, tier=tier, **limits)
        except manage.Refused as refused:
            _refusal(errors, refused, ("name", "tier", *manage.LIMIT_FIELDS))
        else:
            current_services().keys.forget()
            return _key_page(key, notice="Saved.")
    return _key_page(key, 400, form=form, errors=errors)


@bp.post("/keys/<key_id>/rotate")
@signed_in
def rotate_key(key_id: str) -> Response:
    session = current_session()
    assert session is not None
    key = _own_key(key_id)
    if key is None:
        return _not_found()
    raw = request.form.get("grace_seconds", "")
    allowed = {str(seconds) for seconds, _ in GRACE_CHOICES}
    if raw not in allowed:
        return _key_page(key, 400, errors={"grace_seconds": "Choose one of the grace periods offered."})
    try:
        created, old = manage.rotate_key(
            current_services().database, session.key, key_id, grace=timedelta(seconds=int(raw))
        )
    except manage.Refused as refused:
        return _key_page(key, 403 if refused.beyond_actor else 400, errors={"grace_seconds": refused.message})
    current_services().keys.forget()
    shown = {**key_body(created.key), "key": created.plain_key, "old": key_body(old)}
    return _key_page(created.key, 201, rotated=shown)


@bp.get("/keys/<key_id>/revoke")
@signed_in
def confirm_revoke(key_id: str) -> Response:
    key = _own_key(key_id)
    if key is None:
        return _not_found()
    return page("dashboard/revoke.html", key=key_body(key), **base_context())


@bp.post("/keys/<key_id>/revoke")
@signed_in
def revoke_key(key_id: str) -> Response:
    session = current_session()
    assert session is not None
    key = _own_key(key_id)
    if key is None:
        return _not_found()
    try:
        _, cascade = manage.revoke_key(current_services().database, session.key, key_id)
    except manage.Refused as refused:
        return _key_page(key, 403, errors={"revoke": refused.message})
    current_services().keys.forget()
    if key_id == session.key.id or session.key.id in cascade:
        # Revoking the key this session stands on ends the session with it.
        response = redirect(url_for("dashboard.sign_in", expired=1))
        sessions.clear_cookie(response, secure=secure_cookies())
        return response
    also = f", with the {counted(len(cascade), 'key')} it created" if cascade else ""
    return _keys_page(notice=f"Key {key.name or key.id} ({display_form(key)}) is revoked{also}.")


