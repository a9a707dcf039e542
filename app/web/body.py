"""The one way a request body is read: its media type checked, its bytes read within the size limit, its
JSON parsed. Every JSON endpoint goes through here, so they agree on 413, 415 and 400."""

from __future__ import annotations

from typing import Any

from flask import request

from app.web.errors import PayloadTooLarge, UnsupportedMediaType
from app.web.validation import parse_json_body

try:
    from gunicorn.http.body import Body as _GunicornBody
    from gunicorn.http.body import LengthReader as _GunicornLengthReader
except ImportError:  # served by something else: werkzeug reads every body
    _GunicornBody = _GunicornLengthReader = None  # type: ignore[assignment,misc]


def is_json_content_type(mimetype: str) -> bool:
    return mimetype == "application/json" or (mimetype.startswith("application/") and mimetype.endswith("+json"))


def require_json_content_type() -> None:
    """415 when a Content-Type is sent and it is not JSON (a missing one is taken as JSON)."""
    if request.content_type and not is_json_content_type(request.mimetype):
        raise UnsupportedMediaType(
            "The request body must be JSON (Content-Type: application/json).",
            details={"field": "Content-Type", "issue": "Must be application/json", "provided": request.mimetype},
        )


def read_json(max_bytes: int) -> Any:
    """The body's JSON value, after the media-type and size checks."""
    require_json_content_type()
    return parse_json_body(read_body(max_bytes))


def read_body(max_bytes: int) -> bytes:
    """The body, or 413. A chunked body has no Content-Length, and werkzeug then stops reading at the cap
    without complaint: the truncated prefix would be parsed as if it were the request."""
    if request.content_length is not None:
        fast = _read_declared_length_from_gunicorn(request.content_length)
        if fast is not None:
            return fast
        return request.get_data(cache=False)  # werkzeug answers 413 from the declared length
    raw = request.environ["wsgi.input"].read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise PayloadTooLarge.over(max_bytes)
    return raw


def _read_declared_length_from_gunicorn(length: int) -> bytes | None:
    """The body read straight from gunicorn's length reader, or None to let werkzeug read it.

    gunicorn's wsgi.input takes 1 KiB per step and copies the rest of its socket chunk on every step, so a
    large body is copied over and over. Its length reader underneath reads whole chunks. The bytes
    are the same either way, and a short body comes back short either way (gunicorn terminates the input);
    a body over the limit, or a stream something has already read from, goes to werkzeug as before.
    """
    stream = request.environ.get("wsgi.input")
    if stream is None or _GunicornBody is None or type(stream) is not _GunicornBody:
        return None
    reader = stream.reader
    limit = request.max_content_length
    if (
        type(reader) is not _GunicornLengthReader
        or stream.buf.tell()
        or reader.length != length
        or (limit is not None and length > limit)
        or "stream" in request.__dict__
    ):
        return None
    return reader.read(length) if length else b""
