"""CSV batches at their edges through a real gunicorn and a real `jobs worker`: what the web process counts is
what the worker computes (CR-only line endings), one id limit for both doors, a field past the csv module's
limit, NUL, the per-account quota on stored batch data, formula-shaped ids and long ids in CSV results,
date-only timestamps, and a batch whose every series failed. tests/api/batches/test_uploads.py holds the same
rules in-process; bench/batch_results_memory.py measures the web process's memory on results downloads."""

from __future__ import annotations

import csv
import io
import json
import math
import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any

import pytest
import requests

from tests.support import Server, batch_finished, bearer, cli_in_process, served_with_jobs

pytestmark = pytest.mark.slow

FIELDS = {"forecast_horizon": 5, "data_frequency": "Daily", "forecast_frequency": "Daily"}
QUOTA = 1024 * 1024
ENV = {"FORECAST_WORKERS": "1", "LOG_LEVEL": "WARNING", "BATCH_CHUNK_SERIES": "4",
       "BATCH_ACCOUNT_QUOTA_BYTES": str(QUOTA)}


def create_key(env: dict[str, str], *limits: str) -> str:
    out = cli_in_process("keys", "create", "--permissions", "read,write,delete", *limits, "--json", env=env).stdout
    return json.loads(out)["key"]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str]]]:
    directory = tmp_path_factory.mktemp("uploads-served")
    env = {**ENV, "DATABASE_URL": f"sqlite:///{directory / 'batches.sqlite3'}"}
    with served_with_jobs(env, directory, processes=2) as (server, worker):
        yield server, env
        assert "Traceback" not in server.log() + worker.log()


def generous(env: dict[str, str]) -> str:
    """A key of an account of its own: the quota is per account."""
    return create_key(env, "--per-minute", "100000", "--per-hour", "1000000", "--per-day", "10000000",
                      "--account", "acct-" + uuid.uuid4().hex[:12])


def points(count: int = 30, dated: bool = False) -> list[tuple[str, float]]:
    start = date(2026, 1, 1)
    return [((start + timedelta(days=i)).isoformat() + ("" if dated else "T00:00:00"),
             round(20 + 4 * math.sin(i / 2) + 0.1 * i, 3)) for i in range(count)]


def csv_text(ids: list[str], end: str = "\n", count: int = 30, dated: bool = False) -> str:
    rows = ["unique_id,timestamp,value"] + [f"{name},{stamp},{value}" for name in ids
                                            for stamp, value in points(count, dated)]
    return end.join(rows) + end


def post_csv(server: Server, key: str, text: str | bytes, **query: Any) -> requests.Response:
    return requests.post(f"{server.url}/batches", params={**FIELDS, **query}, data=text.encode()
                         if isinstance(text, str) else text, timeout=60,
                         headers={**bearer(key), "Content-Type": "text/csv"})


def error(answer: requests.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    return answer.json()["error"]


def delete(server: Server, key: str, batch_id: str) -> None:
    assert requests.delete(f"{server.url}/batches/{batch_id}", headers=bearer(key), timeout=10).status_code == 204


def test_cr_only_rows_are_counted_and_computed_alike(service: tuple[Server, dict[str, str]]) -> None:
    server, env = service
    limited = create_key(env, "--per-minute", "100", "--per-hour", "5", "--per-day", "100")
    refused = error(post_csv(server, limited, csv_text([f"s{i}" for i in range(40)], end="\r")), 429)
    assert refused["code"] == "RATE_LIMIT_EXCEEDED" and "40 series" in refused["message"]

    key = generous(env)
    answer = post_csv(server, key, csv_text([f"s{i}" for i in range(9)], end="\r"))
    assert answer.status_code == 202 and answer.json()["progress"]["total"] == 9, answer.text
    done = batch_finished(server, key, answer.json()["id"], timeout=180, interval=0.3)
    assert done["status"] == "done" and done["progress"] == {"total": 9, "done": 9, "failed": 0}
    delete(server, key, done["id"])


def test_one_id_limit_a_long_field_and_nul_are_400s(service: tuple[Server, dict[str, str]]) -> None:
    server, env = service
    key = generous(env)
    long_id = error(post_csv(server, key, csv_text(["x" * 900_000], count=1)), 400)
    assert long_id["details"]["field"] == "unique_id" and long_id["details"]["maximum"] == 200
    field = 'unique_id,timestamp,value\na,2026-01-01T00:00:00,"' + "9" * (140 * 1024) + '"\n'
    too_long = error(post_csv(server, key, field), 400)
    assert too_long["details"]["maximum"] == 131072 and "131,072" in too_long["message"]
    nul = error(post_csv(server, key, csv_text(["a\x00b", "a"])), 400)
    assert "NUL" in nul["message"]
    assert requests.get(f"{server.url}/batches", headers=bearer(key), timeout=10).json() == {"batches": []}


def test_csv_results_of_long_and_formula_shaped_ids(service: tuple[Server, dict[str, str]]) -> None:
    server, env = service
    key = generous(env)
    names = ["=HYPERLINK(\"http://x\")", "+1", "-1", "@A1", "\tTAB", "L" * 200, "plain"]
    body = {**FIELDS, "series": [{"id": name, "timestamps": [t for t, _ in points()],
                                  "values": [v for _, v in points()]} for name in names]}
    answer = requests.post(f"{server.url}/batches", json=body, headers=bearer(key), timeout=60)
    assert answer.status_code == 202, answer.text
    batch_id = answer.json()["id"]
    assert batch_finished(server, key, batch_id, timeout=180, interval=0.3)["status"] == "done"
    with requests.get(f"{server.url}/batches/{batch_id}/results", params={"format": "csv"}, headers=bearer(key),
                      timeout=60, stream=True) as streamed:
        text = b"".join(streamed.iter_content(None)).decode()
    rows = list(csv.reader(io.StringIO(text, newline="")))[1:]
    assert len(rows) == len(names) * 5
    assert [rows[i * 5][0] for i in range(len(names))] == [
        "'=HYPERLINK(\"http://x\")", "'+1", "'-1", "'@A1", "'\tTAB", "L" * 200, "plain"]
    ndjson = [json.loads(line) for line in requests.get(f"{server.url}/batches/{batch_id}/results",
                                                        headers=bearer(key), timeout=60).text.splitlines()]
    assert [row["id"] for row in ndjson] == names
    assert [float(row[3]) for row in rows[:5]] == ndjson[0]["median"]
    delete(server, key, batch_id)


def test_date_only_timestamps_and_a_batch_whose_every_series_failed(service: tuple[Server, dict[str, str]]) -> None:
    server, env = service
    key = generous(env)
    dated = post_csv(server, key, csv_text(["d1", "d2"], dated=True))
    assert dated.status_code == 202, dated.text
    done = batch_finished(server, key, dated.json()["id"], timeout=180, interval=0.3)
    assert done["status"] == "done" and done["progress"] == {"total": 2, "done": 2, "failed": 0}
    single = requests.post(f"{server.url}/forecast", headers=bearer(key), timeout=60, json={
        **FIELDS, "series": [{"timestamps": [t for t, _ in points(dated=True)], "values": [v for _, v in points()]}]})
    assert single.status_code == 200, single.text
    assert single.json()["forecast_timestamps"][0] == "2026-01-31T00:00:00"

    short = post_csv(server, key, csv_text(["a", "b", "c"], count=4))
    failed = batch_finished(server, key, short.json()["id"], timeout=180, interval=0.3)
    assert failed["status"] == "failed" and failed["progress"] == {"total": 3, "done": 0, "failed": 3}
    assert failed["error"]["details"]["failed"] == 3
    results = requests.get(f"{server.url}/batches/{failed['id']}/results", headers=bearer(key), timeout=60)
    assert [json.loads(line)["error"]["details"]["issue"] for line in results.text.splitlines()] == [
        "insufficient data points"] * 3
    for batch_id in (done["id"], failed["id"]):
        delete(server, key, batch_id)


def bulky(prefix: str, count: int) -> str:
    """About 8.8 KB a series (long ids, 40 rows) whose values are not numbers: each series fails at once, so
    the workers spend nothing on them."""
    return "unique_id,timestamp,value\n" + "".join(
        f"{prefix}{i:04d}{'x' * 186},{stamp},n/a\n" for i in range(count) for stamp, _ in points(40))


def test_the_account_quota_on_stored_batch_data(service: tuple[Server, dict[str, str]]) -> None:
    server, env = service
    key = generous(env)
    text = bulky("q", 50)
    assert QUOTA // 3 < len(text) < QUOTA // 2
    first, second = post_csv(server, key, text), post_csv(server, key, text)
    assert first.status_code == second.status_code == 202
    third = post_csv(server, key, text)
    refused = error(third, 429)
    assert refused["details"]["window"] == "stored batch data" and refused["details"]["limit"] == QUOTA
    assert int(third.headers["Retry-After"]) >= 1
    # Chunked (no Content-Length): refused as the pieces arrive, nothing kept.
    chunked = error(requests.post(f"{server.url}/batches", params=FIELDS, data=iter([text.encode()]), timeout=60,
                                  headers={**bearer(key), "Content-Type": "text/csv"}), 429)
    assert chunked["details"]["window"] == "stored batch data"
    assert len(requests.get(f"{server.url}/batches", headers=bearer(key), timeout=10).json()["batches"]) == 2
    too_big = error(post_csv(server, key, bulky("b", 130)), 413)
    assert too_big["details"]["maximum"] == QUOTA
    other = generous(env)
    assert post_csv(server, other, text).status_code == 202
    for batch in (first, second):
        assert batch_finished(server, key, batch.json()["id"], timeout=180, interval=0.3)["status"] == "failed"
        delete(server, key, batch.json()["id"])
    assert post_csv(server, key, text).status_code == 202


def test_the_id_limit_counts_characters_not_bytes(service: tuple[Server, dict[str, str]]) -> None:
    server, env = service
    key = generous(env)
    name = "é" * 150  # 150 characters, 300 bytes: within the 200-character id limit
    answer = post_csv(server, key, csv_text([name]))
    assert answer.status_code == 202, answer.text
    done = batch_finished(server, key, answer.json()["id"], timeout=180, interval=0.3)
    assert done["status"] == "done"
    delete(server, key, done["id"])
