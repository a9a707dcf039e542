"""The background sender: takes due events from the shared queue and POSTs them, never in a request."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections import Counter
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from app.db import Database
from app.monitors.alerts import alertmanager, queue
from app.monitors.alerts.queue import Candidate, ClaimedEvent, RetryPolicy
from app.monitors.alerts.webhooks import WebhookAddressError, parse_url, post_event

log = logging.getLogger("app.monitors.sender")

# Idle senders look at the queue this often for events other processes stored (their own wake them at once).
POLL_SECONDS = 1.0
# Deliveries in flight at once in one process. Each is a thread that mostly waits on a receiver, so this
# bounds how many slow receivers are waited on at once, not CPU; a freed slot is refilled at once.
CONCURRENCY = 16
# In flight at once to one destination (a webhook URL's host and port): a receiver that accepts connections
# and never answers holds this many slots until their timeouts, however many monitors point at it.
PER_DESTINATION = 2
# In flight at once for one account: many dead receivers of one account (each its own destination) still
# leave half the slots to the other accounts.
PER_ACCOUNT = CONCURRENCY // 2
# URLs remembered per full destination for the claim's query to leave out, bounding memory and the query's
# size; past it, a full destination's events can crowd its own account's part of the claim window only.
_URLS_PER_DESTINATION = 1024


def destination_of(url: str) -> str:
    """The receiver a URL reaches, as the caps count it: host and port, whatever the path."""
    try:
        target = parse_url(url)
    except WebhookAddressError:
        return url  # the attempt fails at once; it needs no bucket shared with anything else
    return f"{target.host}:{target.port}"


class InFlight:
    """This process's deliveries in flight, counted per destination and per account: the claim's gate.

    Only the sender's claiming thread admits; delivery threads only release. So the counts the claim looks
    at can only go down behind its back, and a cap is never exceeded."""

    def __init__(self, *, total: int, per_destination: int, per_account: int) -> None:
        self.total = total
        self.per_destination = per_destination
        self.per_account = per_account
        self._lock = threading.Lock()
        self._held: dict[str, tuple[str | None, str | None]] = {}  # event id -> (destination, account)
        self._destinations: Counter[str] = Counter()
        self._accounts: Counter[str] = Counter()
        # The URLs seen for each destination with deliveries in flight: what the claim leaves out when full.
        self._urls: dict[str, set[str]] = {}

    def free(self) -> int:
        with self._lock:
            return self.total - len(self._held)

    def excluded(self) -> tuple[Collection[str], Collection[str]]:
        with self._lock:
            urls = {url for destination, count in self._destinations.items() if count >= self.per_destination
                    for url in self._urls.get(destination, ())}
            accounts = [account for account, count in self._accounts.items() if count >= self.per_account]
        return urls, accounts

    def admit(self, candidate: Candidate) -> bool:
        with self._lock:
            if len(self._held) >= self.total:
                return False
            if candidate.url is None:
                # No webhook any more: the event is cancelled without a request, so it waits on no receiver.
                self._held[candidate.id] = (None, None)
                return True
            destination = destination_of(candidate.url)
            if self._destinations[destination] >= self.per_destination:
                self._remember(destination, candidate.url)
                return False
            if self._accounts[candidate.account_id] >= self.per_account:
                return False
            self._remember(destination, candidate.url)
            self._destinations[destination] += 1
            self._accounts[candidate.account_id] += 1
            self._held[candidate.id] = (destination, candidate.account_id)
            return True

    def _remember(self, destination: str, url: str) -> None:
        seen = self._urls.setdefault(destination, set())
        if len(seen) < _URLS_PER_DESTINATION:
            seen.add(url)

    def release(self, event_id: str) -> None:
        with self._lock:
            destination, account = self._held.pop(event_id, (None, None))
            if destination is not None:
                self._destinations[destination] -= 1
                if self._destinations[destination] <= 0:
                    del self._destinations[destination]
                    self._urls.pop(destination, None)
            if account is not None:
                self._accounts[account] -= 1
                if self._accounts[account] <= 0:
                    del self._accounts[account]


class DeliverySender:
    def __init__(self, database: Database, *, allow_private: bool, policy: RetryPolicy,
                 public_url: str | None = None) -> None:
        self.database = database
        self.public_url = public_url
        self.allow_private = allow_private
        self.policy = policy
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.in_flight = InFlight(total=CONCURRENCY, per_destination=PER_DESTINATION, per_account=PER_ACCOUNT)
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
            # A forked copy inherits the parent's counts of deliveries whose threads it does not have.
            self.in_flight = InFlight(total=CONCURRENCY, per_destination=PER_DESTINATION, per_account=PER_ACCOUNT)
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
        # Every claimed event goes to the pool on its own: a slot is claimed again as soon as its delivery
        # ends, so a slow receiver holds only the slots of its own deliveries, never a whole batch.
        in_flight = self.in_flight
        with ThreadPoolExecutor(max_workers=in_flight.total, thread_name_prefix="monitor-delivery") as executor:
            while not self._stop.is_set():
                # Cleared before the claim, so a wake-up (a new event, a freed slot) during it is not lost.
                self._wake.clear()
                free = in_flight.free()
                claimed_at = datetime.now(UTC)
                if free > 0:
                    try:
                        idle = not queue.any_active(self.database)
                        events = [] if idle else queue.claim(self.database, limit=free, policy=self.policy,
                                                             now=claimed_at, gate=in_flight)
                    except Exception:  # noqa: BLE001 - a database hiccup must not end the sender
                        log.exception("claiming alert events failed")
                        self._stop.wait(POLL_SECONDS)
                        continue
                    if idle:  # nothing waits or is being sent, so nothing falls due before the next look
                        self._wake.wait(POLL_SECONDS)
                        continue
                    for event in events:
                        executor.submit(self._deliver, event, in_flight)
                    if len(events) == free:
                        continue
                self._sleep(after=claimed_at if free > 0 else None)

    def _sleep(self, *, after: datetime | None) -> None:
        """Until woken (a new event, a finished delivery) or the next event falls due. Events due by ``after``
        were left by that claim for want of room, and a finished delivery is what makes room for them."""
        timeout = POLL_SECONDS
        if after is not None:
            try:
                due = queue.next_due(self.database, after=after)
            except Exception:  # noqa: BLE001
                due = None
            if due is not None:
                timeout = max(0.01, min(POLL_SECONDS, (due - datetime.now(UTC)).total_seconds()))
        self._wake.wait(timeout)

    def _deliver(self, event: ClaimedEvent, in_flight: InFlight) -> None:
        try:
            outcome = None
            if event.url and event.destination == alertmanager.DESTINATION:
                outcome = alertmanager.post_alert(
                    base_url=event.url,
                    body=event.body,
                    allow_private=self.allow_private,
                    timeout=self.policy.request_timeout_seconds,
                    public_url=self.public_url,
                )
            elif event.url:
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
        finally:
            in_flight.release(event.id)
            self._wake.set()
