"""The /verify and /keys part of the service's OpenAPI document (app.web.openapi builds the rest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.keys.schemas import (
    DEFAULT_HISTORY_HOURS,
    MAX_HISTORY_HOURS,
    CreatedKeySchema,
    CreateKeySchema,
    KeyListSchema,
    KeySchema,
    KeyUsageSchema,
    RevokedKeySchema,
    RotatedKeySchema,
    RotateKeySchema,
    UpdateKeySchema,
    VerifyResponseSchema,
)


def document(spec: Any, errors: Callable[..., dict[str, Any]], ok_headers: dict[str, Any]) -> None:
    """Adds GET /verify, then the /keys operations."""
    _document_verify(spec, errors, ok_headers)
    _document_keys(spec, errors, ok_headers)


def _document_verify(spec: Any, errors: Callable[..., dict[str, Any]], ok_headers: dict[str, Any]) -> None:
    spec.components.schema("VerifyResponse", schema=VerifyResponseSchema)
    spec.path(
        path="/verify",
        operations={
            "get": {
                "tags": ["Authentication"],
                "summary": "Check a key, its permissions and its rate-limit status",
                "security": [{"bearerAuth": []}],
                "responses": {
                    "200": {"description": "The key is valid.", "headers": ok_headers,
                            "content": {"application/json": {"schema": "VerifyResponse"}}},
                    **errors("401", "403", "429", "500"),
                },
            }
        },
    )


def _document_keys(spec: Any, errors: Callable[..., dict[str, Any]], ok_headers: dict[str, Any]) -> None:
    for name, schema in (("Key", KeySchema), ("KeyList", KeyListSchema), ("CreatedKey", CreatedKeySchema),
                         ("RotatedKey", RotatedKeySchema), ("RevokedKey", RevokedKeySchema),
                         ("CreateKeyRequest", CreateKeySchema),
                         ("UpdateKeyRequest", UpdateKeySchema), ("RotateKeyRequest", RotateKeySchema),
                         ("KeyUsage", KeyUsageSchema)):
        spec.components.schema(name, schema=schema)
    secured = [{"bearerAuth": []}]
    key_id = {"in": "path", "name": "key_id", "required": True, "schema": {"type": "string"},
              "description": "A key id of the caller's account (another account's key is a 404)."}

    def json_ok(status: str, description: str, schema: str) -> dict[str, Any]:
        return {status: {"description": description, "headers": ok_headers,
                         "content": {"application/json": {"schema": schema}}}}

    def operation(op_id: str, summary: str, responses: dict[str, Any], *, body: str | None = None,
                  body_required: bool = True, parameters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = {
            "operationId": op_id, "tags": ["Keys"], "summary": summary, "security": secured,
            "description": "Needs a key with the admin permission; counted against its rate limits. A key "
                           "gives no more than it holds (permissions, limits, expiry), changes, rotates or revokes "
                           "only keys whose permissions it holds, and manages no keys once it has been rotated "
                           "(403). Every change is logged with the acting key's id.",
            "responses": responses,
        }
        if parameters:
            result["parameters"] = parameters
        if body:
            result["requestBody"] = {"required": body_required, "content": {"application/json": {"schema": body}}}
        return result

    spec.path(path="/keys", operations={
        "get": operation("listKeys", "The keys of the caller's account (never the plain key or its hash)",
                         {**json_ok("200", "The keys.", "KeyList"), **errors("401", "403", "429", "500")}),
        "post": operation(
            "createKey", "Create a key; the plain key is in this response only",
            {**json_ok("201", "The new key, with the plain key in `key`.", "CreatedKey"),
             **errors("400", "401", "403", "415", "429", "500")},
            body="CreateKeyRequest",
        ),
    })
    spec.path(path="/keys/{key_id}", operations={
        "get": operation("getKey", "One key", {**json_ok("200", "The key.", "Key"),
                                               **errors("401", "403", "404", "429", "500")}, parameters=[key_id]),
        "patch": operation(
            "updateKey", "Change a key's name, tier or custom limits (never above the caller's own)",
            {**json_ok("200", "The key as changed.", "Key"), **errors("400", "401", "403", "404", "415", "429", "500")},
            body="UpdateKeyRequest", parameters=[key_id],
        ),
    })
    spec.path(path="/keys/{key_id}/revoke", operations={
        "post": operation("revokeKey", "Revoke a key at once, and every key it created (and theirs)", {
            **json_ok("200", "The revoked key, and the ids of the keys revoked with it.", "RevokedKey"),
            **errors("401", "403", "404", "429", "500")},
            parameters=[key_id]),
    })
    spec.path(path="/keys/{key_id}/rotate", operations={
        "post": operation(
            "rotateKey", "Replace a key; the old one keeps working for the grace period (default 24 h)",
            {**json_ok("201", "The replacement (plain key included, once) and the old key.", "RotatedKey"),
             **errors("400", "401", "403", "404", "415", "429", "500")},
            body="RotateKeyRequest", body_required=False, parameters=[key_id],
        ),
    })
    spec.path(path="/keys/{key_id}/usage", operations={
        "get": operation(
            "keyUsage", "Counted requests per UTC hour by outcome (kept 90 days) and the live rate-limit windows",
            {**json_ok("200", "Hourly buckets, oldest first, zeros included.", "KeyUsage"),
             **errors("400", "401", "403", "404", "429", "500")},
            parameters=[key_id, {"in": "query", "name": "hours", "required": False,
                                 "schema": {"type": "integer", "minimum": 1, "maximum": MAX_HISTORY_HOURS,
                                            "default": DEFAULT_HISTORY_HOURS}}],
        ),
    })
