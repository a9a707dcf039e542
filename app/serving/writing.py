"""Writing an answer in a worker thread without letting slow readers hold the threads.

A client that takes its answer slowly (or not at all) keeps the thread writing to it blocked: forty such clients
reading a large download a byte at a time held every thread, and every other request waited. A write here
never blocks until its client is found slow: each send goes as far as the socket takes it at once, and only
when the socket is full does the thread wait, holding one of a bounded number of slow-reader slots (half the
threads, as uploads have). A client that takes no byte for ``stall_seconds`` is cut off, as is one that finds
every slot taken for that long; the other threads keep answering everyone else.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from typing import Any


class SlowReaderSlots:
    def __init__(self, count: int) -> None:
        self._slots = threading.BoundedSemaphore(count)

    def take(self, timeout: float) -> bool:
        return self._slots.acquire(timeout=max(0.0, timeout))

    def give_back(self) -> None:
        self._slots.release()


class PacedSocket:
    """The client socket as one answer is written to it; everything but ``sendall`` is the socket's own."""

    def __init__(self, sock: socket.socket, slots: SlowReaderSlots, stall_seconds: float, send_seconds: float) -> None:
        self._sock = sock
        self._slots = slots
        self._stall_seconds = stall_seconds
        self._send_seconds = send_seconds
        self._holding = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        self._sock.settimeout(0.0)
        try:
            while view:
                try:
                    sent = self._sock.send(view)
                except (BlockingIOError, ssl.SSLWantWriteError):
                    sent = 0
                if sent:
                    view = view[sent:]
                else:
                    self._wait_until_writable()
        finally:
            # What else writes to the socket (sendfile, an error answer) expects a blocking one with a timeout.
            self._sock.settimeout(self._send_seconds)

    def _wait_until_writable(self) -> None:
        started = time.monotonic()
        if not self._holding:
            if not self._slots.take(self._stall_seconds):
                raise TimeoutError("every slow-reader slot is taken")
            self._holding = True
        remaining = self._stall_seconds - (time.monotonic() - started)
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLOUT)
        if remaining <= 0 or not poller.poll(remaining * 1000):
            raise TimeoutError(f"the client took no byte of its answer for {self._stall_seconds:g} s")

    def done(self) -> None:
        """The answer is written (or given up): its slot goes back, and the socket to the timeouts reads set."""
        if self._holding:
            self._holding = False
            self._slots.give_back()
