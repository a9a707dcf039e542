"""Every request's path before its view: identify the caller, count it, authorize it.

Views declare what they need with the decorators below; the stages read those marks. Per-request state
lives in one RequestContext (``current_context()``), never in flags that modules set for each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from app.keys.records import ApiKey

F = TypeVar("F", bound=Callable[..., object])


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
    """Also accept the plain key in header ``name`` (Azure clients send Ocp-Apim-Subscription-Key)."""

    def mark(view: F) -> F:
        view.key_header = name  # type: ignore[attr-defined]
        return view

    return mark


def current_key() -> ApiKey:
    """The authenticated key of this request (views behind a key only)."""
    from flask import g

    key = g.get("api_key")
    if key is None:
        raise RuntimeError("current_key() called in a view that needs no key")
    return key
