"""A CSV batch sent as a form upload (``curl -F file=@stores.csv``): the one file part of a multipart/form-data
body, read as a stream of the file's bytes, so that it goes through the same scan and the same piece by piece
storing as a CSV sent as the body itself (app.batches.submit.pieces). Nothing holds more than about one read
of the body at a time, whatever the file's size."""

from __future__ import annotations

from typing import Any

from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.sansio.multipart import Data, Epilogue, Field, File, MultipartDecoder, NeedData

from app.errors import InputTooLarge, MalformedInput
from app.web.validation import problem

READ_BYTES = 1024 * 1024
# The decoder holds what it has not handed out yet: a read, and at most a boundary's worth more. Part headers
# that run on past this are no form a client writes.
_BUFFER_BYTES = 4 * READ_BYTES
# What a form body may carry besides the file: boundaries and each part's headers.
OVERHEAD_BYTES = 64 * 1024
_FORM = "one file part, as curl -F file=@data.csv sends it"


def refused(issue: str, provided: str = "") -> MalformedInput:
    return MalformedInput(f"Invalid form upload: {issue}; send {_FORM}.", details=problem("body", issue, provided))


def boundary_of(params: dict[str, str]) -> str:
    boundary = params.get("boundary", "")
    if not boundary or len(boundary) > 70:  # RFC 2046: 1 to 70 characters
        raise refused("no multipart boundary in Content-Type", boundary[:64])
    return boundary


class FormFile:
    """``read(size)`` gives the bytes of the body's one file part, then b"" once the whole body is read and
    found to hold nothing else. A second part, a plain form field, no file at all or a body cut short is a 400;
    more than ``max_bytes`` of file (plus OVERHEAD_BYTES of form) is a 413."""

    def __init__(self, stream: Any, boundary: str, *, max_bytes: int) -> None:
        self._stream = stream
        self._decoder = MultipartDecoder(boundary.encode("latin-1"), max_form_memory_size=_BUFFER_BYTES)
        self._max_raw = max_bytes + OVERHEAD_BYTES
        self._raw = 0
        self._in_file = False
        self._files = 0
        self._done = False

    def read(self, size: int = -1) -> bytes:
        try:
            return self._read()
        except RequestEntityTooLarge:
            raise refused("part headers too long", f"more than {_BUFFER_BYTES} bytes") from None
        except ValueError as exc:  # the decoder's word for a body that is not multipart, or cut short
            raise refused("not a complete multipart/form-data body", str(exc)[:64]) from None

    def _read(self) -> bytes:
        while not self._done:
            event = self._decoder.next_event()
            if isinstance(event, NeedData):
                self._receive()
            elif isinstance(event, File):
                self._files += 1
                if self._files > 1:
                    raise refused("several file parts", event.filename or "")
                self._in_file = True
            elif isinstance(event, Field):
                raise refused("a form field where the file was expected", event.name or "")
            elif isinstance(event, Data):
                if self._in_file and not event.more_data:
                    self._in_file = False
                if event.data:
                    return event.data
            elif isinstance(event, Epilogue):
                self._done = True
                if not self._files:
                    raise refused("no file part")
        return b""

    def _receive(self) -> None:
        data = self._stream.read(READ_BYTES)
        self._raw += len(data)
        if self._raw > self._max_raw:
            raise InputTooLarge.over(self._max_raw - OVERHEAD_BYTES)
        self._decoder.receive_data(data or None)
