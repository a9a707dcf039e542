"""Every request's path before its view, in one place: the HTTPS rule, identify the caller, count the
request against its limits, authorize it; then the view; then the rate-limit headers and usage.

The first failing stage answers, which gives the documented order of errors: 401/403, then 429, then
the view's own 400/413/415, then 422, then 500. A key lacking a permission is still counted (it made a
request) and its 403 wins over a 429 in the same request.

Views declare what they need with the decorators below; per-request state lives in one RequestContext
(``current_context()``), not in flags that modules set for each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from flask import Flask, Response, current_app, g, request

from app.rate_windows import WindowStatus
from app.web import auth
from app.web.cors import is_allowed_preflight
from app.web.errors import Unauthorized
from app.web.ratelimit import set_headers, too_many

if TYPE_CHECKING:
    from app.api_key import ApiKey
    from app.services import Services

F = TypeVar("F", bound=Callable[..., object])
IdentitySource = Callable[[], "ApiKey | None"]


def public(view: F) -> F:
    """Reachable without a key and never counted: probes only, never business data."""
    view.public = True  # type: ignore[attr-defined]
    return view


def requires(permission: str) -> Callable[[F], F]:
    """The key must hold ``permission``; a key without it gets 403 (after its request is counted)."""

    def mark(view: F) -> F:
        view.required_permission = permission  # type: ignore[attr-defined]
        return view

    return mark


def uncounted(view: F) -> F:
    """Needs a valid key but does not spend from its rate limits (it reports or describes)."""
    view.uncounted = True  # type: ignore[attr-defined]
    return view


def key_header(name: str) -> Callable[[F], F]:
    """Also accept the plain key in header ``name`` (Azure's clients send Ocp-Apim-Subscription-Key)."""

    def mark(view: F) -> F:
        view.key_header = name  # type: ignore[attr-defined]
        return view

    return mark


@dataclass(frozen=True)
class ViewNeeds:
    """What the matched view declared; an unrouted path needs a key and counts, like any call."""

    public: bool = False
    uncounted: bool = False
    permission: str | None = None
    key_header: str | None = None

    @classmethod
    def of(cls, view: object | None) -> ViewNeeds:
        if view is None:
            return _NO_VIEW
        needs = _NEEDS_OF_VIEW.get(view)
        if needs is None:
            # Read once per view: a missing attribute costs an exception with a formatted message each time.
            needs = _NEEDS_OF_VIEW[view] = cls(
                public=bool(getattr(view, "public", False)),
                uncounted=bool(getattr(view, "uncounted", False)),
                permission=getattr(view, "required_permission", None),
                key_header=getattr(view, "key_header", None),
            )
        return needs


_NO_VIEW = ViewNeeds()
# Views are registered once and never change what they declare; the decorators run at import.
_NEEDS_OF_VIEW: dict[object, ViewNeeds] = {}


@dataclass
class RequestContext:
    needs: ViewNeeds
    key: ApiKey | None = None
    # The window the X-RateLimit-* headers describe: the key's most constraining one as this request left
    # it, or, after a failed authentication, the caller address's failed-authentication window.
    limit_status: WindowStatus | None = None


def current_context() -> RequestContext:
    return g.request_context  # type: ignore[no-any-return]


def current_key() -> ApiKey:
    """The authenticated key of this request (only in views behind a key)."""
    key = current_context().key
    if key is None:
        raise RuntimeError("current_key() called in a view that needs no key")
    return key


def limit_status() -> WindowStatus:
    """The key's rate-limit status for this request, read once: body and headers describe one moment."""
    context = current_context()
    if context.limit_status is None:
        context.limit_status = _services().limits.status(current_key())
    return context.limit_status


def add_identity_source(app: Flask, source: IdentitySource) -> None:
    """Another way to identify a caller that sent no key header (the dashboard's session)."""
    app.extensions.setdefault("identity_sources", []).append(source)


def _services() -> Services:
    return current_app.extensions["forecast_service"]  # type: ignore[no-any-return]


def _identify(services: Services, needs: ViewNeeds) -> ApiKey:
    if not auth.presents_credentials(needs.key_header):
        for source in current_app.extensions.get("identity_sources", []):
            key = source()
            if key is not None:
                return auth.usable_key(key)
    return auth.authenticate(services.keys, needs.key_header)


def _before_view() -> None:
    view = current_app.view_functions.get(request.endpoint or "")
    context = g.request_context = RequestContext(ViewNeeds.of(view))
    needs = context.needs
    services = _services()
    if needs.public:
        return
    if services.settings.require_https:
        auth.require_https()  # before the key is even looked at
    if is_allowed_preflight(services.settings.cors_origins):
        return

    try:
        key = _identify(services, needs)
    except Unauthorized:
        failures = services.limits.count_failed_authentication(request.remote_addr or "unknown")
        context.limit_status = failures.status
        if failures.breached is not None:
            raise too_many(failures.breached, "Too many failed authentication attempts from this address.") from None
        raise
    context.key = key

    breached = None
    if not needs.uncounted:
        count = services.limits.count(key)
        context.limit_status, breached = count.status, count.breached
    if needs.permission is not None:
        auth.check_permission(key, needs.permission)
    if breached is not None:
        raise too_many(breached, f"Rate limit exceeded: {breached.limit} requests per {breached.window}.")


def _after_view(response: Response) -> Response:
    context: RequestContext | None = g.get("request_context")
    if context is None:  # the request failed before the pipeline ran (e.g. a malformed URL)
        return response
    if context.key is not None:
        _services().usage.record(context.key.id, status=response.status_code)
        try:
            status = limit_status()
        except Exception:  # the store failed after the answer was decided: no header beats a wrong one
            return response
    else:
        status = context.limit_status
    if status is not None:
        set_headers(response, status)
    return response


def init_pipeline(app: Flask) -> None:
    app.before_request(_before_view)
    app.after_request(_after_view)
