"""Request ids, JSON log lines with key-shaped strings redacted, and response headers every
answer carries."""

from __future__ import annotations

import json
import logging
import random
import re
import sys
import time
from datetime import UTC, datetime
from typing import Any

from flask import Flask, Response, g, request

# A client id is echoed only when it cannot smuggle anything into headers or logs.
_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")

# The one definition of an API key's shape (app.keys makes them, app.web.auth and the dashboard check them).
KEY_PATTERN = r"ak_[0-9a-f]{64}"
# A whole string that is a key as issued (lower case); used with .match.
KEY_FORMAT = re.compile(KEY_PATTERN + r"\Z")
# Anything that may be a key, wherever it came from (a header, a path or query string a client pasted it into, a
# body quoted in an error) and in any letter case (a key retyped or passed through something that upper-cases):
# redacted in the formatter, so no log call, present or future, can leak one.
KEY_SHAPED = re.compile(KEY_PATTERN, re.IGNORECASE)

access_log = logging.getLogger("app.access")


def redact_keys(text: str) -> str:
    """Each key-shaped string becomes the fingerprint the key listings show: its first 11 characters and last 4,
    in lower case as the listings print them, so an upper-cased key is still traced to its listing."""
    return KEY_SHAPED.sub(lambda match: f"{match[0][:11]}…{match[0][-4:]}".lower(), text)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = _request_context()
        entry.update(context)
        for key, value in getattr(record, "fields", {}).items():
            entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return redact_keys(json.dumps(entry, default=str))


def _request_context() -> dict[str, Any]:
    from flask import has_request_context

    if not has_request_context():
        return {}
    context: dict[str, Any] = {"request_id": g.get("request_id")}
    pipeline_context = g.get("request_context")
    key = pipeline_context.key if pipeline_context is not None else None
    if key is not None:
        context["key_id"] = key.id
    return context


def _authenticated() -> bool:
    """A credential in the view's own key header (e.g. Ocp-Apim-Subscription-Key), valid or not, or a valid key."""
    pipeline_context = g.get("request_context")
    if getattr(pipeline_context, "key", None) is not None:
        return True
    key_header = getattr(getattr(pipeline_context, "needs", None), "key_header", None)
    return bool(key_header and key_header in request.headers)


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Alembic announces each of its plugins at INFO; the migration lines themselves stay.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)


def init_request_tracking(app: Flask) -> None:
    @app.before_request
    def _assign_request_id() -> None:
        g.started_at = time.perf_counter()
        offered = request.headers.get("X-Request-Id", "")
        sane = _SANE_REQUEST_ID.match(offered) and not KEY_SHAPED.search(offered)
        g.request_id = offered if sane else _new_request_id()

    @app.after_request
    def _tag_and_log(response: Response) -> Response:
        request_id = g.get("request_id") or _new_request_id()
        response.headers["X-Request-Id"] = request_id
        # A PaaS runs the app without nginx, so these come from the app itself. An answer to a request that
        # carried a credential is that caller's own (a forecast, a key's details): no shared cache or browser
        # may keep it, errors included.
        response.headers["X-Content-Type-Options"] = "nosniff"
        if "Authorization" in request.headers or _authenticated():
            response.headers["Cache-Control"] = "no-store"
        _redact_echoed_keys(response)
        started = g.get("started_at")
        duration_ms = (time.perf_counter() - started) * 1000 if started else None
        access_log.info(
            "%s %s %s",
            request.method,
            request.path,
            response.status_code,
            extra={
                "fields": {
                    "method": request.method,
                    "path": request.path,
                    "status": response.status_code,
                    "duration_ms": round(duration_ms, 3) if duration_ms is not None else None,
                    "remote_addr": request.remote_addr,
                }
            },
        )
        return response


def _new_request_id() -> str:
    """32 hex digits, as uuid4().hex gave, without its os.urandom call per request: an id only has to be unique
    (random reseeds itself in a forked child, so gunicorn's workers do not repeat each other)."""
    return f"{random.getrandbits(128):032x}"


def _redact_echoed_keys(response: Response) -> None:
    """An error that quotes what the client sent (a media type, a field's value) never hands a key-shaped string
    back: proxies, browser consoles and client logs record error bodies. Only errors are looked at (a created
    or rotated key is shown once in a 201 on purpose) and they are small."""
    if response.status_code < 400 or not response.is_json or response.is_streamed or response.direct_passthrough:
        return
    text = response.get_data(as_text=True)
    if KEY_SHAPED.search(text):
        response.set_data(redact_keys(text))
