"""The background sender: takes due events from the shared queue and POSTs them, never in a request."""

from __future__ import annotations

import logging
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from app.db import Database
from app.monitors import queue
from app.monitors.queue import ClaimedEvent, RetryPolicy
from app.monitors.webhooks import post_event

log = logging.getLogger("app.monitors.sender")

# Idle senders look at the queue this often for events other processes stored (their own wake them at once).
POLL_SECONDS = 1.0
# Parallel deliveries: distinct monitors' head events go out together; one monitor's stay in order.
CONCURRENCY = 8


class DeliverySender:
    def __init__(self, database: Database, *, allow_private: bool, policy: RetryPolicy) -> None:
        self.database = database
        self.allow_private = allow_private
        self.policy = policy
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Starts the sender in this process; a no-op when it already runs here (a forked copy restarts)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive() and self._pid == os.getpid():
                return
            self._stop.clear()
            self._pid = os.getpid()
            self.name = f"{socket.gethostname()}:{self._pid}"
            self._thread = threading.Thread(target=self._run, name="monitor-sender", daemon=True)
            self._thread.start()

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._pid == os.getpid()

    def notify(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and self._pid == os.getpid():
            thread.join(timeout)

    def _run(self) -> None:
        with ThreadPoolExecutor(max_workers=CONCURRENCY, thread_name_prefix="monitor-delivery") as executor:
            while not self._stop.is_set():
                try:
                    events = queue.claim(self.database, limit=CONCURRENCY, policy=self.policy)
                except Exception:  # noqa: BLE001 - a database hiccup must not end the sender
                    log.exception("claiming alert events failed")
                    self._stop.wait(POLL_SECONDS)
                    continue
                if events:
                    for _ in executor.map(self._deliver, events):
                        pass
                    continue
                self._sleep()

    def _sleep(self) -> None:
        timeout = POLL_SECONDS
        try:
            due = queue.next_due(self.database)
        except Exception:  # noqa: BLE001
            due = None
        if due is not None:
            timeout = max(0.01, min(POLL_SECONDS, (due - datetime.now(UTC)).total_seconds()))
        self._wake.wait(timeout)
        self._wake.clear()

    def _deliver(self, event: ClaimedEvent) -> None:
        try:
            outcome = None
            if event.url:
                outcome = post_event(
                    url=event.url,
                    secret=event.secret,
                    event_id=event.id,
                    body=event.body,
                    allow_private=self.allow_private,
                    timeout=self.policy.request_timeout_seconds,
                )
            status = queue.complete(self.database, event=event, outcome=outcome, policy=self.policy, sender=self.name)
            if status != "delivered":
                log.info(
                    "alert delivery not acknowledged",
                    extra={"fields": {"event_id": event.id, "monitor_id": event.monitor_id, "status": status,
                                      "attempt": event.attempt, "error": outcome.error if outcome else None}},
                )
        except Exception:  # noqa: BLE001 - the lease runs out and the event is retried
            log.exception("delivering alert event failed", extra={"fields": {"event_id": event.id}})
