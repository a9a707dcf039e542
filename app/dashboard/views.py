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
from datetime import UTC, datetime
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
from app.dashboard.holiday_options import holiday_countries
from app.dashboard.sessions import DashboardSession
from app.forecast.calendar import CALENDAR_FEATURES
from app.series.timestamps import FREQUENCIES
from app.services import current_services
from app.web.observability import KEY_FORMAT
from app.web.pipeline import public

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
SAMPLES_DIR = STATIC_DIR / "samples"
# Scripts and styles come from this server only; uPlot and ReDoc inject inline styles, ReDoc a blob worker.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "worker-src 'self' blob:; connect-src 'self'; font-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)

bp = Blueprint("dashboard", __name__, url_prefix="/dashboard", template_folder="templates")

F = TypeVar("F", bound=Callable[..., Any])


# --- plumbing ------------------------------------------------------------------------------------


def secure_cookies() -> bool:
    return request.is_secure


def page(template: str, status: int = 200, **context: Any) -> Response:
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
                sessions.clear_cookie(response, secure=secure_cookies())
            return response
        if request.method == "POST":
            session = current_session()
            assert session is not None
            if not sessions.tokens_match(session.csrf_token, request.form.get(sessions.CSRF_FIELD)):
                return _csrf_refused()
        return view(*args, **kwargs)

    return public(wrapper)  # type: ignore[return-value]


def _csrf_refused() -> Response:
    return page(
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


# The unit one point of each data frequency spans, for sentences such as "4 windows of 6 months".
FREQUENCY_UNITS = {"Seconds": "second", "Minutes": "minute", "Hours": "hour", "Daily": "day", "Weekly": "week",
                   "Monthly": "month", "Quarterly": "quarter", "Yearly": "year"}


@bp.app_template_filter("counted")
def counted(count: int | None, singular: str, plural: str | None = None) -> str:
    """``4 | counted('window')`` is "4 windows", ``1 | counted('window')`` "1 window" (thousands separated)."""
    count = count or 0
    return f"{count:,} {singular if count == 1 else plural or singular + 's'}"


@bp.app_template_filter("frequency_unit")
def _frequency_unit(frequency: str | None) -> str:
    return FREQUENCY_UNITS.get(frequency or "", "point")


def base_context() -> dict[str, Any]:
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
    return page("dashboard/error.html", 404, title="No such page",
                 message="There is no dashboard page at this address.", **base_context())


def _sign_in_page(status: int = 200, *, error: str | None = None, notice: str | None = None) -> Response:
    seed = sessions.sign_in_seed(request)
    token = sessions.sign_in_token(current_services().settings.resolved_secret_key(), seed)
    response = page("dashboard/sign_in.html", status, csrf_token=token, error=error, notice=notice,
                     session=None, actor=None, monitors_available=False)
    sessions.set_seed_cookie(response, seed, secure=secure_cookies())
    return response


@bp.get("/sign-in")
@public
def sign_in() -> Response:
    if current_services().settings.require_https and not request.is_secure:
        # No form over plain HTTP: a key typed into it would travel in clear before the POST is refused.
        return page("dashboard/error.html", 403, title="HTTPS is required",
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
    sessions.set_cookie(response, token, session.expires_at, secure=secure_cookies())
    return response


@bp.post("/sign-out")
@signed_in
def sign_out() -> Response:
    session = current_session()
    assert session is not None
    sessions.end(current_services().database, session.token_hash)
    response = redirect(url_for("dashboard.sign_in", signed_out=1))
    sessions.clear_cookie(response, secure=secure_cookies())
    return response


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
    return page(
        "dashboard/playground.html",
        models=describe_models(),
        default_model=DEFAULT_MODEL_ID,
        frequencies=FREQUENCIES,
        samples=_samples(),
        countries=holiday_countries(),
        calendar_features=CALENDAR_FEATURES,
        **base_context(),
    )


@bp.get("/reference")
@signed_in
def reference() -> Response:
    from app.web.openapi import current_spec

    return page("dashboard/reference.html", spec=current_spec(), **base_context())
