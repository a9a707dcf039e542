"""JSON for request and response bodies on orjson, answering exactly what the standard library answers.

orjson parses from and writes to bytes in one compiled pass, which matters for bodies of 100,000
points. It is used only where its result is the standard library's result; everywhere else the standard
library runs, so no answer changes:

- Parsing: orjson refuses some documents the standard library takes (NaN and Infinity, lone surrogates, a
  byte order mark, other encodings, numbers past the float range) and it reads integers beyond 64 bits as
  floats. Whatever orjson refuses, and any document holding a run of 19 or more digits, is parsed by
  :mod:`json` instead; so is a document with many brackets, whose nesting could reach the depth at
  which :mod:`json` gives up.
- Writing: orjson writes NaN and infinities as null, and UTF-8 where :mod:`json` writes \\u escapes. An
  output holding any non-ASCII byte, or "null" where the value is not plain data (dicts, lists, tuples,
  strings, numbers, booleans, None) free of NaN and infinities, or anything orjson cannot write, is written
  by :mod:`json` instead. Numbers may be spelled differently (1e16 for 1e+16) but read back identical.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from flask.json.provider import DefaultJSONProvider
from werkzeug.sansio.response import Response  # what Flask's provider declares

# Digits become "0", opening brackets "[", every other byte a space: one pass over the body answers both
# "is there a long run of digits" and "how many brackets".
_SCAN_TABLE = bytes(48 if 48 <= b <= 57 else 91 if b in (91, 123) else 32 for b in range(256))
# An integer of 19 digits may pass 2**63; orjson gives a float there, where json gives an int.
_WIDE_INTEGER = b"0" * 19
# json's C scanner spends one level of the interpreter's recursion limit (1000) per nesting level; far
# below it, no document can make json fail on depth where orjson would succeed.
_MAX_FAST_BRACKETS = 256


class _NotFast(Exception):
    """orjson's answer might differ from the standard library's for this input."""


def _fast_loads(data: bytes | bytearray | str) -> Any:
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    scanned = raw.translate(_SCAN_TABLE)
    if _WIDE_INTEGER in scanned or scanned.count(b"[") > _MAX_FAST_BRACKETS:
        raise _NotFast
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _NotFast from None


def loads(data: bytes | bytearray | str, **kwargs: Any) -> Any:
    """json.loads(data, **kwargs), faster where orjson's answer is the same."""
    if not kwargs:
        try:
            return _fast_loads(data)
        except _NotFast:
            pass
    return json.loads(data, **kwargs)


def loads_with_constants(data: bytes, parse_constant: Any) -> Any:
    """json.loads(data, parse_constant=...): orjson refuses NaN/Infinity, so those documents go to json."""
    try:
        return _fast_loads(data)
    except _NotFast:
        return json.loads(data, parse_constant=parse_constant)


class OrjsonProvider(DefaultJSONProvider):
    """Flask's default provider with orjson parsing request bodies and writing compact responses."""

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return loads(s, **kwargs)

    def response(self, *args: Any, **kwargs: Any) -> Response:
        compact = self.compact if self.compact is not None else not self._app.debug
        # Only the compact form is written by orjson; a non-ASCII output goes to json anyway.
        if compact and not self.sort_keys:
            encoded = self._fast_dumps(self._prepare_response_obj(args, kwargs))
            if encoded is not None:
                # As Flask's provider builds it; the sansio response_class type does not take bytes.
                return self._app.response_class(encoded + b"\n", mimetype=self.mimetype)  # type: ignore[arg-type]
        return super().response(*args, **kwargs)

    def _fast_dumps(self, obj: Any) -> bytes | None:
        """Compact ASCII JSON from orjson, or None where json's text could differ beyond number spelling."""
        try:
            encoded = orjson.dumps(
                obj,
                default=self.default,
                option=orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS,
            )
        except TypeError:  # e.g. an integer beyond 64 bits, a non-string key: json decides
            return None
        if not encoded.isascii() or (b"null" in encoded and not _plain_and_finite(obj)):
            return None
        return encoded


def _plain_and_finite(value: Any) -> bool:
    """True when ``value`` is plain JSON data without NaN or infinities: then every null orjson wrote stands for
    a None, as in json's text (answers with a null direction or period are the common case)."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is float:
            if item - item != 0.0:  # NaN and infinities (inf - inf is NaN)
                return False
        elif kind is dict:
            pending.extend(item.values())
        elif kind is list or kind is tuple:
            pending.extend(item)
        elif not (item is None or kind is str or kind is int or kind is bool):
            return False  # written through ``default`` (a dataclass, numpy, ...): json decides
    return True
