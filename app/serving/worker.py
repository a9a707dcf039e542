"""gunicorn's gthread worker, with no thread waiting on a slow client.

Stock gthread hands a connection to a thread as soon as its socket is readable, and the thread then blocks on
``recv`` until the rest of the request arrives, for as long as the client keeps the connection open: 32 clients
that send "GET / HTTP/1.1\\r\\n" and nothing more hold all 32 threads, and /healthz stops answering. gunicorn's
``timeout`` does not help (it restarts a worker process that stops answering its master; this one still does).

Here the event loop reads each request's head itself, without blocking, and a thread gets the connection only
once the head is complete:

- a head that does not arrive within ``HEADER_TIMEOUT_SECONDS`` is answered 408 (closed silently when not a byte
  came), and a head over gunicorn's size limits is answered 400/431, by the event loop, in the error envelope;
- a body that has arrived whole goes to a thread with its head, and never waits on the network there;
- a body still arriving takes one of a bounded number of upload slots (half the threads): its thread reads it
  with a deadline that grows with the bytes received (``BODY_TIMEOUT_SECONDS`` plus a second per
  ``BODY_MIN_BYTES_PER_SECOND``; past it the app answers 408). While every slot is taken, the event loop keeps
  reading such bodies itself, under the same deadline, and hands each to a thread when it is whole or a slot
  frees: slow uploads can fill the slots, never the threads that answer everything else.

It also keeps what the previous worker class (gunicorn.conf.py's) did for keep-alive connections. An answer given
before the app read the body (401, 403, 404, 413, 415, 429) leaves the rest of the body on the socket; stock
gthread (gunicorn #3301) would hand the connection back to its poller, and the leftover bytes would wake a thread
that then blocks reading a next request that may never come. The thread that answered discards that body within
the linger bounds (app.serving.reading), and whatever it read beyond it (the start of the next request, already
out of the socket where the poller cannot see it) goes back to the event loop with the connection.

gunicorn's own refusals (a malformed request line, a header over the limits) are answered in the error envelope
too, never as gunicorn's HTML page. TLS terminated by gunicorn itself (``certfile``, unused here: nginx or the
platform's router terminates TLS) keeps gthread's thread-per-readable-connection reading, bounded by the same
deadlines.
"""

from __future__ import annotations

import errno
import selectors
import socket
import sys
import time
from collections import deque
from concurrent import futures
from functools import partial
from typing import Any, NoReturn

from app.serving import refusals
from app.serving.connection import ServingConn
from app.serving.framing import oversized_head
from app.serving.request_threads import RequestThreadsWorker

# One non-blocking read in the event loop.
RECEIVE_BYTES = 65536
# A body waiting for an upload slot is buffered up to this much; then the connection is not read until a slot
# frees (TCP pushes back on the client), so waiting uploads cost bounded memory.
HOLD_BYTES = 256 * 1024
# How often the event loop looks for connections past their deadline.
EXPIRY_SCAN_SECONDS = 0.25
# How often it drops finished requests from its list of those in flight.
FUTURES_SWEEP_SECONDS = 0.25


class ServingWorker(RequestThreadsWorker):
    """The event loop: it reads every request's head (and, while the upload slots are taken, bodies) without
    blocking, refuses what is too large or too slow, and hands each complete request to a thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Owned by the event loop (main thread) only: connections it is reading, and those of them whose body waits
        # for an upload slot, in arrival order.
        self._unserved: dict[ServingConn, None] = {}
        self._awaiting_slot: dict[ServingConn, None] = {}
        self._wake_in: socket.socket | None = None
        self._next_expiry_scan = 0.0
        self._quitting = False

    def handle_quit(self, sig: int, frame: Any) -> None:
        """Ctrl-C (SIGINT) or the master's quick stop (SIGQUIT): the handler only marks the stop and wakes the
        loop, which then quits. Python runs a handler between two steps of the main thread, which may be inside
        ``tpool.submit`` holding the pool's lock: gthread's handler shut the pool down right there, waited forever
        for that lock, and the master killed the worker a whole graceful timeout later."""
        self.alive = False
        self._quitting = True
        self._wake()

    # --- the event loop (main thread) -----------------------------------------------------------------------

    def run(self) -> None:
        self._wake_in, self._wake_out = socket.socketpair()
        self._wake_in.setblocking(False)
        self._wake_out.setblocking(False)
        self.poller.register(self._wake_in, selectors.EVENT_READ, self._drain_wakes)
        self._serve()

    def _serve(self) -> None:
        """gthread's loop (gunicorn 23), except that finished requests leave ``self.futures`` a few times a second
        rather than on every pass. gthread calls futures.wait(self.futures, timeout=0) after each poll: with a
        request in flight per busy connection, that installed and removed a waiter on every one of them on every
        pass, work that grows with the requests in flight. Nothing reads the list
        but the shutdown's wait (below) and the wait for a free connection slot, which stays as it was."""
        for sock in self.sockets:
            sock.setblocking(False)
            # gthread captures the listener's name once: it may be unavailable during a graceful shutdown.
            self.poller.register(sock, selectors.EVENT_READ, partial(self.accept, sock.getsockname()))
        next_sweep = 0.0
        while self.alive:
            self.notify()
            if self.nr_conns < self.worker_connections:
                for key, _ in self.poller.select(1.0):
                    key.data(key.fileobj)
                now = time.monotonic()
                if now >= next_sweep:
                    next_sweep = now + FUTURES_SWEEP_SECONDS
                    self.futures = [future for future in self.futures if not future.done()]
            else:
                result = futures.wait(self.futures, timeout=1.0, return_when=futures.FIRST_COMPLETED)
                for future in result.done:
                    self.futures.remove(future)
            if not self.is_parent_alive():
                break
            self.murder_keepalived()
        if self._quitting:
            self._quit()
        self._drain()
        if self._quitting:
            self._quit()
        self.tpool.shutdown(False)
        self.poller.close()
        for sock in self.sockets:
            sock.close()
        in_flight = [future for future in self.futures if not future.done()]
        if in_flight:
            self.log.info("Stopping: waiting up to %gs for %d request(s) in progress.", self.cfg.graceful_timeout,
                          len(in_flight))
            deadline = time.monotonic() + self.cfg.graceful_timeout
            unfinished = set(in_flight)
            while unfinished and time.monotonic() < deadline:
                if self._quitting:  # Ctrl-C during a graceful stop: what is in flight ends with the process
                    self._quit()
                unfinished = futures.wait(unfinished, timeout=EXPIRY_SCAN_SECONDS).not_done
            if unfinished:
                self.log.warning("Stopped with %d request(s) unfinished after %gs.", len(unfinished),
                                 self.cfg.graceful_timeout)

    def _quit(self) -> NoReturn:
        """gthread's quick stop, from the loop. The requests handed to threads still run as the process exits, and
        those waiting for a computation get a retry-later answer at once: the worker_exit hook closes the pool
        before the exit waits for the threads."""
        self.cfg.worker_int(self)
        self.tpool.shutdown(wait=False)
        sys.exit(0)

    def _drain(self) -> None:
        """A graceful stop serves the requests already sent to this process rather than resetting them: the
        connections waiting in the listeners' queues are accepted once, idle kept-alive ones are closed (nothing
        of theirs is in flight), and the loop goes on reading until every accepted request has gone to a thread
        or past its deadline. Stock gthread stopped at once, and clients whose request arrived a moment before
        SIGTERM (a deploy, a scale-down) saw their connection reset."""
        with self._lock:
            idle, self._keep = list(self._keep), deque()
        for conn in idle:
            with self._lock:
                self.poller.unregister(conn.sock)
            self.nr_conns -= 1
            conn.close()
        for sock in self.sockets:
            try:
                self.poller.unregister(sock)
                name = sock.getsockname()
            except (KeyError, ValueError, OSError):
                continue
            while self.nr_conns < self.worker_connections and self.accept(name, sock):
                pass
        deadline = time.monotonic() + self.cfg.graceful_timeout
        while (self._unserved or self._returned) and time.monotonic() < deadline and not self._quitting:
            self.notify()
            for key, _ in self.poller.select(EXPIRY_SCAN_SECONDS):
                key.data(key.fileobj)
            self.murder_keepalived()

    def _drain_wakes(self, sock: socket.socket) -> None:
        try:
            while sock.recv(4096):
                pass
        except OSError:
            pass

    def accept(self, server: Any, listener: socket.socket) -> bool:
        try:
            sock, client = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return e.errno == errno.ECONNABORTED  # one gone from the queue; others may follow it
        conn = ServingConn(self.cfg, sock, client, server, self.limits)
        self.nr_conns += 1
        conn.begin(time.monotonic() + self.limits.header_seconds)
        self._unserved[conn] = None
        self._watch(conn)
        return True

    def _watch(self, conn: ServingConn) -> None:
        conn.watched = True
        with self._lock:
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_client_socket_readable, conn))

    def _unwatch(self, conn: ServingConn) -> None:
        if conn.watched:
            conn.watched = False
            with self._lock:
                self.poller.unregister(conn.sock)

    def on_client_socket_readable(self, conn: ServingConn, client: Any) -> None:  # type: ignore[override]
        if conn.idle:
            with self._lock:
                try:
                    self._keep.remove(conn)
                except ValueError:  # closed for its keep-alive timeout meanwhile
                    return
                conn.idle = False
            conn.watched = True  # still registered, with this very callback
            conn.begin(time.monotonic() + self.limits.header_seconds)
            self._unserved[conn] = None
        if conn not in self._unserved:
            return
        if self.cfg.is_ssl:  # the bytes are TLS records: a thread decrypts and parses them, within the deadlines
            self._dispatch(conn, upload=False)
            return
        try:
            data = conn.sock.recv(RECEIVE_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        if not data:  # the client went away
            self._drop(conn)
            return
        conn.pending += data
        if conn.head_end is not None:
            conn.deadline += len(data) / self.limits.body_min_rate
        self._advance(conn)

    def _advance(self, conn: ServingConn) -> None:
        """Hand the connection to a thread if its request is ready to be, or refuse it, or keep reading."""
        if not conn.head_complete(time.monotonic()):
            status = oversized_head(conn.pending, self.head_limits)
            if status is not None:
                too_large = refusals.line_too_long if status == 400 else refusals.headers_too_large
                self._refuse(conn, too_large(self.head_limits))
            return
        if conn.body_complete():
            self._dispatch(conn, upload=False)
        elif self._uploading < self.upload_slots:
            self._dispatch(conn, upload=True)
        else:
            self._awaiting_slot[conn] = None
            if conn.body_buffered() >= HOLD_BYTES:
                self._unwatch(conn)

    def _dispatch(self, conn: ServingConn, *, upload: bool) -> None:
        self._unserved.pop(conn, None)
        self._awaiting_slot.pop(conn, None)
        self._unwatch(conn)
        if upload:
            with self._lock:
                self._uploading += 1
            conn.uploading, conn.missing = True, conn.body_missing()
        data, deadline = bytes(conn.pending), conn.deadline
        conn.body_deadline = deadline if conn.head_end is not None else None
        conn.pending = bytearray()
        conn.init()
        conn.unreader.unread(data)
        conn.unreader.expect_head(deadline)
        future = self.tpool.submit(self.handle, conn)
        self._wrap_future(future, conn)

    def _refuse(self, conn: ServingConn, answer: refusals.Answer) -> None:
        """Answer from the event loop and close: a best effort, never waiting on the client."""
        address = conn.client[0] if isinstance(conn.client, tuple) else conn.client
        # Not what it sent: a head may run to megabytes.
        self.log.info("Refused a request from ip=%s with %s: %s", address, answer.status, answer.message)
        try:
            conn.sock.send(answer.encode())
            # What else it sent is read and dropped (within reason), so the close does not reset the answer away.
            for _ in range(16):
                if not conn.sock.recv(RECEIVE_BYTES):
                    break
        except OSError:
            pass
        self._drop(conn)

    def _drop(self, conn: ServingConn) -> None:
        self._unserved.pop(conn, None)
        self._awaiting_slot.pop(conn, None)
        try:
            self._unwatch(conn)
        except (KeyError, ValueError, OSError):
            pass
        self.nr_conns -= 1
        conn.close()

    def murder_keepalived(self) -> None:
        # gthread calls this once per pass of its loop: the place for everything the loop does besides I/O.
        super().murder_keepalived()
        while self._returned:
            self._take_back(self._returned.popleft())
        while self._awaiting_slot and self._uploading < self.upload_slots:
            self._dispatch(next(iter(self._awaiting_slot)), upload=True)
        now = time.monotonic()
        if now < self._next_expiry_scan:
            return
        self._next_expiry_scan = now + EXPIRY_SCAN_SECONDS
        for conn in [conn for conn in self._unserved if conn.deadline <= now]:
            if not conn.pending:
                self.log.debug("Closing a connection that sent nothing within %gs.", self.limits.header_seconds)
                self._drop(conn)
            elif conn.head_end is None:
                self._refuse(conn, refusals.head_too_slow(self.limits))
            else:
                self._refuse(conn, refusals.body_too_slow(self.limits))

    def _take_back(self, conn: ServingConn) -> None:
        """A kept-alive connection whose thread read past its request: the rest is the next request's start."""
        conn.sock.setblocking(False)
        deadline = time.monotonic() + self.limits.header_seconds
        if self.cfg.is_ssl:
            conn.begin(deadline)
            self._dispatch(conn, upload=False)
            return
        conn.begin(deadline, conn.unreader.take_buffered())
        self._unserved[conn] = None
        self._watch(conn)
        self._advance(conn)
