"""One translation from request problems to the 400 and 422 envelopes, shared by every JSON endpoint.

A problem is ``{"field", "issue", "provided", ...}``; ``details`` carries the first one, and all of them in
``details.errors`` when there are several. ``provided`` is only ever a short excerpt of what was sent.
"""

from __future__ import annotations

import math
from typing import Any

from flask import request
from marshmallow import Schema, ValidationError, fields, validate

from app.web import jsonio
from app.web.errors import InvalidRequest, NotFound, sentence


def excerpt(value: Any) -> Any:
    """A short stand-in for a submitted value (never more than an excerpt)."""
    if isinstance(value, list):
        return f"array of {len(value)} items"
    if isinstance(value, dict):
        return f"object with {len(value)} keys"
    if isinstance(value, str):
        return value if len(value) <= 64 else value[:61] + "..."
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def unstorable(text: str) -> str | None:
    """Why ``text`` cannot be kept or looked up as text, or None when it can.

    PostgreSQL refuses NUL in text, and a lone surrogate (a JSON escape such as \\ud800 without its pair) is
    not a character at all: neither database driver can encode it. Both would surface as a 500 from the
    database; every string that is stored or compared against stored text is checked here first.
    """
    if "\x00" in text:
        return "Must not contain the NUL character (U+0000)"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "Must not contain a lone surrogate (U+D800 to U+DFFF without its pair)"
    return None


def refuse_unstorable_request_values() -> None:
    """A path segment or query parameter the database could not even compare (see unstorable) answers before
    any view looks it up: 404 for an id in the path (no id holds such a character, and every route with an id
    already answers 404 for an unknown one), 400 for a query parameter.

    Run before every view, after the pipeline's own checks, so a bad key still answers 401 first.
    """
    for name, value in (request.view_args or {}).items():
        issue = unstorable(value) if isinstance(value, str) else None
        if issue is not None:
            # "Must not contain X" -> "No key_id can contain X."
            raise NotFound(sentence(f"No {name} can {issue.removeprefix('Must not ')}"),
                           details=problem(name, issue, value))
    for name in request.args:
        for value in (name, *request.args.getlist(name)):
            issue = unstorable(value)
            if issue is not None:
                raise InvalidRequest(sentence(f"Invalid request: {name}: {issue}"),
                                     details=problem(name, issue, value))


def problem(field: str, issue: str, provided: Any, **extra: Any) -> dict[str, Any]:
    return {"field": field, "issue": issue, "provided": excerpt(provided), **extra}


def envelope(problems: list[dict[str, Any]]) -> dict[str, Any]:
    details = dict(problems[0])
    if len(problems) > 1:
        details["errors"] = problems
    return details


def _reject_constant(name: str) -> float:
    # NaN / Infinity are not JSON; we still parse them so the error can point at the element (a 422).
    return float(name.replace("Infinity", "inf"))


def parse_json_body(raw: bytes) -> Any:
    try:
        return jsonio.loads_with_constants(raw, parse_constant=_reject_constant)
    except RecursionError as exc:
        raise InvalidRequest(
            "The request body is nested too deeply.", details=problem("body", "nested too deeply", "")
        ) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(
            "The request body is not valid JSON.",
            details=problem("body", f"invalid JSON: {str(exc)[:120]}", ""),
        ) from exc


def flatten(messages: Any, path: str, data: Any, out: list[dict[str, Any]]) -> None:
    if isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        issue = "; ".join(messages)
        if issue == "Missing data for required field.":
            issue = "Required field is missing"
        out.append(problem(path or "body", issue, data if data is not _MISSING else None))
        return
    if isinstance(messages, dict):
        for key, nested in messages.items():
            if key == "_schema":
                flatten(nested, path or "body", data, out)
                continue
            child_path = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))
            child = _MISSING
            if isinstance(data, dict):
                child = data.get(key, _MISSING)
            elif isinstance(data, list) and isinstance(key, int) and key < len(data):
                child = data[key]
            flatten(nested, child_path, child, out)


_MISSING = object()


def load_object(schema: Schema, body: Any, problems: list[dict[str, Any]]) -> dict[str, Any]:
    """``body`` loaded by ``schema``, or 400 listing every problem: the body's own first, then ``problems``
    already found (in headers). Every JSON endpoint's request-shape stage goes through here."""
    if not isinstance(body, dict):
        problems.insert(0, problem("body", "Must be a JSON object", body))
        raise InvalidRequest("The request body must be a JSON object.", details=envelope(problems))
    try:
        data = schema.load(body)
    except ValidationError as exc:
        schema_problems: list[dict[str, Any]] = []
        flatten(exc.messages, "", body, schema_problems)
        problems[:0] = schema_problems
        data = None
    if problems or data is None:
        first = problems[0]
        raise InvalidRequest(sentence(f"Invalid request: {first['field']}: {first['issue']}"),
                             details=envelope(problems))
    return data


class ErrorBodySchema(Schema):
    code = fields.String(
        required=True,
        validate=validate.OneOf(
            ["UNAUTHORIZED", "INVALID_REQUEST", "DATA_VALIDATION_ERROR", "RATE_LIMIT_EXCEEDED", "INTERNAL_ERROR"]
        ),
    )
    message = fields.String(required=True)
    details = fields.Dict()


class ErrorSchema(Schema):
    error = fields.Nested(ErrorBodySchema, required=True)


