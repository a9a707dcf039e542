"""Just enough of HTTP/1.1 framing for the worker's event loop to decide when a request can go to a thread: where
the head ends, what the head says of the body, and whether the body is all here.

None of this judges a request: gunicorn's parser does, in the thread. Anything these functions cannot make sense
of reads as "ready now", so gunicorn sees it at once and answers it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEAD_END = b"\r\n\r\n"
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")

# gunicorn's own bounds and its normalisation of the settings (gunicorn/http/message.py).
_MAX_REQUEST_LINE = 8190
_MAX_HEADERS = 32768
_DEFAULT_MAX_HEADERFIELD_SIZE = 8190


@dataclass(frozen=True)
class HeadLimits:
    """The longest request line, the most header fields and the longest field gunicorn's parser accepts, and the
    most header bytes it buffers."""

    request_line: int
    fields: int
    field_size: int
    headers: int

    @classmethod
    def of(cls, limit_request_line: int, limit_request_fields: int, limit_request_field_size: int) -> HeadLimits:
        line = limit_request_line
        if line <= 0 or line >= _MAX_REQUEST_LINE:  # 0 is "no limit" to gunicorn; a buffer still needs one
            line = _MAX_REQUEST_LINE
        fields = limit_request_fields
        if fields <= 0 or fields > _MAX_HEADERS:
            fields = _MAX_HEADERS
        field_size = limit_request_field_size if limit_request_field_size > 0 else _DEFAULT_MAX_HEADERFIELD_SIZE
        return cls(request_line=line, fields=fields, field_size=field_size, headers=fields * (field_size + 2) + 4)


def find_head_end(data: bytes | bytearray, start: int = 0) -> int | None:
    """The offset just past the blank line ending the head, or None while it has not arrived. ``start`` lets a
    caller resume where an earlier search stopped (three bytes back, for a terminator split across reads)."""
    found = data.find(HEAD_END, start)
    return None if found < 0 else found + len(HEAD_END)


def oversized_head(data: bytes | bytearray, limits: HeadLimits) -> int | None:
    """400 when the request line already exceeds its limit, 431 when the headers do, None while they may still
    end in bounds; for a head whose end has not arrived."""
    line_end = data.find(b"\r\n")
    if line_end < 0:
        return 400 if len(data) - 2 > limits.request_line else None
    if line_end > limits.request_line:
        return 400
    return 431 if len(data) - line_end - 2 > limits.headers else None


@dataclass(frozen=True)
class BodyFraming:
    """What a head says of its body: a length (0: none), or chunks."""

    length: int = 0
    chunked: bool = False


NO_BODY = BodyFraming()


_FRAMING_FIELD = re.compile(rb"\r\n(content-length|transfer-encoding):([^\r\n]*)", re.IGNORECASE)


def body_framing(head: bytes | bytearray) -> BodyFraming:
    length: int | None = None
    chunked = False
    for field_name, raw_value in _FRAMING_FIELD.findall(head):  # most heads have neither: one scan, no split
        value = raw_value.strip(b" \t")
        if field_name.lower() == b"content-length":
            if not value.isdigit() or length is not None:
                return NO_BODY  # gunicorn refuses it
            length = int(value)
        else:
            if not value.lower().endswith(b"chunked"):
                return NO_BODY  # gunicorn refuses a coding it does not read (501)
            chunked = True
    if chunked:
        return NO_BODY if length is not None else BodyFraming(chunked=True)
    return BodyFraming(length=length or 0)


def chunked_body_end(data: bytes | bytearray, position: int) -> tuple[int | None, int]:
    """(the offset just past a chunked body, or None while it is still arriving; where to resume next time).

    ``position`` is where a chunk-size line starts (just past the head at first). A malformed size line ends the
    search as if the body were here: gunicorn refuses it without waiting for more.
    """
    while True:
        line_end = data.find(b"\r\n", position)
        if line_end < 0:
            return None, position
        size_text = bytes(data[position:line_end]).split(b";", 1)[0].strip(b" \t")
        if not _CHUNK_SIZE.fullmatch(size_text):
            return len(data), position
        size = int(size_text, 16)
        if size == 0:
            trailers = line_end + 2
            if data[trailers:trailers + 2] == b"\r\n":
                return trailers + 2, position
            end = data.find(HEAD_END, trailers)
            return (None, position) if end < 0 else (end + len(HEAD_END), position)
        following = line_end + 2 + size + 2
        if following > len(data):
            return None, position
        position = following
