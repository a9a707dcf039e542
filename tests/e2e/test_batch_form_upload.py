"""A CSV batch sent as a form upload (curl -F file=@stores.csv) to a real gunicorn and a real `jobs worker`: the
same batch as the CSV sent as the body, under either header; a clear 400 for a form without a file, with two, or
with a plain field; the upload limit holds for a form as for a body. tests/api/web/test_input_forms.py holds the
form reader's memory bound."""

from __future__ import annotations

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
UPLOAD_LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    directory = tmp_path_factory.mktemp("form-upload")
    env = {"FORECAST_WORKERS": "1", "LOG_LEVEL": "WARNING", "BATCH_CHUNK_SERIES": "4",
           "BATCH_MAX_UPLOAD_BYTES": str(UPLOAD_LIMIT), "DATABASE_URL": f"sqlite:///{directory / 'b.sqlite3'}"}
    with served_with_jobs(env, directory) as (server, worker):
        out = cli_in_process("keys", "create", "--permissions", "read,write,delete", "--per-minute", "1000",
                             "--per-hour", "10000", "--per-day", "100000", "--account",
                             "acct-" + uuid.uuid4().hex[:12], "--json", env=env).stdout
        yield server, json.loads(out)["key"]
        assert "Traceback" not in server.log() + worker.log()


def csv_text(header: str = "unique_id,timestamp,value", stores: int = 3) -> str:
    start = date(2026, 1, 1)
    rows = [f"store-{n},{start + timedelta(days=i)} 00:00:00,{round(20 + 4 * math.sin(i / 2) + n, 3)}"
            for n in range(stores) for i in range(30)]
    return "\n".join([header, *rows]) + "\n"


def results(server: Server, key: str, answer: requests.Response) -> list[dict[str, Any]]:
    assert answer.status_code == 202, answer.text
    batch_id = answer.json()["id"]
    assert batch_finished(server, key, batch_id)["status"] == "done"
    text = requests.get(f"{server.url}/batches/{batch_id}/results", headers=bearer(key), timeout=30).text
    return [json.loads(line) for line in text.splitlines()]


def form_post(server: Server, key: str, files: Any, data: Any = None) -> requests.Response:
    return requests.post(f"{server.url}/batches", params=FIELDS, files=files, data=data, headers=bearer(key),
                         timeout=60)


def refused(answer: requests.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    return answer.json()["error"]  # type: ignore[no-any-return]


def test_a_form_upload_is_the_same_batch_as_the_csv_body(service: tuple[Server, str]) -> None:
    server, key = service
    as_body = results(server, key, requests.post(
        f"{server.url}/batches", params=FIELDS, data=csv_text().encode(), timeout=60,
        headers={**bearer(key), "Content-Type": "text/csv"}))
    as_form = results(server, key, form_post(server, key, {"file": ("stores.csv", csv_text(), "text/csv")}))
    nixtla = results(server, key, form_post(server, key, {"file": ("stores.csv", csv_text("unique_id,ds,y"))}))
    assert as_form == as_body == nixtla and len(as_body) == 3 and "median" in as_body[0]


def test_a_form_without_its_one_file_is_a_clear_400(service: tuple[Server, str]) -> None:
    server, key = service
    two = refused(form_post(server, key, [("file", ("a.csv", csv_text())), ("more", ("b.csv", csv_text()))]), 400)
    assert two["details"]["issue"] == "several file parts" and "curl -F file=@" in two["message"]
    field = refused(form_post(server, key, {"file": (None, csv_text())}), 400)  # a field: no filename
    assert field["details"]["issue"] == "a form field where the file was expected"
    empty = requests.post(f"{server.url}/batches", params=FIELDS, data=b"--x--\r\n", timeout=30,
                          headers={**bearer(key), "Content-Type": "multipart/form-data; boundary=x"})
    assert refused(empty, 400)["details"]["issue"] == "no file part"
    no_boundary = requests.post(f"{server.url}/batches", params=FIELDS, data=csv_text().encode(), timeout=30,
                                headers={**bearer(key), "Content-Type": "multipart/form-data"})
    assert refused(no_boundary, 400)["details"]["issue"] == "no multipart boundary in Content-Type"
    cut = requests.post(f"{server.url}/batches", params=FIELDS, timeout=30,
                        data=b'--x\r\nContent-Disposition: form-data; name="file"; filename="a.csv"\r\n\r\nunique_id',
                        headers={**bearer(key), "Content-Type": "multipart/form-data; boundary=x"})
    assert refused(cut, 400)["details"]["issue"] == "not a complete multipart/form-data body"
    big = csv_text(stores=250)  # over the limit, within the form's allowance: refused as it streams
    assert UPLOAD_LIMIT < len(big) < UPLOAD_LIMIT + 64 * 1024
    refused(form_post(server, key, {"file": ("stores.csv", big)}), 413)
    listed = requests.get(f"{server.url}/batches", headers=bearer(key), timeout=30).json()["batches"]
    assert all(batch["status"] == "done" for batch in listed)  # nothing of a refused upload was kept
