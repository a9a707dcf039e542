"""Which client a request thread serves, and whether it has gone away: work the pool runs for a request stops
when its client leaves (app.compute.pool)."""

from __future__ import annotations

import errno
import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_requests = threading.local()


@contextmanager
def client_of_this_thread(sock: socket.socket | None) -> Iterator[None]:
    """Work this thread submits meanwhile belongs to the client at the other end of ``sock``: it stops when that
    client goes away. The socket must be the request's own, its request read whole (what arrives on it during the
    computation can only be the client's end, or a next pipelined request)."""
    previous = getattr(_requests, "client", None)
    _requests.client = sock
    try:
        yield
    finally:
        _requests.client = previous


def client_left(sock: socket.socket) -> bool | None:
    """True when the client closed (end of file, reset), False while it is connected and silent, None when it sent
    more (a pipelined request): then whether it is still there cannot be told without reading it."""
    # A socket with a timeout waits for data inside recv() whatever its flags: look first, without waiting.
    readable = select.poll()
    readable.register(sock.fileno(), select.POLLIN | select.POLLRDHUP)
    if not readable.poll(0):
        return False
    try:
        data = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError, TimeoutError):
        return False
    except OSError as exc:
        return exc.errno in (errno.ECONNRESET, errno.ENOTCONN, errno.EPIPE, errno.ETIMEDOUT, errno.EBADF)
    return None if data else True


def current_client() -> socket.socket | None:
    """The socket of the request this thread serves, when the serving worker named it."""
    return getattr(_requests, "client", None)
