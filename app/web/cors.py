"""CORS, off unless CORS_ORIGINS names origins: keys belong in server-side code."""

from __future__ import annotations

from flask import Flask, Response, request

EXPOSED_HEADERS = (
    "X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, X-Request-Id, X-Model-Id, "
    "X-Forecast-Fallback, X-Forecast-Warning, Retry-After"
)


def is_allowed_preflight(origins: tuple[str, ...]) -> bool:
    """A browser's preflight carries no key; it may pass auth only for a configured origin."""
    return (
        bool(origins)
        and request.method == "OPTIONS"
        and request.headers.get("Origin") in origins
        and "Access-Control-Request-Method" in request.headers
    )


def init_cors(app: Flask, origins: tuple[str, ...]) -> None:
    if not origins:
        return

    @app.after_request
    def _cors_headers(response: Response) -> Response:
        origin = request.headers.get("Origin")
        if origin not in origins:
            return response
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers.add("Vary", "Origin")
        response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        if request.method == "OPTIONS":
            response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
            response.headers["Access-Control-Allow-Headers"] = (
                "Authorization, Content-Type, X-Model-Id, X-Model-Selector, X-Request-Id"
            )
            response.headers["Access-Control-Max-Age"] = "600"
        return response
