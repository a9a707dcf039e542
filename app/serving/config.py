"""What the server itself reads from the environment: where to listen, how many processes and threads, and how
long a client may take to send a request. The app's own settings are app/settings.py's."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from app.settings import Settings

DEFAULT_BIND = "127.0.0.1:8000"
DEFAULT_THREADS = 32


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise SystemExit(f"configuration error: {name} must be a number, got {raw!r}") from exc
    if not value > 0:
        raise SystemExit(f"configuration error: {name} must be above 0, got {raw!r}")
    return value


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise SystemExit(f"configuration error: {name} must be a whole number, got {raw!r}") from exc
    if value < 1:
        raise SystemExit(f"configuration error: {name} must be at least 1, got {raw!r}")
    return value


def bind_addresses(env: Mapping[str, str] = os.environ) -> list[str]:
    """An explicit BIND wins; a PaaS hands us only PORT and expects every interface; otherwise loopback."""
    if env.get("BIND"):
        return [env["BIND"]]
    if env.get("PORT"):
        return [f"0.0.0.0:{env['PORT']}"]
    return [DEFAULT_BIND]


def web_processes(env: Mapping[str, str] = os.environ) -> int:
    # One process by default so in-memory rate limits are exact; threads give concurrency.
    return _count(env, "WEB_CONCURRENCY", 1)


def threads_per_process(env: Mapping[str, str] = os.environ) -> int:
    return _count(env, "GUNICORN_THREADS", DEFAULT_THREADS)


def worker_timeout(settings: Settings) -> int:
    """Longer than the forecast timeout, so a slow forecast gets its 500 from us, not a killed worker."""
    return int(settings.forecast_timeout_seconds) + 30


@dataclass(frozen=True)
class ClientLimits:
    """How long a client may take to send a request, and to take its answer.

    gunicorn's ``timeout`` covers a worker process that stops answering its master, not a client: a gthread
    thread reading a request waits as long as the client keeps the connection open. These bounds are ours.
    """

    # From a connection's opening (or a kept-alive connection's first new byte) to the blank line ending the head.
    header_seconds: float = 5.0
    # A body's deadline: this long after its head, plus one second for every `body_min_rate` bytes received, so a
    # body may take as long as it needs while it arrives at that average rate or faster.
    body_seconds: float = 10.0
    body_min_rate: float = 8192.0
    # The longest one write of an answer may wait for the client to take its bytes.
    send_seconds: float = 60.0
    # An answer whose client takes no byte of it for this long is cut off (app.serving.writing).
    stall_seconds: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> ClientLimits:
        return cls(
            header_seconds=_number(env, "HEADER_TIMEOUT_SECONDS", cls.header_seconds),
            body_seconds=_number(env, "BODY_TIMEOUT_SECONDS", cls.body_seconds),
            body_min_rate=_number(env, "BODY_MIN_BYTES_PER_SECOND", cls.body_min_rate),
            send_seconds=_number(env, "SEND_TIMEOUT_SECONDS", cls.send_seconds),
            stall_seconds=_number(env, "SEND_STALL_SECONDS", cls.stall_seconds),
        )

    def body_deadline(self, started: float, received: int) -> float:
        return started + self.body_seconds + received / self.body_min_rate
