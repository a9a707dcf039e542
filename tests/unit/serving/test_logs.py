"""app.serving.logs: a key has one shape, and key-shaped strings are redacted in any letter case, in gunicorn's
log records too."""

from __future__ import annotations

import logging
import re
import sys

import pytest

from app.serving.logs import RedactKeys
from app.web.observability import KEY_FORMAT, KEY_SHAPED, redact_keys

KEY = "ak_" + "0123456789abcdef" * 4


def test_a_key_is_lower_case_and_whole() -> None:
    assert KEY_FORMAT.match(KEY)
    for near_miss in (KEY.upper(), "AK_" + KEY[3:], KEY + "0", KEY + "\n", KEY[:-1], " " + KEY):
        assert not KEY_FORMAT.match(near_miss), near_miss


@pytest.mark.parametrize("shown", [KEY, KEY.upper(), "AK_" + KEY[3:], "Ak_" + KEY[3:].upper(),
                                   "aK_" + "".join(c.upper() if i % 2 else c for i, c in enumerate(KEY[3:]))])
def test_key_shaped_strings_are_redacted_in_any_case(shown: str) -> None:
    redacted = redact_keys(f"id={shown}; path=/x/{shown}?k={shown}")
    assert redacted == "id=ak_01234567…cdef; path=/x/ak_01234567…cdef?k=ak_01234567…cdef"
    assert not re.search(r"ak_[0-9a-f]{64}", redacted, re.IGNORECASE)


def test_gunicorns_log_records_are_redacted_in_any_case() -> None:
    record = logging.LogRecord("gunicorn.error", logging.WARNING, __file__, 1,
                               "Invalid request from ip=%s: %s", ("127.0.0.1", f"GET /{KEY.upper()}"), None)
    try:
        raise ValueError(f"with {KEY.swapcase()}")
    except ValueError:
        record.exc_info = sys.exc_info()
    assert RedactKeys().filter(record)
    assert record.getMessage() == "Invalid request from ip=127.0.0.1: GET /ak_01234567…cdef"
    assert record.exc_text is not None and "ak_01234567…cdef" in record.exc_text
    assert not KEY_SHAPED.search(record.getMessage() + record.exc_text)
