"""The request threads' side of the serving worker (app.serving.worker): what a thread does with a connection the
event loop handed it, and the state both sides share.

A thread parses the request the loop read the head of, runs the app behind a paced socket (app.serving.writing),
gives its upload slot back as soon as the body is all in memory, discards a body the app left unread within the
linger bounds (app.serving.reading), and hands a kept-alive connection whose next request has already begun back
to the loop. gunicorn's refusals and a request's unexpected error are answered in the error envelope
(app.serving.refusals), never as gunicorn's HTML page.
"""

from __future__ import annotations

import errno
import selectors
import socket
import ssl
from collections import deque
from concurrent.futures import Future
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn.workers.gthread import ThreadWorker

from app.compute.pool import client_of_this_thread
from app.serving import refusals
from app.serving.config import ClientLimits
from app.serving.connection import ServingConn
from app.serving.framing import HeadLimits
from app.serving.reading import LINGER_BYTES, RequestTimedOut
from app.serving.writing import PacedSocket, SlowReaderSlots


class RequestThreadsWorker(ThreadWorker):
    """gthread's worker with what its request threads do; ServingWorker adds the event loop that feeds them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = ClientLimits.from_env()
        self.head_limits = HeadLimits.of(
            self.cfg.limit_request_line, self.cfg.limit_request_fields, self.cfg.limit_request_field_size
        )
        # Taken by the event loop, given back by the threads (under the lock).
        self.upload_slots = max(1, self.cfg.threads // 2)
        self._uploading = 0
        self.slow_reader_slots = SlowReaderSlots(max(1, self.cfg.threads // 2))
        # Threads hand back connections with bytes already read through here, and wake the loop.
        self._returned: deque[ServingConn] = deque()
        self._wake_out: socket.socket | None = None  # the loop's end is set up when it runs

    def _wake(self) -> None:
        try:
            if self._wake_out is not None:
                self._wake_out.send(b"\0")
        except OSError:  # full: a wake is pending already; closed: the worker is stopping
            pass

    def finish_request(self, fs: Future[tuple[bool, ServingConn]]) -> None:  # type: ignore[override]
        if fs.cancelled():
            self.nr_conns -= 1
            fs.conn.close()  # type: ignore[attr-defined]
            return
        try:
            keepalive, conn = fs.result()
            if not (keepalive and self.alive):
                self.nr_conns -= 1
                conn.close()
                return
            pending = getattr(conn.sock, "pending", None)  # TLS: decrypted bytes waiting inside the SSL object
            if conn.unreader.buffered() or (pending and pending()):
                self._returned.append(conn)
                self._wake()
                return
            conn.sock.setblocking(False)
            conn.set_timeout()
            with self._lock:
                conn.idle = True
                self._keep.append(conn)
                self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_client_socket_readable, conn))
        except Exception:
            self.nr_conns -= 1
            fs.conn.close()  # type: ignore[attr-defined]

    def handle(self, conn: ServingConn) -> tuple[bool, ServingConn]:  # type: ignore[override]
        unreader = conn.unreader
        if conn.uploading and conn.missing is not None:
            unreader.on_received = partial(self._body_received, conn)
        req = None
        keepalive = False
        try:
            req = next(conn.parser)
            if req:
                keepalive = self.handle_request(req, conn)
                if keepalive and (unreader.timed_out or not self._discard_unread_body(conn)):
                    keepalive = False
        except http.errors.NoMoreData as e:
            self.log.debug("Ignored premature client disconnection. %s", e)
        except StopIteration as e:
            self.log.debug("Closing connection. %s", e)
        except ssl.SSLError as e:
            if e.args[0] == ssl.SSL_ERROR_EOF:
                self.log.debug("ssl connection closed")
            else:
                self.handle_error(req, conn.sock, conn.client, e)
        except TimeoutError:
            self.log.debug("Closing a connection whose client did not take its answer within %gs.",
                           self.limits.send_seconds)
        except OSError as e:
            if e.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                self.log.debug("Ignoring a connection the client closed (%s).", errno.errorcode.get(e.errno or 0))
            else:
                self.log.exception("Socket error processing request.")
        except Exception as e:
            self.handle_error(req, conn.sock, conn.client, e)
        finally:
            unreader.on_received = None
            self._release_upload(conn)
        return keepalive, conn

    def handle_request(self, req: Any, conn: ServingConn) -> bool:  # type: ignore[override]
        conn.unreader.expect_body(conn.body_deadline, on_time_out=req.force_close)
        # The answer is written through a paced socket (app.serving.writing); the connection keeps the real one.
        sock = conn.sock
        paced = PacedSocket(sock, self.slow_reader_slots, self.limits.stall_seconds, self.limits.send_seconds)
        conn.sock = paced  # type: ignore[assignment]
        # Work this request hands to the compute pool stops if its client goes away (TLS: its socket's bytes are
        # records, not the client's end, so it is not watched).
        watched = None if self.cfg.is_ssl else sock
        try:
            with client_of_this_thread(watched):
                return bool(super().handle_request(req, conn))
        finally:
            conn.sock = sock
            paced.done()

    def _body_received(self, conn: ServingConn, size: int) -> None:
        # Once its body is all in memory, a request no longer waits on the network: its slot can go to another.
        if conn.missing is not None:
            conn.missing -= size
            if conn.missing <= 0:
                self._release_upload(conn)

    def _release_upload(self, conn: ServingConn) -> None:
        # Read without the lock first: only the event loop sets ``uploading``, before it hands the connection to
        # the thread that gets here, so False is final; most requests never held a slot.
        if not conn.uploading:
            return
        with self._lock:
            if not conn.uploading:
                return
            conn.uploading, conn.missing = False, None
            self._uploading -= 1
        self._wake()

    def _discard_unread_body(self, conn: ServingConn) -> bool:
        """True when the body ended within the linger bounds (keep the connection), False to close it."""
        body = conn.parser.mesg.body
        conn.unreader.linger()
        budget = LINGER_BYTES
        try:
            while budget > 0:
                chunk = body.read(min(65536, budget))
                if not chunk:
                    return True
                budget -= len(chunk)
            return False
        except Exception:  # a stalled, broken or gone client: closing is the answer to each
            self.log.debug("Closing a connection whose unread request body did not end in time.")
            return False

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """gunicorn's refusals in the error envelope, never its HTML page; nothing the client sent is quoted back
        (the log line quotes it, and the logger redacts keys from it)."""
        addr = addr or ("", -1)  # a unix socket
        if isinstance(exc, RequestTimedOut):
            answer = exc.answer
            self.log.info("Refused a request from ip=%s with %s: %s", addr[0], answer.status, answer.message)
        else:
            found = refusals.for_parse_error(exc, self.head_limits)
            if found is None:
                if hasattr(req, "uri"):
                    self.log.exception("Error handling request %s", req.uri)
                else:
                    self.log.exception("Error handling request (no URI read)")
                found = refusals.UNEXPECTED
            else:
                self.log.warning("Invalid request from ip=%s: %s", addr[0], exc)
            answer = found
        try:
            client.settimeout(self.limits.send_seconds)
            client.sendall(answer.encode())
        except Exception:
            self.log.debug("Failed to send error message.")
