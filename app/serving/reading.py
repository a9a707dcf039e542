"""Reading a request in a worker thread within the client limits: every socket read waits no longer than what
is left of the current deadline (the head's, the body's, or the linger after an early answer)."""

from __future__ import annotations

import io
import math
import socket
import time
from collections.abc import Callable

from gunicorn.http.unreader import SocketUnreader

from app.errors import TimedOut
from app.serving.config import ClientLimits
from app.serving.refusals import Answer, body_too_slow, head_too_slow

# How long, and how much, the thread that answered early keeps reading a body the app did not read (a lingering
# close, as nginx does): a client still uploading keeps its connection, while one that pauses over a second or
# streams without end is closed (it has its answer already) and releases the thread within these bounds.
LINGER_SECONDS = 10.0
LINGER_READ_SECONDS = 1.0
LINGER_BYTES = 64 * 1024 * 1024


class RequestTimedOut(TimedOut):
    """A client sent its request too slowly. Raised inside the app (which reads the body), app.web.errors answers
    it as the envelope's 408; raised while gunicorn reads a head, the worker sends ``answer``, the same 408."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.message, details=answer.details)
        self.answer = answer


class DeadlineUnreader(SocketUnreader):
    """gunicorn's socket reader, each read bounded by the current deadline (monotonic seconds)."""

    def __init__(self, sock: socket.socket, limits: ClientLimits) -> None:
        super().__init__(sock)
        self.limits = limits
        self.deadline = math.inf
        self._seconds_per_byte = 0.0
        self._per_read: float | None = None
        # Made once: every request switches between them.
        self._head_answer, self._body_answer = head_too_slow(limits), body_too_slow(limits)
        self._answer = self._head_answer
        self.timed_out = False
        # Hears the size of every read: the worker counts a body's missing bytes with it.
        self.on_received: Callable[[int], None] | None = None
        # Told of a timeout before the app answers it, so the answer says "Connection: close" (it is closed).
        self._on_time_out: Callable[[], None] | None = None

    def expect_head(self, deadline: float) -> None:
        self.deadline, self._seconds_per_byte, self._per_read = deadline, 0.0, None
        self._answer, self._on_time_out = self._head_answer, None

    def expect_body(self, deadline: float | None = None, on_time_out: Callable[[], None] | None = None) -> None:
        """``deadline``: the body's so far, when its head was read elsewhere; otherwise it starts now."""
        self.deadline = self.limits.body_deadline(time.monotonic(), 0) if deadline is None else deadline
        self._seconds_per_byte, self._per_read = 1.0 / self.limits.body_min_rate, None
        self._answer, self._on_time_out = self._body_answer, on_time_out

    def linger(self) -> None:
        self.deadline = time.monotonic() + LINGER_SECONDS
        self._seconds_per_byte, self._per_read = 0.0, LINGER_READ_SECONDS
        self._answer, self._on_time_out = self._body_answer, None

    def chunk(self) -> bytes:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise self._time_out()
        try:
            self.sock.settimeout(remaining if self._per_read is None else min(remaining, self._per_read))
            data = self.sock.recv(self.mxchunk)
        except TimeoutError:
            raise self._time_out() from None
        finally:
            # One timeout serves reads and writes alike: the answer's writes get theirs back.
            try:
                self.sock.settimeout(self.limits.send_seconds)
            except OSError:
                pass
        self.deadline += len(data) * self._seconds_per_byte
        if self.on_received is not None:
            self.on_received(len(data))
        return data

    def _time_out(self) -> RequestTimedOut:
        self.timed_out = True
        if self._on_time_out is not None:
            self._on_time_out()
        return RequestTimedOut(self._answer)

    def buffered(self) -> int:
        return self.buf.seek(0, io.SEEK_END)

    def take_buffered(self) -> bytes:
        """The bytes read ahead of the request being parsed (the next request's start), handed to the event loop."""
        data = self.buf.getvalue()
        self.buf = io.BytesIO()
        return data
