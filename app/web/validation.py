"""One translation from request problems to the 400 and 422 envelopes, shared by every JSON endpoint.

A problem is ``{"field", "issue", "provided", ...}``; ``details`` carries the first one, and all of them in
``details.errors`` when there are several. ``provided`` is only ever a short excerpt of what was sent.
"""

from __future__ import annotations

import math
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate

from app import jsonio
from app.errors import InvalidRequest, sentence


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


