"""A generic pool of worker processes: numeric work (forecasts, detections) runs there, so the web threads
stay free and a stuck computation can be killed.

Each worker is a spawned process with one BLAS thread that takes one piece of work at a time over a pipe.
Work past its timeout kills its worker, which is replaced in the background; so does a worker crash. A worker
found dead before it took its work (killed while idle) is replaced too, and the work goes to another. Work whose
request's client went away (``client_of_this_thread``: the serving worker names each request's socket) is
stopped: it is never handed over if the client left while it waited, and a running one is interrupted in its
worker (SIGUSR1), which then takes new work; a worker that does not answer the interruption at once is replaced.
The pool knows nothing of what it computes: work is any picklable object with ``run()``, which may raise WorkFailed
with a message safe to show, and the pool reports its ready count through a callback. What a worker process runs is
app.compute.pool_process. ("Jobs" are something
else: the background jobs of app.jobs.)
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import queue
import select
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any

from app.compute.clients import client_left, current_client
from app.compute.clients import client_of_this_thread as client_of_this_thread  # the serving worker names it
from app.compute.pool_process import CANCEL_SIGNAL, Work, worker_main
from app.compute.pool_process import WorkFailed as WorkFailed  # raised by work, caught by callers of the pool
from app.compute.pool_process import pin_blas_threads as pin_blas_threads  # called by the process's entry points

log = logging.getLogger("app.compute.pool")


class PoolError(Exception):
    """A piece of work could not be computed by the pool; the message is safe to show a client."""

    retry_after: int | None = None


class WorkTimeout(PoolError):
    pass


class WorkerCrashed(PoolError):
    pass


class PoolBusy(PoolError):
    retry_after = 5


class PoolClosed(PoolError):
    """The process is stopping: its workers are gone, so work waiting for one (or running on one) ends now rather
    than at its deadline, which held a stopping server for the whole forecast timeout."""

    retry_after = 5


class WorkError(PoolError):
    pass


class ClientGone(PoolError):
    """The request's client closed its connection: its work was stopped (or never started), nobody reads it."""


STOPPING = "The server is stopping; retry shortly."
GONE = "The client closed the connection; the computation was stopped."
# How often work waiting for a free worker looks whether the pool was closed (or its client left) meanwhile.
CLOSED_CHECK_SECONDS = 0.25
# How long an interrupted worker may take to answer before it is killed and replaced.
CANCEL_GRACE_SECONDS = 1.0

class _NeverTaken(Exception):
    """The worker some work was sent to died without reading it: the work can run on another."""



class _Worker:
    def __init__(self, context: multiprocessing.context.BaseContext, warm_up: str | None) -> None:
        self.connection, child = context.Pipe(duplex=True)
        self.process: BaseProcess = context.Process(target=worker_main, args=(child, warm_up), daemon=True)
        self.started_at = time.perf_counter()
        self.process.start()
        child.close()
        self.startup_seconds: float | None = None
        self._kill_lock = threading.Lock()
        # Connection.poll builds, registers and closes a selector on every call; one poll object kept for the
        # worker's pipe answers the same question without that work, which every forecast's hand-off would repeat.
        self._readable = select.poll()
        self._readable.register(self.connection.fileno(), select.POLLIN)

    def wait_for_answer(self, timeout: float) -> bool:
        """True once the worker's answer (or its end: a closed pipe reads as EOF) can be read."""
        return bool(self._readable.poll(max(0, math.ceil(timeout * 1000))))

    def idle_and_alive(self) -> bool:
        """For a worker waiting for work: its process runs and its pipe is quiet. An idle worker has nothing to say,
        so a readable pipe means its end (EOF, hang-up) or a stray message: either way it cannot take work.
        The process check alone could miss a death another thread has already reaped."""
        return not self.connection.closed and self.process.is_alive() and not self.wait_for_answer(0)

    def wait_ready(self, timeout: float) -> bool:
        try:
            if not self.connection.poll(timeout):
                return False
            message = self.connection.recv()
        except (EOFError, OSError):  # died while warming up (killed, or the server is stopping)
            return False
        self.startup_seconds = time.perf_counter() - self.started_at
        return message[0] == "ready"

    def kill(self) -> None:
        # The pool's close() and a spawn thread that sees the pool closing may both kill one worker; closing
        # its pipe twice would close a descriptor number the process may already have reused.
        with self._kill_lock:
            if self.connection.closed:
                return
            if self.process.is_alive():
                self.process.kill()
            self.process.join(timeout=5)
            self.connection.close()


class WorkerPool:
    def __init__(
        self,
        *,
        workers: int,
        timeout_seconds: float,
        queue_limit: int,
        startup_timeout: float = 120.0,
        warm_up: str | None = None,
        on_ready_change: Callable[[int], None] | None = None,
    ):
        """``warm_up`` names a "module:function" each worker runs before it takes work; ``on_ready_change``
        hears the number of ready workers whenever it changes (metrics, readiness)."""
        self.size = max(1, workers)
        self.warm_up = warm_up
        self.on_ready_change = on_ready_change
        self.timeout_seconds = timeout_seconds
        self.queue_limit = queue_limit
        self.startup_timeout = startup_timeout
        self._context = multiprocessing.get_context("spawn")
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._alive = 0
        self._starting = 0
        self._admitted = 0
        self._lock = threading.Lock()
        self._closed = False
        self._workers: set[_Worker] = set()
        self._started = False
        self.startup_seconds: list[float] = []

    def start(self, *, wait: bool = False) -> None:
        """Spawns the workers (once; later calls only wait when asked). gunicorn's post_worker_init calls
        this at server start; the first computation or readiness probe calls it otherwise (flask run, tests)."""
        with self._lock:
            already, self._started = self._started or self._closed, True
        if already:
            if wait:
                self._wait_until_ready()
            return
        threads = [self._spawn_in_background() for _ in range(self.size)]
        if wait:
            for thread in threads:
                thread.join()

    def _spawn_in_background(self) -> threading.Thread:
        thread = threading.Thread(target=self._spawn, name="pool-worker-spawn", daemon=True)
        thread.start()
        return thread

    def _spawn(self) -> None:
        pin_blas_threads()
        with self._lock:
            self._starting += 1
        try:
            worker = _Worker(self._context, self.warm_up)
            with self._lock:
                self._workers.add(worker)
            ready = worker.wait_ready(self.startup_timeout)
        finally:
            with self._lock:
                self._starting -= 1
        if ready and not self._closed:
            with self._lock:
                self._alive += 1
                if worker.startup_seconds is not None:
                    self.startup_seconds.append(worker.startup_seconds)
            self._publish_ready()
            self._idle.put(worker)
            return
        self._discard(worker)
        if not self._closed:
            log.error("a worker process failed to start; retrying in 5 s")
            time.sleep(5)
            self._spawn_in_background()

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while self.ready_workers < self.size and time.monotonic() < deadline and not self._closed:
            time.sleep(0.05)

    @property
    def ready_workers(self) -> int:
        with self._lock:
            return self._alive

    def check_idle_workers(self) -> int:
        """Replaces idle workers that died (killed, out of memory) and returns the ready count. A dead idle worker
        is otherwise noticed only by the work handed to it, so readiness would count it meanwhile."""
        for _ in range(self._idle.qsize()):
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                break
            if worker.idle_and_alive():
                self._idle.put(worker)
            else:
                self._replace(worker, reason="died while idle")
        return self.ready_workers

    def submit(self, work: Work) -> Any:
        self.start()
        # Forecasts admitted (running or queued) are capped below the web threads, so /verify and the
        # other cheap endpoints always find a free thread however many forecasts arrive.
        with self._lock:
            if self._alive == 0 and self._starting == 0:
                raise PoolBusy("No workers are running.")
            if self._admitted >= self.size + self.queue_limit:
                raise PoolBusy("The workers are saturated; retry shortly.")
            self._admitted += 1
        client: socket.socket | None = current_client()
        try:
            deadline = time.monotonic() + self.timeout_seconds
            while True:
                if self._closed:
                    raise PoolClosed(STOPPING)
                if client is not None and client_left(client):
                    raise ClientGone(GONE)
                try:
                    worker = self._idle.get(timeout=min(CLOSED_CHECK_SECONDS, max(0.0, deadline - time.monotonic())))
                except queue.Empty as exc:
                    if time.monotonic() < deadline:
                        continue
                    raise PoolBusy("No worker became free in time; retry shortly.") from exc
                # A worker that died while idle never took this work: another (or its replacement) runs it.
                if not worker.idle_and_alive() or not self._hand_over(worker, work):
                    self._replace(worker, reason="died while idle")
                    continue
                try:
                    return self._run_on(worker, client)
                except _NeverTaken:
                    continue
        finally:
            with self._lock:
                self._admitted -= 1

    @staticmethod
    def _hand_over(worker: _Worker, work: Work) -> bool:
        """False when the work could not be sent: the worker is gone and never saw it."""
        try:
            worker.connection.send(work)
        except OSError:  # a broken pipe, mostly; a partly written work is as lost, with the worker
            return False
        return True

    def _run_on(self, worker: _Worker, client: socket.socket | None = None) -> Any:
        try:
            if not self._wait_for(worker, client):
                self._replace(worker, reason="timeout")
                raise WorkTimeout(f"The computation did not finish within {self.timeout_seconds:g} seconds.")
            status, payload = worker.connection.recv()
        except ConnectionResetError as exc:
            # Its end of the pipe closed with the work still unread in it (Linux resets the pipe then; a worker
            # that read its work and crashed leaves a plain end of file): it was dying when the work was sent, its
            # threads still exiting, so the checks before could not tell yet. The work never ran.
            self._replace(worker, reason="died before taking its work")
            raise _NeverTaken from exc
        except (EOFError, OSError) as exc:
            if self._closed:  # close() ended it: the process is stopping
                raise PoolClosed(STOPPING) from exc
            self._replace(worker, reason="crash")
            raise WorkerCrashed("The worker process stopped unexpectedly.") from exc
        self._idle.put(worker)
        if status == "failed":
            raise WorkError(payload)
        if status == "cancelled":
            raise ClientGone(GONE)
        return payload

    def _wait_for(self, worker: _Worker, client: socket.socket | None) -> bool:
        """True once the worker's answer can be read, False past the timeout. When the client goes away meanwhile,
        the work is interrupted and its answer ("cancelled", or what it had finished) awaited briefly; a worker
        that does not answer then is replaced, and either way the caller learns the client is gone."""
        if client is None:
            return worker.wait_for_answer(self.timeout_seconds)
        deadline = time.monotonic() + self.timeout_seconds
        watch = select.poll()
        watch.register(worker.connection.fileno(), select.POLLIN)
        watch.register(client.fileno(), select.POLLIN | select.POLLRDHUP)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready = dict(watch.poll(max(1, math.ceil(left * 1000))))
            if worker.connection.fileno() in ready:
                return True
            if client.fileno() not in ready:
                continue
            gone = client_left(client)
            if gone is None:  # a next request already sent: the end of this one cannot be watched any more
                watch.unregister(client.fileno())
            elif gone:
                break
        log.info("stopping work whose client went away", extra={"fields": {"pid": worker.process.pid}})
        if worker.process.pid is not None:
            try:
                os.kill(worker.process.pid, CANCEL_SIGNAL)
            except OSError:
                pass  # gone already: reading its end below replaces it
        if worker.wait_for_answer(CANCEL_GRACE_SECONDS):
            return True
        self._replace(worker, reason="did not stop for a client that went away")
        raise ClientGone(GONE)

    def _replace(self, worker: _Worker, *, reason: str) -> None:
        log.warning("replacing worker process", extra={"fields": {"pid": worker.process.pid, "reason": reason}})
        with self._lock:
            self._alive -= 1
        self._publish_ready()
        self._discard(worker)
        if not self._closed:
            self._spawn_in_background()

    def _publish_ready(self) -> None:
        if self.on_ready_change is not None:
            self.on_ready_change(self.ready_workers)

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._workers.discard(worker)
        worker.kill()

    def worker_pids(self) -> list[int]:
        workers = list(self._idle.queue)
        return [w.process.pid for w in workers if w.process.pid is not None]

    def close(self) -> None:
        self._closed = True
        with self._lock:
            admitted = self._admitted
        if admitted:
            log.info("worker pool stopping: %d computation(s) running or waiting end with a retry-later error",
                     admitted)
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                break
            try:
                worker.connection.send(None)
            except OSError:
                pass
            worker.process.join(timeout=2)
        # Workers ignore SIGTERM, so multiprocessing's exit-time terminate() would wait on them forever.
        with self._lock:
            remaining = list(self._workers)
            self._workers.clear()
        for worker in remaining:
            worker.kill()
