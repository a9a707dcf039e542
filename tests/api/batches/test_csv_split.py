"""A CSV upload split as it is read (its series' rows contiguous), split whole (they are not), an upload that
turns out unreadable after its first chunks were queued, and work whose task the engine lost. The real task
code runs on a real Huey engine (in this process, immediately or from its SQLite queue)."""

from __future__ import annotations

import json
import math
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from huey import Huey
from huey.signals import SIGNAL_ENQUEUED
from sqlalchemy import select

from app.batches import csv_split, stored_results
from app.batches.csv_split import NotGrouped, UploadError, grouped_series, series_from_csv, split_whole
from app.batches.records import batches_table
from app.batches.tasks import batch_tasks, sweep_batches
from app.jobs.resources import WorkerResources
from tests.support import bearer, build_app, immediate_app, new_key, services_of, settings_for

FIELDS = {"forecast_horizon": 3, "data_frequency": "Daily", "forecast_frequency": "Daily"}
QUERY = "&".join(f"{name}={value}" for name, value in FIELDS.items())


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    with immediate_app(tmp_path_factory.mktemp("split"), batch_chunk_series=2) as application:
        yield application


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def key(app: Flask) -> str:
    return new_key(app, ("read", "write", "delete"), account_id="acct-" + uuid.uuid4().hex[:12])[0]


@pytest.fixture
def small_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parser frames of a few rows, so that series straddle frames and chunks are stored between them."""
    monkeypatch.setattr(csv_split, "FIRST_FRAME_ROWS", 7)
    monkeypatch.setattr(csv_split, "FRAME_ROWS", 11)


def series(name: str, count: int = 30, level: float = 10.0) -> dict[str, Any]:
    start = datetime(2026, 1, 1)
    return {"id": name, "timestamps": [(start + timedelta(days=i)).strftime("%Y-%m-%dT%H:%M:%S") for i in range(count)],
            "values": [level + 3 * math.sin(i / 3) + 0.1 * i for i in range(count)]}


def rows_of(one: dict[str, Any], start: int = 0, end: int | None = None) -> list[str]:
    return [f"{one['id']},{stamp},{'' if value is None else value if isinstance(value, str) else repr(value)}"
            for stamp, value in list(zip(one["timestamps"], one["values"], strict=True))[start:end]]


def csv_text(rows: list[str]) -> str:
    return "unique_id,timestamp,value\n" + "\n".join(rows) + "\n"


class Enqueued:
    """The chunk tasks the engine is given, each with whether the batch's split had finished by then."""

    def __init__(self, app: Flask) -> None:
        self.services = services_of(app)
        self.chunks: list[tuple[int, bool]] = []

    def __call__(self, signal: str, task: Any, *args: Any) -> None:
        if task.name == "batches.chunk":
            batch_id, seq = task.args
            with self.services.database.transaction() as connection:
                prepared = connection.scalar(select(batches_table.c.prepared).where(batches_table.c.id == batch_id))
                self.chunks.append((seq, bool(prepared)))

    def __enter__(self) -> Enqueued:
        self.services.jobs.signal(SIGNAL_ENQUEUED)(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.services.jobs.disconnect_signal(self, SIGNAL_ENQUEUED)


def submit_csv(client: FlaskClient, key: str, text: str) -> str:
    answer = client.post(f"/batches?{QUERY}", data=text, headers={**bearer(key), "Content-Type": "text/csv"})
    assert answer.status_code == 202, answer.get_data(as_text=True)
    return answer.get_json()["id"]


def results(client: FlaskClient, key: str, batch_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/batches/{batch_id}/results", headers=bearer(key))
    return [json.loads(line) for line in answer.get_data(as_text=True).splitlines()]


def json_results(client: FlaskClient, key: str, body_series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answer = client.post("/batches", json={"series": body_series, **FIELDS}, headers=bearer(key))
    assert answer.status_code == 202, answer.get_data(as_text=True)
    return results(client, key, answer.get_json()["id"])


def test_grouped_series_are_queued_as_they_are_read_with_the_json_batch_results(
    app: Flask, client: FlaskClient, key: str, small_frames: None,
) -> None:
    body = [series(f"s{i}", level=10.0 + i) for i in range(5)]
    body[1]["values"][4] = None  # an empty cell: a missing value, left out as null is
    body[3] = {**body[3], "timestamps": body[3]["timestamps"][:5], "values": body[3]["values"][:5]}  # too short
    with Enqueued(app) as enqueued:
        batch_id = submit_csv(client, key, csv_text([row for one in body for row in rows_of(one)]))
    done = client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()
    assert done["status"] == "done" and done["progress"] == {"total": 5, "done": 4, "failed": 1}
    assert results(client, key, batch_id) == json_results(client, key, body)
    # Chunks of 1, 2 and 2 series, each queued while the rest of the file was still to be read.
    assert enqueued.chunks == [(0, False), (1, False), (2, False)]


def test_series_met_again_further_on_split_the_file_whole_with_the_same_results(
    app: Flask, client: FlaskClient, key: str, small_frames: None,
) -> None:
    body = [series(f"s{i}", level=10.0 + i) for i in range(4)]
    # s0's last rows come after the other series: found only after the first chunks were queued.
    rows = [*rows_of(body[0], 0, 20), *rows_of(body[1]), *rows_of(body[2]), *rows_of(body[0], 20),
            *rows_of(body[3])]
    with Enqueued(app) as enqueued:
        batch_id = submit_csv(client, key, csv_text(rows))
    done = client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()
    assert done["status"] == "done" and done["progress"] == {"total": 4, "done": 4, "failed": 0}
    assert results(client, key, batch_id) == json_results(client, key, body)
    streamed = [seq for seq, prepared in enqueued.chunks if not prepared]
    assert streamed and [seq for seq, prepared in enqueued.chunks if prepared] == [0, 1, 2]


def test_interleaved_rows_are_split_whole(app: Flask, client: FlaskClient, key: str) -> None:
    body = [series(f"s{i}", level=10.0 + i) for i in range(3)]
    by_series = [rows_of(one) for one in body]
    rows = [row for at_one_time in zip(*by_series, strict=True) for row in at_one_time]  # sorted by time
    with Enqueued(app) as enqueued:
        batch_id = submit_csv(client, key, csv_text(rows))
    assert results(client, key, batch_id) == json_results(client, key, body)
    assert enqueued.chunks == [(0, True), (1, True)]


def test_an_unreadable_row_after_the_first_chunks_fails_the_batch_as_a_whole_file_split_would(
    app: Flask, client: FlaskClient, key: str, small_frames: None,
) -> None:
    body = [series(f"s{i}", level=10.0 + i) for i in range(4)]
    text = csv_text([*rows_of(body[0]), *rows_of(body[1]), *rows_of(body[2]), "s3,2026-01-01T00:00:00,1,2,3",
                     *rows_of(body[3])])
    with pytest.raises(UploadError) as whole:
        series_from_csv(iter([text.encode()]), max_series=100)
    with Enqueued(app) as enqueued:
        batch_id = submit_csv(client, key, text)
    assert enqueued.chunks and not any(prepared for _, prepared in enqueued.chunks)
    failed = client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()
    # The first series were computed while the file was read; the batch reports what it would have reported
    # had the error been found first: failed, the same error, no results.
    assert failed["status"] == "failed" and failed["error"] == whole.value.envelope
    assert failed["progress"] == {"total": 4, "done": 0, "failed": 0}
    assert "line 92" in failed["error"]["details"]["issue"]
    assert list(stored_results.done_outputs(services_of(app).database, batch_id)) == []


def spool(text: str) -> IO[bytes]:
    """The upload as the worker holds it: a temporary file."""
    spooled = tempfile.TemporaryFile()
    spooled.write(text.encode())
    spooled.seek(0)
    return spooled


def test_the_streamed_split_gives_the_whole_split_series_one_by_one(small_frames: None) -> None:
    body = [series(f"s{i}", count=3 + 4 * i, level=float(i)) for i in range(6)]
    body[2]["values"][1] = None  # missing
    body[3]["values"][2] = "abc"  # not a number: every value of its frame is read one by one
    body[4]["values"][0] = math.nan
    text = csv_text([row for one in body for row in rows_of(one)])
    whole = list(split_whole(spool(text), max_series=10))
    assert json.dumps(list(grouped_series(spool(text), max_series=10))) == json.dumps(whole)
    assert [one["id"] for one in whole] == [f"s{i}" for i in range(6)]
    with pytest.raises(UploadError) as too_many:
        list(grouped_series(spool(text), max_series=5))
    with pytest.raises(UploadError) as too_many_whole:
        split_whole(spool(text), max_series=5)
    assert too_many.value.envelope == too_many_whole.value.envelope


def test_the_first_series_comes_out_before_the_rest_of_the_file_is_read(small_frames: None) -> None:
    text = csv_text([*rows_of(series("a", 3)), *rows_of(series("b", 3)), *(["x"] * 40), "b,1,2,3,4"])
    split = grouped_series(spool(text), max_series=10)
    assert next(split)["id"] == "a"
    with pytest.raises(UploadError):
        list(split)
    with pytest.raises(NotGrouped):
        list(grouped_series(spool(csv_text([*rows_of(series("a", 3)), "b,1,1", "a,2,2"])), max_series=10))


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
