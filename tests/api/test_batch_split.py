"""Work whose task the engine lost (a consumer killed between taking a task and claiming its chunk) is queued
again. The real task code runs on a real Huey engine (in this process, from its SQLite queue)."""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient
from huey import Huey

from app.batches.tasks import batch_tasks, sweep_batches
from app.jobs.resources import WorkerResources
from tests.support import bearer, build_app, new_key, services_of, settings_for

FIELDS = {"forecast_horizon": 3, "data_frequency": "Daily", "forecast_frequency": "Daily"}


def series(name: str, count: int = 30, level: float = 10.0) -> dict[str, Any]:
    start = datetime(2026, 1, 1)
    return {"id": name, "timestamps": [(start + timedelta(days=i)).strftime("%Y-%m-%dT%H:%M:%S") for i in range(count)],
            "values": [level + 3 * math.sin(i / 3) + 0.1 * i for i in range(count)]}


def results(client: FlaskClient, key: str, batch_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/batches/{batch_id}/results", headers=bearer(key))
    return [json.loads(line) for line in answer.get_data(as_text=True).splitlines()]


def test_a_chunk_whose_task_was_lost_is_queued_again_while_other_tasks_wait(tmp_path: Path) -> None:
    app = build_app(settings_for(f"sqlite:///{tmp_path / 'keys.sqlite3'}", batch_chunk_series=2,
                                 batch_lease_seconds=0.3))
    services = services_of(app)
    engine: Huey = services.jobs
    try:
        key = new_key(app, ("read", "write"))[0]
        client = app.test_client()
        body = [series(f"s{i}", level=10.0 + i) for i in range(5)]
        batch_id = client.post("/batches", json={"series": body, **FIELDS}, headers=bearer(key)).get_json()["id"]
        # A consumer took chunk 0's task and was killed before claiming the chunk: the task is gone.
        lost = engine.dequeue()
        assert lost is not None and lost.args == (batch_id, 0)
        resources, batch = WorkerResources(services.settings), batch_tasks(engine)
        time.sleep(0.4)  # a lease passes: chunk 0 was queued and never taken
        assert engine.pending_count() == 2  # chunks 1 and 2 are still waiting
        sweep_batches(resources, batch)
        while (task := engine.dequeue()) is not None:
            engine.execute(task)
        done = client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()
        assert done["status"] == "done" and done["progress"] == {"total": 5, "done": 5, "failed": 0}
        assert [row["id"] for row in results(client, key, batch_id)] == [f"s{i}" for i in range(5)]
        # The lost task running after all (a consumer that was only slow) changes nothing.
        engine.execute(lost)
        assert [row["id"] for row in results(client, key, batch_id)] == [f"s{i}" for i in range(5)]
    finally:
        services.close()
