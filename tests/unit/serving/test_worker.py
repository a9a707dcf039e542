"""app.serving.worker: the worker's quit handler. The worker itself is tested against a real gunicorn
(tests/e2e/test_slow_clients.py, test_keepalive.py, test_hostile.py)."""

from __future__ import annotations

import logging
import os
import signal
import threading


def test_ctrl_c_while_the_loop_hands_a_request_to_a_thread_stops_the_worker() -> None:
    """Python runs a signal handler between two steps of the main thread, here inside ``tpool.submit`` with the
    thread pool's lock held. gthread's handler shut the pool down right there: it waited forever for that lock,
    and the worker hung until its master killed it (CI saw Ctrl-C leave a server running for 30 s)."""
    from concurrent.futures import ThreadPoolExecutor

    from gunicorn.config import Config

    from app.serving.worker import ServingWorker

    worker = ServingWorker(1, os.getpid(), [], None, 30, Config(), logging.getLogger("test"))
    worker.tpool = ThreadPoolExecutor(1)
    quit_returned = threading.Event()

    def signal_lands_inside_submit() -> None:
        with worker.tpool._shutdown_lock:  # type: ignore[attr-defined]
            worker.handle_quit(signal.SIGINT, None)
        quit_returned.set()

    threading.Thread(target=signal_lands_inside_submit, daemon=True).start()
    assert quit_returned.wait(5), "the quit handler waited for the lock the interrupted step holds"
    assert not worker.alive
    worker.tpool.shutdown()
    worker.tmp.close()
