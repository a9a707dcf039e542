"""What runs inside a pool worker process (app.compute.pool spawns them): one BLAS thread, an optional warm-up,
then one piece of work at a time from the pipe, each answered ("ok", "failed" or "cancelled"). CANCEL_SIGNAL
interrupts the running work, and only that: the worker then takes the next."""

from __future__ import annotations

import os
import signal
from importlib import import_module
from multiprocessing.connection import Connection
from typing import Any, Protocol

_BLAS_THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def pin_blas_threads() -> None:
    # One BLAS thread a process: the pool already runs a worker per core, and BLAS threads on top contend with the
    # other workers for those cores over matrices too small to split; must happen before numpy loads.
    for name in _BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


class Work(Protocol):
    """Anything picklable whose run() computes in a worker (app.compute.forecast.work, app.compute.detect.work)."""

    def run(self) -> Any: ...



class WorkFailed(Exception):
    """Raised by a piece of work whose failure is expected and whose message is safe to show a client."""



# Sent by the pool to interrupt a worker's running work (its request's client went away).
CANCEL_SIGNAL = signal.SIGUSR1


class _Cancelled(BaseException):
    """Raised inside a worker's running work by CANCEL_SIGNAL (a BaseException, so the work's own
    ``except Exception`` does not swallow it)."""


_running = False


def _on_cancel(signum: int, frame: object) -> None:
    # Only work is interrupted: a signal arriving late, with the worker sending its answer or idle, is dropped.
    if _running:
        raise _Cancelled


class _NeverTaken(Exception):
    """The worker some work was sent to died without reading it: the work can run on another."""


def worker_main(connection: Connection, warm_up: str | None) -> None:
    # A group-wide SIGTERM/SIGINT (systemd, Ctrl-C) must not kill forecasts gunicorn is still draining;
    # the parent ends its workers itself, and a closed pipe ends them too.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pin_blas_threads()
    if warm_up:  # "module:function", run once so a worker's first real computation is not the slow one
        module, _, function = warm_up.partition(":")
        getattr(import_module(module), function)()
    signal.signal(CANCEL_SIGNAL, _on_cancel)
    connection.send(("ready", os.getpid()))
    while True:
        try:
            work: Work | None = connection.recv()
        except (EOFError, OSError):
            return
        if work is None:
            return
        connection.send(_answer_of(work))


def _answer_of(work: Work) -> tuple[str, Any]:
    global _running
    try:
        try:
            _running = True
            result = work.run()
            _running = False
            return ("ok", result)
        finally:
            _running = False
    except _Cancelled:
        return ("cancelled", None)
    except WorkFailed as exc:
        return ("failed", str(exc)[:300])
    except Exception as exc:  # the parent answers 500; the worker stays useful
        return ("failed", f"{type(exc).__name__}: {str(exc)[:300]}")
