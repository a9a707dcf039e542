"""The account dashboard: server-rendered pages under /dashboard for the keys of one account.

Pages need no API key (they are ``@public`` to the request pipeline) and check the dashboard session
themselves; every form carries the session's CSRF token. Key changes go through app.keys.manage, the
same rules as the /keys API, acting as the signed-in key.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import cache, wraps
from pathlib import Path
from typing import Any, TypeVar

from flask import (
    Blueprint,
    Response,
    current_app,
    g,
    make_response,
    redirect,
    render_template,
    request,
    send_file,
    url_for,
)
from flask import send_from_directory as _send_from_directory
from markupsafe import Markup

from app.compute.forecast.catalog import DEFAULT_MODEL_ID, describe_models
from app.dashboard import sessions
from app.dashboard.sessions import DashboardSession
from app.keys import crud, manage
from app.keys.answers import display_form, key_body, rate_windows
from app.keys.limits import TIERS
from app.keys.records import OUTCOMES, PERMISSIONS, ApiKey
from app.series.timestamps import FREQUENCIES
from app.services import current_services
from app.web.errors import ApiError
from app.web.observability import KEY_FORMAT
from app.web.pipeline import public

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
SAMPLES_DIR = STATIC_DIR / "samples"
GRACE_CHOICES: tuple[tuple[int, str], ...] = (
    (0, "Now (the old key stops at once)"),
    (3600, "1 hour"),
    (86400, "24 hours"),
    (7 * 86400, "7 days"),
)
# Scripts and styles come from this server only; uPlot and ReDoc inject inline styles, ReDoc a blob worker.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "worker-src 'self' blob:; connect-src 'self'; font-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)

bp = Blueprint("dashboard", __name__, url_prefix="/dashboard", template_folder="templates")

F = TypeVar("F", bound=Callable[..., Any])


# --- plumbing ------------------------------------------------------------------------------------


def _secure() -> bool:
    return request.is_secure


def _page(template: str, status: int = 200, **context: Any) -> Response:
    response = make_response(render_template(template, **context), status)
    # Pages can show a fresh plain key; nothing here may be cached or framed.
    response.headers["Cache-Control"] = "no-store"
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    return response


def current_session() -> DashboardSession | None:
    if "dashboard_session" not in g:
        services = current_services()
        g.dashboard_session = sessions.load(services.database, services.keys, request.cookies.get(sessions.COOKIE_NAME))
    return g.dashboard_session  # type: ignore[no-any-return]


def signed_in(view: F) -> F:
    """The page needs a live session; otherwise back to sign-in, saying why when a session had ended."""

    @wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if current_session() is None:
            ended = request.cookies.get(sessions.COOKIE_NAME) is not None
            response = redirect(url_for("dashboard.sign_in", expired=1) if ended else url_for("dashboard.sign_in"))
            if ended:
                sessions.clear_cookie(response, secure=_secure())
            return response
        if request.method == "POST":
            session = current_session()
            assert session is not None
            if not sessions.tokens_match(session.csrf_token, request.form.get(sessions.CSRF_FIELD)):
                return _csrf_refused()
        return view(*args, **kwargs)

    return public(wrapper)  # type: ignore[return-value]


def _csrf_refused() -> Response:
    return _page(
        "dashboard/error.html",
        400,
        title="Form expired or forged",
        message="The form's security token is missing or does not match this session. "
        "Reload the page and submit the form again.",
    )


@bp.app_template_global()
def csrf_field() -> Markup:
    session = current_session()
    token = session.csrf_token if session is not None else ""
    return Markup('<input type="hidden" name="{}" value="{}">').format(sessions.CSRF_FIELD, token)


@bp.app_template_filter("when")
def _when(value: str | datetime | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return value[:16].replace("T", " ") + " UTC"  # the API's "YYYY-MM-DDTHH:MM:SSZ", to the minute


def _base_context() -> dict[str, Any]:
    session = current_session()
    return {
        "session": session,
        "actor": session.key if session else None,
        "monitors_available": "monitors" in current_app.extensions,
    }


# ReDoc's sidebar footer always shows Redocly's logo from its CDN, an address the pages' policy (img-src 'self')
# refuses, so the browser logged a violation on every visit to the reference. The vendored file stays as npm
# ships it (vendor/redoc/VERSION); the address is swapped as the file is served for an empty data: image, which
# fails to decode at once, and ReDoc then drops the image and keeps the footer's link text.
REDOC_BUNDLE = "vendor/redoc/redoc.standalone.js"
_REDOC_LOGO = b'src:"https://cdn.redoc.ly/redoc/logo-mini.svg"'
STATIC_MAX_AGE = 3600


@cache
def _redoc_bundle() -> tuple[bytes, str]:
    bundle = (STATIC_DIR / REDOC_BUNDLE).read_bytes().replace(_REDOC_LOGO, b'src:"data:,"')
    return bundle, hashlib.sha256(bundle).hexdigest()[:32]


@bp.get("/static/<path:filename>")
@public
def static(filename: str) -> Response:
    if filename == REDOC_BUNDLE:
        bundle, etag = _redoc_bundle()
        response = send_file(io.BytesIO(bundle), mimetype="text/javascript", max_age=STATIC_MAX_AGE, etag=etag,
                             conditional=True)
    else:
        response = _send_from_directory(STATIC_DIR, filename, max_age=STATIC_MAX_AGE)
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


# A browser asks for /favicon.ico on every page that names no icon. Unrouted, that request would need a key, and
# each would be a failed authentication spending from the address's allowance (AUTH_FAILURE_LIMIT), the one
# sign-in attempts spend from: the pages name this icon, and /favicon.ico itself answers, both without a key.
FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" '
    'fill="#1f4e8c"/><path d="M2 11.5l3.5-4 3 2.5L14 4" fill="none" stroke="#fff" stroke-width="1.8"/></svg>'
)
ICON_MAX_AGE = 86400


@bp.get("/favicon.svg")
@public
def favicon() -> Response:
    response = make_response(FAVICON_SVG)
    response.mimetype = "image/svg+xml"
    response.headers["Cache-Control"] = f"public, max-age={ICON_MAX_AGE}"
    return response


@public
def no_favicon_ico() -> Response:
    response = make_response("", 204)
    response.headers["Cache-Control"] = f"public, max-age={ICON_MAX_AGE}"
    return response


bp.record_once(lambda state: state.app.add_url_rule("/favicon.ico", "favicon_ico", no_favicon_ico))


# --- sign in and out -----------------------------------------------------------------------------


@bp.get("")
@bp.get("/")
@public
def home() -> Response:
    return redirect(url_for("dashboard.keys" if current_session() else "dashboard.sign_in"))


@bp.route("/<path:unknown>", methods=["GET", "POST"])
@public
def not_a_page(unknown: str) -> Response:
    # A person who mistypes a dashboard address gets a page, not the API's JSON 401.
    return _page("dashboard/error.html", 404, title="No such page",
                 message="There is no dashboard page at this address.", **_base_context())


def _sign_in_page(status: int = 200, *, error: str | None = None, notice: str | None = None) -> Response:
    seed = sessions.sign_in_seed(request)
    token = sessions.sign_in_token(current_services().settings.resolved_secret_key(), seed)
    response = _page("dashboard/sign_in.html", status, csrf_token=token, error=error, notice=notice,
                     session=None, actor=None, monitors_available=False)
    sessions.set_seed_cookie(response, seed, secure=_secure())
    return response


@bp.get("/sign-in")
@public
def sign_in() -> Response:
    if current_services().settings.require_https and not request.is_secure:
        # No form over plain HTTP: a key typed into it would travel in clear before the POST is refused.
        return _page("dashboard/error.html", 403, title="HTTPS is required",
                     message="This server signs in over HTTPS only. Open this page with https:// and sign in "
                     "there.", session=None, actor=None, monitors_available=False)
    if current_session() is not None:
        return redirect(url_for("dashboard.keys"))
    notice = None
    if request.args.get("expired"):
        notice = "Your session has ended (it expired or was signed out). Sign in again."
    elif request.args.get("signed_out"):
        notice = "You are signed out."
    return _sign_in_page(notice=notice)


@bp.post("/sign-in")
@public
def sign_in_submit() -> Response:
    services = current_services()
    seed = request.cookies.get(sessions.CSRF_SEED_COOKIE)
    expected = sessions.sign_in_token(services.settings.resolved_secret_key(), seed) if seed else None
    if expected is None or not sessions.tokens_match(expected, request.form.get(sessions.CSRF_FIELD)):
        return _csrf_refused()
    if services.settings.require_https and not request.is_secure:
        return _sign_in_page(403, error="This server signs in over HTTPS only.")
    plain = (request.form.get("api_key") or "").strip()
    if not plain:
        return _sign_in_page(400, error="Enter an API key with the admin permission.")
    key = services.keys.lookup(plain) if KEY_FORMAT.match(plain) else None
    now = datetime.now(UTC)
    if key is None or not key.is_active(now):
        # Wrong keys spend from the same per-address allowance as failed API authentications.
        failures = services.limits.count_failed_authentication(request.remote_addr or "unknown")
        if failures.breached is not None:
            return _sign_in_page(429, error="Too many failed sign-in attempts from this address. Wait a minute.")
        if key is None:
            reason = ("That is not an API key: keys are ak_ followed by 64 lowercase hexadecimal characters."
                      if not KEY_FORMAT.match(plain) else "No such API key.")
        else:
            reason = f"This API key is {key.status(now)}."
        return _sign_in_page(401, error=reason)
    if sessions.REQUIRED_PERMISSION not in key.permissions:
        return _sign_in_page(
            403,
            error="This key cannot sign in: the dashboard manages keys, which needs the admin permission, "
            f"and this key has only {', '.join(key.permissions)}.",
        )
    token, session = sessions.start(services.database, key)
    response = redirect(url_for("dashboard.keys"))
    sessions.set_cookie(response, token, session.expires_at, secure=_secure())
    return response


@bp.post("/sign-out")
@signed_in
def sign_out() -> Response:
    session = current_session()
    assert session is not None
    sessions.end(current_services().database, session.token_hash)
    response = redirect(url_for("dashboard.sign_in", signed_out=1))
    sessions.clear_cookie(response, secure=_secure())
    return response


# --- keys ----------------------------------------------------------------------------------------


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
        **_base_context(),
        **extra,
    }
    return _page("dashboard/keys.html", status, **context)


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
    return _page("dashboard/error.html", 404, title="No such key",
                 message="There is no key with that id in this account.", **_base_context())


def _usage_series(key_id: str, hours: int) -> dict[str, Any]:
    with current_services().database.session() as db:
        buckets = crud.usage_history(db, key_id=key_id, hours=hours)
    return {
        "hours": [int(b.hour.timestamp()) for b in buckets],
        **{outcome: [b.counts[outcome] for b in buckets] for outcome in OUTCOMES},
        "totals": {outcome: sum(b.counts[outcome] for b in buckets) for outcome in OUTCOMES},
    }


def _key_page(key: ApiKey, status: int = 200, **extra: Any) -> Response:
    try:
        windows: list[dict[str, Any]] | None = rate_windows(key)
    except ApiError:
        windows = None  # the page still shows history while the limiter store is away
    usage = {"day": _usage_series(key.id, 24), "week": _usage_series(key.id, 168)}
    context = {
        "key": key_body(key),
        "display": display_form(key),
        "windows": windows,
        "usage": usage,
        "tiers": TIERS,
        "grace_choices": GRACE_CHOICES,
        "form": {},
        "errors": {},
        "rotated": None,
        "outcomes": OUTCOMES,
        **_base_context(),
        **extra,
    }
    return _page("dashboard/key.html", status, **context)


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
    return _page("dashboard/revoke.html", key=key_body(key), **_base_context())


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
        sessions.clear_cookie(response, secure=_secure())
        return response
    also = f", with the {len(cascade)} key(s) it created" if cascade else ""
    return _keys_page(notice=f"Key {key.name or key.id} ({display_form(key)}) is revoked{also}.")


# --- playground, reference, monitors -------------------------------------------------------------


def _samples() -> list[dict[str, Any]]:
    found = []
    for path in sorted(SAMPLES_DIR.glob("*.json")):
        sample = json.loads(path.read_text())
        found.append({"id": path.stem, "title": sample["title"], "frequency": sample["data_frequency"]})
    return found


@bp.get("/playground")
@signed_in
def playground() -> Response:
    return _page(
        "dashboard/playground.html",
        models=describe_models(),
        default_model=DEFAULT_MODEL_ID,
        frequencies=FREQUENCIES,
        samples=_samples(),
        **_base_context(),
    )


@bp.get("/reference")
@signed_in
def reference() -> Response:
    from app.web.openapi import current_spec

    return _page("dashboard/reference.html", spec=current_spec(), **_base_context())


MONITOR_CHART_POINTS = 500
MONITOR_FEEDBACK_ROWS = 5


@bp.get("/monitors")
@signed_in
def monitors(notice: str | None = None) -> Response:
    if "monitors" not in current_app.extensions:
        return _page("dashboard/error.html", 404, title="No monitors", message="This server has no monitors.",
                     **_base_context())
    from app.monitors import service as monitor_service

    session = current_session()
    assert session is not None
    views, _ = monitor_service.list_monitors(
        database=current_services().database, account_id=session.key.account_id, points=MONITOR_CHART_POINTS,
        limit=50, after=None,
    )
    charts = []
    for view in views:
        points = view.get("points") or []
        flagged = [p for p in points if p["is_anomaly"]]
        charts.append({
            "id": view["id"],
            "name": view["name"],
            "frequency": view["data_frequency"],
            "point_count": view["point_count"],
            "sensitivity": view["sensitivity"],
            "confidence": view["confidence"],
            "min_deviation": view["min_deviation"],
            "min_relative_deviation": view["min_relative_deviation"],
            "anomalies": len(flagged),
            "source": view["source"],
            "alertmanager_url": view["alertmanager_url"],
            # The latest flagged points, newest first, each with the feedback a user gave it.
            "recent_anomalies": [
                {"timestamp": p["timestamp"], "value": p["value"], "expected": p["expected"],
                 "direction": p["direction"], "feedback": p["feedback"]}
                for p in reversed(flagged[-MONITOR_FEEDBACK_ROWS:])
            ],
            "series": {
                "timestamps": [p["timestamp"] for p in points],
                "value": [p["value"] for p in points],
                "expected": [p["expected"] for p in points],
                "lower": [p["lower_bound"] for p in points],
                "upper": [p["upper_bound"] for p in points],
                "anomaly": [p["is_anomaly"] for p in points],
            },
        })
    can_write = "write" in session.key.permissions
    return _page("dashboard/monitors.html", charts=charts, shown_points=MONITOR_CHART_POINTS, can_write=can_write,
                 notice=notice, **_base_context())


@bp.post("/monitors/<monitor_id>/feedback")
@signed_in
def monitor_feedback(monitor_id: str) -> Response:
    """The dashboard's "Not an anomaly" button: the same change as POST /monitors/{id}/feedback."""
    from app.monitors import service as monitor_service
    from app.monitors.schemas import point_epoch
    from app.web.errors import ApiError

    session = current_session()
    assert session is not None
    if "write" not in session.key.permissions:
        return _page("dashboard/error.html", 403, title="Not allowed",
                     message="Marking a point needs a key with the write permission.", **_base_context())
    stamp = request.form.get("timestamp", "")
    try:
        monitor_service.mark_not_anomaly(
            database=current_services().database, runtime=current_app.extensions["monitors"],
            account_id=session.key.account_id, monitor_id=monitor_id, epoch=point_epoch(stamp),
        )
    except ApiError as error:
        return _page("dashboard/error.html", error.status, title="Not marked", message=error.message,
                     **_base_context())
    return monitors(notice=f"The point at {stamp} is marked as not an anomaly; the detector learns it as normal.")


# --- batches -------------------------------------------------------------------------------------

BATCH_ROWS = 100
# Results can be downloaded once some exist: while running (the series finished so far) and when done.
BATCH_DOWNLOADABLE = ("running", "done")


def _batch_rows(account_id: str) -> list[dict[str, Any]]:
    from app.batches import store
    from app.batches.schemas import batch_json

    rows = []
    for batch in store.list_batches(current_services().database, account_id, limit=BATCH_ROWS):
        row = batch_json(batch)
        progress = row["progress"]
        row["finished_series"] = progress["done"] + progress["failed"]
        row["download_url"] = (url_for("dashboard.batch_results", batch_id=batch.id)
                               if batch.status in BATCH_DOWNLOADABLE else None)
        row["backtest_url"] = (url_for("dashboard.backtest", batch_id=batch.id)
                               if batch.kind == "backtest" and batch.status in BATCH_DOWNLOADABLE else None)
        rows.append(row)
    return rows


def _reader() -> DashboardSession | Response:
    session = current_session()
    assert session is not None
    if "read" not in session.key.permissions:
        return _page("dashboard/error.html", 403, title="Not allowed",
                     message="Seeing batches needs a key with the read permission.", **_base_context())
    return session


@bp.get("/batches")
@signed_in
def batches() -> Response:
    session = _reader()
    if isinstance(session, Response):
        return session
    return _page("dashboard/batches.html", batches=_batch_rows(session.key.account_id), shown=BATCH_ROWS,
                 ttl_hours=current_services().settings.batch_result_ttl_hours, **_base_context())


@bp.get("/batches.json")
@signed_in
def batches_json() -> Response:
    """What the batches page polls while a batch is unfinished: the same rows, as JSON."""
    session = _reader()
    if isinstance(session, Response):
        return session
    response = make_response({"batches": _batch_rows(session.key.account_id)})
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.get("/batches/<batch_id>/results.csv")
@signed_in
def batch_results(batch_id: str) -> Response:
    """The batch's results as GET /batches/{id}/results?format=csv gives them, streamed, as a download."""
    from app.batches import store
    from app.batches.results import csv_rows

    session = _reader()
    if isinstance(session, Response):
        return session
    database = current_services().database
    batch = store.get_batch(database, session.key.account_id, batch_id)
    if batch is None or batch.status == "cancelled":
        return _page("dashboard/error.html", 404, title="No such batch",
                     message="There is no batch with that id in this account, or it was cancelled.",
                     **_base_context())
    response = Response(csv_rows(store.done_outputs(database, batch.id), batch.kind), mimetype="text/csv")
    response.headers["Content-Disposition"] = f'attachment; filename="{batch.id}.csv"'
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Batch-Status"] = batch.status
    return response


@bp.get("/batches/<batch_id>/backtest")
@signed_in
def backtest(batch_id: str) -> Response:
    """A backtest's scores per model, and one series' windows (``?series=``, default the first) as a chart."""
    from app.batches import backtest as backtests
    from app.batches import store
    from app.batches.schemas import batch_json
    from app.dashboard import backtests as shown

    session = _reader()
    if isinstance(session, Response):
        return session
    database = current_services().database
    batch = store.get_batch(database, session.key.account_id, batch_id)
    if batch is None or batch.kind != "backtest" or batch.status == "cancelled":
        return _page("dashboard/error.html", 404, title="No such backtest",
                     message="There is no backtest with that id in this account, or it was cancelled.",
                     **_base_context())
    summary = backtests.summarize(store.done_outputs(database, batch.id))
    ids = shown.series_ids(store.done_outputs(database, batch.id))
    chosen = request.args.get("series") or (ids[0] if ids else None)
    result = shown.series_result(store.done_outputs(database, batch.id), chosen) if chosen in ids else None
    return _page("dashboard/backtest.html", batch=batch_json(batch), summary=summary, series_ids=ids,
                 chosen=chosen if result else None, error=result.get("error") if result else None,
                 scores=[row for row in summary["series"] if row["unique_id"] == chosen],
                 chart=shown.chart_data(result) if result and "windows" in result else None,
                 download_url=url_for("dashboard.batch_results", batch_id=batch.id), **_base_context())
