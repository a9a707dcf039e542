from __future__ import annotations

from pathlib import Path

from app.jobs.engine import build_engine
from tests.support import REDIS_URL, flush_redis, missing_service, redis_available, settings_for


def test_the_redis_engine_queues_tasks_with_a_priority(tmp_path: Path) -> None:
    """The Prometheus poller is queued with a priority; plain Redis storage refused that, so no Prometheus-backed
    monitor was read once REDIS_URL was set."""
    if not redis_available():
        missing_service(f"Redis is not reachable at {REDIS_URL}")
    flush_redis()
    engine = build_engine(settings_for(f"sqlite:///{tmp_path / 'keys.sqlite3'}", redis_url=REDIS_URL))

    @engine.task(priority=100)
    def urgent() -> None:
        pass

    @engine.task()
    def ordinary() -> None:
        pass

    try:
        ordinary()
        urgent()
        assert engine.pending_count() == 2
        assert engine.dequeue().name.endswith("urgent")  # the higher priority first, though queued second
    finally:
        flush_redis()
