"""A client connection as the serving worker's event loop reads it: the bytes of its next request so far, where
the head ends, how the body is framed, and the deadlines each part is due by (app.serving.worker)."""

from __future__ import annotations

import socket
from typing import Any

from gunicorn.workers.gthread import TConn

from app.serving.config import ClientLimits
from app.serving.framing import NO_BODY, BodyFraming, body_framing, chunked_body_end, find_head_end
from app.serving.reading import DeadlineUnreader


class ServingConn(TConn):
    """A connection, with what the event loop has read of its next request."""

    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any, limits: ClientLimits) -> None:
        super().__init__(cfg, sock, client, server)
        self.limits = limits
        self.pending = bytearray()
        self.deadline = 0.0  # monotonic; of the head until it is complete, then of the body
        self.head_end: int | None = None
        self.framing: BodyFraming = NO_BODY
        self._searched = 0  # how far `pending` was searched for the head's end
        self._chunk_position = 0
        self.idle = False  # kept alive between requests (in gthread's _keep), the poller watching for a next one
        self.watched = False  # registered with the poller while the event loop reads it
        self.uploading = False  # holds an upload slot
        self.missing: int | None = None  # body bytes its thread has yet to receive, when the length is known
        self.body_deadline: float | None = None  # as the event loop counted it, for the thread to go on with

    def init(self) -> None:
        super().init()
        if not isinstance(self.parser.unreader, DeadlineUnreader):
            self.parser.unreader = DeadlineUnreader(self.sock, self.limits)

    @property
    def unreader(self) -> DeadlineUnreader:
        return self.parser.unreader  # type: ignore[no-any-return]

    def begin(self, deadline: float, pending: bytes = b"") -> None:
        """Start reading a next request: its head is due by ``deadline``."""
        self.pending = bytearray(pending)
        self.deadline = deadline
        self.head_end, self.framing, self._searched, self._chunk_position = None, NO_BODY, 0, 0

    def head_complete(self, now: float) -> bool:
        if self.head_end is not None:
            return True
        end = find_head_end(self.pending, self._searched)
        if end is None:
            self._searched = max(0, len(self.pending) - 3)
            return False
        self.head_end, self.framing = end, body_framing(self.pending[:end])
        self._chunk_position = end
        self.deadline = self.limits.body_deadline(now, len(self.pending) - end)
        return True

    def body_buffered(self) -> int:
        return len(self.pending) - (self.head_end or 0)

    def body_complete(self) -> bool:
        assert self.head_end is not None
        if not self.framing.chunked:
            return self.body_buffered() >= self.framing.length
        end, self._chunk_position = chunked_body_end(self.pending, self._chunk_position)
        return end is not None

    def body_missing(self) -> int | None:
        if self.head_end is None or self.framing.chunked:
            return None
        return max(0, self.framing.length - self.body_buffered())
