"""A series' detector state saved in the database (app.monitors.state.snapshots): a process that does not hold it (a
restart, another process) replays the points stored since the save instead of rebuilding from the stored points,
and gives the verdicts one process would have given. On SQLite and on PostgreSQL."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select, update

from app.compute.detect import snapshot
from app.compute.detect.snapshot import LAYOUT
from app.compute.detect.streaming import StreamingDetector, lookback_rows
from app.monitors.records import monitor_snapshots_table
from app.monitors.state.snapshots import FIRST_SAVE_ROWS, SNAPSHOT_ROWS
from app.monitors.store import REBUILD_ROWS
from tests.support import build_app, new_key, services_of, settings_for

BIG_LIMITS = {"per_minute": 1_000_000, "per_hour": 10_000_000, "per_day": 100_000_000}
ROWS = 3 * SNAPSHOT_ROWS
START = 1_600_000_000


@pytest.fixture(scope="module")
def monitor_app(module_database_url: str) -> Iterator[Flask]:
    app = build_app(settings_for(module_database_url, max_points=25_000))
    yield app
    app.extensions["monitors"].sender.stop()
    services_of(app).close()


@pytest.fixture(scope="module")
def owner(monitor_app: Flask) -> dict[str, str]:
    plain, _ = new_key(monitor_app, permissions=("read", "write", "delete"), account_id="acct-s", **BIG_LIMITS)
    return {"Authorization": f"Bearer {plain}"}


@pytest.fixture
def client(monitor_app: Flask) -> FlaskClient:
    return monitor_app.test_client()


def stream(count: int) -> tuple[list[str], list[float]]:
    noise = random.Random(5)
    values = [120 + 60 * math.sin(2 * math.pi * i / 24) + noise.gauss(0, 3) + (400 if i % 797 == 0 else 0)
              for i in range(count)]
    stamps = [time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(START + 3600 * i)) for i in range(count)]
    return stamps, values


def index_of(epoch: int) -> int:
    """The stream's row at ``epoch``."""
    return round((epoch - START) / 3600)


def seeded(client: FlaskClient, owner: dict[str, str], stamps: list[str], values: list[float]) -> tuple[str, int]:
    """A monitor holding the stream's points, sent in appends of 500: (its id, its series' id)."""
    monitor_id = client.post("/monitors", headers=owner, json={"name": "depth", "data_frequency": "Hours",
                                                               "retention_points": 100_000}).get_json()["id"]
    for start in range(0, len(stamps), 500):
        answer = client.post(f"/monitors/{monitor_id}/points", headers=owner,
                             json={"timestamps": stamps[start:start + 500], "values": values[start:start + 500]})
        assert answer.status_code == 200, answer.get_json()
    series_id = client.get(f"/monitors/{monitor_id}", headers=owner).get_json()["series"][0]["id"]
    return monitor_id, int(series_id)


def rejudged(reason: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("forecast_monitor_points_rejudged_total", {"reason": reason}) or 0.0


def saved(monitor_app: Flask, series_id: int) -> Any:
    with services_of(monitor_app).database.engine.connect() as connection:
        return connection.execute(select(monitor_snapshots_table)
                                  .where(monitor_snapshots_table.c.series_id == series_id)).first()


def change_saved(monitor_app: Flask, series_id: int, **values: Any) -> None:
    with services_of(monitor_app).database.engine.begin() as connection:
        connection.execute(update(monitor_snapshots_table)
                           .where(monitor_snapshots_table.c.series_id == series_id).values(**values))


def append_rebuilt(client: FlaskClient, owner: dict[str, str], monitor_app: Flask, ids: tuple[str, int],
                   stamps: list[str], values: list[float], first: int) -> tuple[dict[str, Any], float]:
    """Appends the stream from row ``first`` to monitor ``ids`` (monitor id, series id) in a process that holds
    no state for it: (the answer, the points judged again to rebuild the state)."""
    monitor_id, series_id = ids
    monitor_app.extensions["monitors"].cache.drop(series_id)
    rebuilt = rejudged("rebuild")
    answer = client.post(f"/monitors/{monitor_id}/points", headers=owner,
                         json={"timestamps": stamps[first:], "values": values[first:]})
    assert answer.status_code == 200, answer.get_json()
    return answer.get_json(), rejudged("rebuild") - rebuilt


def test_a_process_without_the_state_replays_only_the_points_since_it_was_saved(
    client: FlaskClient, owner: dict[str, str], monitor_app: Flask
) -> None:
    stamps, values = stream(ROWS + 48)
    monitor_id, series_id = seeded(client, owner, stamps[:ROWS], values[:ROWS])
    row = saved(monitor_app, series_id)
    assert row is not None and row.layout == LAYOUT
    stored_after = ROWS - 1 - index_of(row.last_epoch)  # an append that saves nothing leaves fewer than SNAPSHOT_ROWS
    assert 0 <= stored_after < SNAPSHOT_ROWS
    monitor_app.extensions["monitors"].cache.drop(series_id)  # what a restart or another process sees
    caught_up, rebuilt = rejudged("catch_up"), rejudged("rebuild")
    after = client.post(f"/monitors/{monitor_id}/points", headers=owner,
                        json={"timestamps": stamps[ROWS:], "values": values[ROWS:]}).get_json()
    assert rejudged("rebuild") == rebuilt  # nothing rebuilt: 3,000 stored points would have been replayed
    assert rejudged("catch_up") - caught_up == stored_after
    whole = client.post("/anomalies", headers=owner,
                        json={"series": [{"timestamps": stamps, "values": values}], "data_frequency": "Hours"})
    assert after["anomaly_score"] == whole.get_json()["anomaly_score"][ROWS:]


def spoilt_state(monitor_app: Flask, series_id: int, **fields: Any) -> bytes:
    """The series' saved state with ``fields`` changed: bytes that decode, a state that is not the detector's."""
    state = snapshot.decode(bytes(saved(monitor_app, series_id).state))
    for name, value in fields.items():
        if name == "errors_ring":
            state.errors_ring[3] = value
        else:
            setattr(state, name, value)
    return snapshot.encode(state)


@pytest.mark.parametrize("spoilt", ["another release's layout", "unreadable bytes", "before a not-an-anomaly",
                                    "a step of 0", "a NaN in a window", "an infinite last value"])
def test_a_saved_state_that_cannot_stand_for_the_series_is_rebuilt(
    client: FlaskClient, owner: dict[str, str], monitor_app: Flask, spoilt: str
) -> None:
    stamps, values = stream(ROWS + 10)
    monitor_id, series_id = seeded(client, owner, stamps[:ROWS], values[:ROWS])
    if spoilt == "another release's layout":
        change_saved(monitor_app, series_id, layout="0" * 16)
    elif spoilt == "unreadable bytes":
        change_saved(monitor_app, series_id, state=b"\x00not a state")
    elif spoilt == "a step of 0":
        change_saved(monitor_app, series_id, state=spoilt_state(monitor_app, series_id, step=0.0))
    elif spoilt == "a NaN in a window":
        change_saved(monitor_app, series_id, state=spoilt_state(monitor_app, series_id, errors_ring=math.nan))
    elif spoilt == "an infinite last value":
        change_saved(monitor_app, series_id, state=spoilt_state(monitor_app, series_id, last=math.inf))
    else:
        assert client.post(f"/monitors/{monitor_id}/feedback", headers=owner,
                           json={"timestamp": stamps[ROWS - 5], "is_anomaly": False}).status_code == 200
    answer, replayed = append_rebuilt(client, owner, monitor_app, (monitor_id, series_id), stamps, values, ROWS)
    assert replayed == ROWS
    if spoilt != "before a not-an-anomaly":  # the same verdicts as from the rebuilt state
        whole = client.post("/anomalies", headers=owner,
                            json={"series": [{"timestamps": stamps, "values": values}], "data_frequency": "Hours"})
        assert answer["anomaly_score"] == whole.get_json()["anomaly_score"][ROWS:]
    # The rebuilt state is saved at once, for the next process that lacks it.
    row = saved(monitor_app, series_id)
    assert row is not None and row.layout == LAYOUT and index_of(row.last_epoch) == len(stamps) - 1


def test_a_state_its_detector_fails_on_fails_that_series_alone_and_is_rebuilt(
    client: FlaskClient, owner: dict[str, str], monitor_app: Flask
) -> None:
    stamps, values = stream(ROWS + 2)
    broken, series_id = seeded(client, owner, stamps[:ROWS], values[:ROWS])
    healthy, _ = seeded(client, owner, stamps[:ROWS], values[:ROWS])
    # A ring position past its ring's end decodes (every number is finite) but fails the first row judged with it.
    change_saved(monitor_app, series_id, state=spoilt_state(monitor_app, series_id, chooser_next=10**9))
    monitor_app.extensions["monitors"].cache.drop(series_id)
    both = client.post("/monitors/points", headers=owner, json={"points": [
        {"monitor_id": monitor_id, "timestamp": stamps[ROWS], "value": values[ROWS]} for monitor_id in (broken, healthy)
    ]})
    assert both.status_code == 207, both.get_json()  # one monitor refused, one stored
    counts = {monitor_id: client.get(f"/monitors/{monitor_id}", headers=owner).get_json()["series"][0]["point_count"]
              for monitor_id in (broken, healthy)}
    assert counts == {broken: ROWS, healthy: ROWS + 1}, both.get_json()
    assert saved(monitor_app, series_id) is None  # the state it failed from is not restored again
    again = client.post(f"/monitors/{broken}/points", headers=owner,
                        json={"timestamps": stamps[ROWS:], "values": values[ROWS:]})
    assert again.status_code == 200, again.get_json()
    whole = client.post("/anomalies", headers=owner,
                        json={"series": [{"timestamps": stamps, "values": values}], "data_frequency": "Hours"})
    assert again.get_json()["anomaly_score"] == whole.get_json()["anomaly_score"][ROWS:]


def test_a_rebuild_replays_only_the_points_its_step_and_season_need(
    client: FlaskClient, owner: dict[str, str], monitor_app: Flask
) -> None:
    # Hourly points, a daily season of 24 rows and no week's pattern: 23,101 rows, not the 71,651 of the longest
    # season with the week's pattern. The verdicts are the detector's over the replayed points.
    depth = StreamingDetector(data_frequency="Hours").rebuild_rows([START + 3600.0 * i for i in range(11)])
    assert depth == lookback_rows(24, 3600.0) == 23_101 < REBUILD_ROWS
    count = depth + 1_500
    stamps, values = stream(count + 10)
    monitor_id, series_id = seeded(client, owner, stamps[:count], values[:count])
    change_saved(monitor_app, series_id, layout="0" * 16)  # as after an upgrade whose detector keeps another state
    answer, replayed = append_rebuilt(client, owner, monitor_app, (monitor_id, series_id), stamps, values, count)
    assert replayed == depth
    over_them = client.post("/anomalies", headers=owner, json={
        "series": [{"timestamps": stamps[count - depth:], "values": values[count - depth:]}],
        "data_frequency": "Hours"}).get_json()
    assert answer["anomaly_score"] == over_them["anomaly_score"][depth:]
    assert answer["is_anomaly"] == over_them["is_anomaly"][depth:]


def test_a_process_far_behind_takes_the_state_another_process_saved(
    client: FlaskClient, owner: dict[str, str], monitor_app: Flask, module_database_url: str
) -> None:
    # This process holds the series' state after 2,000 points; another process then judges 3,000 more, saving
    # its state as it goes. Back here, the other process's saved state is the nearer start: at most the points
    # it left unsaved are replayed, not the 3,000, and the verdicts are one process's.
    stamps, values = stream(5_010)
    monitor_id, series_id = seeded(client, owner, stamps[:2_000], values[:2_000])
    held = monitor_app.extensions["monitors"].cache.peek(series_id)
    assert held is not None
    other_app = build_app(settings_for(module_database_url, max_points=25_000))
    try:
        other = other_app.test_client()
        for start in range(2_000, 5_000, 100):
            assert other.post(f"/monitors/{monitor_id}/points", headers=owner, json={
                "timestamps": stamps[start:start + 100], "values": values[start:start + 100]}).status_code == 200
    finally:
        other_app.extensions["monitors"].sender.stop()
        services_of(other_app).close()
    row = saved(monitor_app, series_id)
    unsaved = 4_999 - index_of(row.last_epoch)
    assert row.revision > held.revision and 0 <= unsaved < SNAPSHOT_ROWS
    caught_up, rebuilt = rejudged("catch_up"), rejudged("rebuild")
    after = client.post(f"/monitors/{monitor_id}/points", headers=owner,
                        json={"timestamps": stamps[5_000:], "values": values[5_000:]}).get_json()
    assert rejudged("catch_up") - caught_up == unsaved and rejudged("rebuild") == rebuilt
    assert monitor_app.extensions["monitors"].cache.peek(series_id) is not held
    whole = client.post("/anomalies", headers=owner,
                        json={"series": [{"timestamps": stamps, "values": values}], "data_frequency": "Hours"})
    assert after["anomaly_score"] == whole.get_json()["anomaly_score"][5_000:]


def test_saved_states_go_with_their_monitor(client: FlaskClient, owner: dict[str, str], monitor_app: Flask) -> None:
    stamps, values = stream(ROWS)  # saved once at least, whatever its series' share of SNAPSHOT_ROWS
    monitor_id, series_id = seeded(client, owner, stamps, values)
    assert saved(monitor_app, series_id) is not None
    assert client.delete(f"/monitors/{monitor_id}", headers=owner).status_code == 204
    with services_of(monitor_app).database.engine.connect() as connection:
        left = connection.scalar(select(func.count()).select_from(monitor_snapshots_table)
                                 .where(monitor_snapshots_table.c.monitor_id == monitor_id))
    assert left == 0


@pytest.mark.parametrize("points", [40, 300, 700])
def test_a_young_series_is_saved_often_enough_that_another_process_replays_at_most_about_half_of_it(
    client: FlaskClient, owner: dict[str, str], monitor_app: Flask, points: int
) -> None:
    stamps, values = stream(points + 5)
    monitor_id = client.post("/monitors", headers=owner, json={"name": "young", "data_frequency": "Hours"}
                             ).get_json()["id"]
    for start in range(0, points, 10):  # a point at a time would do the same, slower
        assert client.post(f"/monitors/{monitor_id}/points", headers=owner,
                           json={"timestamps": stamps[start:start + 10], "values": values[start:start + 10]}
                           ).status_code == 200
    series_id = int(client.get(f"/monitors/{monitor_id}", headers=owner).get_json()["series"][0]["id"])
    row = saved(monitor_app, series_id)
    if points < FIRST_SAVE_ROWS:
        assert row is None  # cheaper to replay than to save
        return
    assert row is not None and row.layout == LAYOUT
    stored_after = points - 1 - index_of(row.last_epoch)
    # Saved at about 64, 128, 256, ... of its points (each series a share of the interval later), by appends of 10.
    assert 0 <= stored_after <= points // 2 + 10
    monitor_app.extensions["monitors"].cache.drop(series_id)
    caught_up, rebuilt = rejudged("catch_up"), rejudged("rebuild")
    after = client.post(f"/monitors/{monitor_id}/points", headers=owner,
                        json={"timestamps": stamps[points:], "values": values[points:]}).get_json()
    assert rejudged("rebuild") == rebuilt and rejudged("catch_up") - caught_up == stored_after
    whole = client.post("/anomalies", headers=owner,
                        json={"series": [{"timestamps": stamps, "values": values}], "data_frequency": "Hours"})
    assert after["anomaly_score"] == whole.get_json()["anomaly_score"][points:]
