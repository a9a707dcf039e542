"""Every sh, bash and Python code block of README.md and docs/*.md runs, as a reader would paste it, against a
real gunicorn and job worker: exit status 0 and no error envelope in what it prints. A block that cannot run
here is listed in NOT_RUN with the reason, and a new block is neither run nor excused until it is listed:
test_every_block_is_run_or_excused fails on it.

The blocks run in a temporary directory (whatever they write stays out of the checkout), with the
addresses they name pointed at the test server, `.venv/bin/` at this checkout's, and the variables the docs
assume set: KEY, API_KEY, ADMIN_KEY (a full-access key), BASE, BATCH_ID, KEY_ID; Python blocks get KEY,
``series`` (a pandas Series), ``long_frame`` (a long DataFrame), ``df`` (monthly series in Nixtla's
unique_id, ds, y columns) and ``client`` (this service's Python client, open)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import VENV_BIN, JobWorker, Server, bearer, cli_in_process, wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_LANGUAGES = ("sh", "bash", "python")
PLACEHOLDER_HOSTS = ("http://127.0.0.1:8000", "https://forecast.example.com")
ERROR_ENVELOPE = re.compile(r'"error":\s*\{')

# (document, first line of the block): why it is not run here.
NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "make run    # venv, pinned deps, the compiled detector, migrations, a first key + curl examples, "
                  "serve :8000"): "starts the service this suite is testing, and "
    "`make test` is this suite",
    ("README.md", ".venv/bin/pip install './clients/python[pandas]'"): "installs a package (make install-dev has)",
    ("docs/operating.md", ".venv/bin/python -m app.compute.detect.native_build   # about 15 s; needs a C compiler and "
                          "Python's headers"): "rebuilds the compiled detector that make test built before the suite, "
    "under the suite's running servers (tests/unit/compute/detect/test_native.py checks what it builds)",
    ("docs/python-client.md", "pip install './clients/python[pandas]'     # pandas for Series in / to_pandas() "
                              "out; [plot] adds matplotlib"): "installs a package (make install-dev has)",
    ("docs/batches.md", 'curl -sS -X POST "$BASE/batches" \\'): "its series are abbreviated with \"...\"",
    ("docs/operating.md", "export DATABASE_URL=postgresql://forecast@db.internal/forecast "
                          "REDIS_URL=redis://cache.internal:6379/0"): "names the reader's own hosts",
    ("docs/operating.md", "# every machine"): "a deployment across machines (tests/e2e/test_scale_out.py runs one)",
    ("docs/monitors.md", "curl -X POST https://forecast.example.com/monitors -H \"Authorization: Bearer $KEY\" \\"):
        "needs the reader's own Prometheus and Alertmanager (tests/e2e/test_prometheus.py runs a real pair)",
    ("docs/batches.md", 'curl -sS -X POST "$BASE/batches" -H "Authorization: Bearer $API_KEY" -H '
                        '"Content-Type: application/json" \\'): "its series is abbreviated with \"...\"",
    ("docs/monitors.md", "printf '%s\\n' '{\"monitor_id\":\"mon_a...\",\"timestamp\":\"2026-01-01T00:00:00Z\","
                         "\"value\":5}' \\"): "its monitor ids are abbreviated (tests/api/monitors/intake/test_bulk.py "
    "sends such bodies)",
}


@dataclass(frozen=True)
class Block:
    document: str
    language: str
    first_line: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.document}: {self.first_line[:60]}"


def blocks() -> list[Block]:
    found = []
    for path in DOCUMENTS:
        lines = path.read_text().splitlines()
        index = 0
        while index < len(lines):
            fence = re.match(r"^```(\w*)\s*$", lines[index])
            if fence is None:
                index += 1
                continue
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            if fence.group(1) in RUN_LANGUAGES:
                body = lines[index + 1:end]
                found.append(Block(str(path.relative_to(ROOT)), fence.group(1), body[0].rstrip() if body else "",
                                   "\n".join(body) + "\n"))
            index = end + 1
    return found


ALL = blocks()
RUN = [block for block in ALL if (block.document, block.first_line) not in NOT_RUN]


def test_every_block_is_run_or_excused() -> None:
    excused = {(block.document, block.first_line) for block in ALL} & set(NOT_RUN)
    assert excused == set(NOT_RUN), f"NOT_RUN names blocks that are gone: {set(NOT_RUN) - excused}"
    assert len(RUN) >= 15 and {block.language for block in RUN} == {"sh", "bash", "python"}


@dataclass
class Service:
    server: Server
    env: dict[str, str]
    key: str
    key_id: str
    batch_id: str
    directory: Path


def create_key(env: dict[str, str], *args: str) -> dict[str, Any]:
    out = cli_in_process("keys", "create", "--permissions", "read,write,admin,delete", "--per-minute", "100000",
                         "--per-hour", "1000000", "--per-day", "10000000", *args, "--json", env=env).stdout
    return json.loads(out)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    directory = tmp_path_factory.mktemp("doc-blocks")
    env = {"DATABASE_URL": f"sqlite:///{directory / 'docs.sqlite3'}", "FORECAST_WORKERS": "1",
           "LOG_LEVEL": "WARNING", "DATA_DIR": str(directory / "instance")}
    cli_in_process("db", "upgrade", env=env)
    created = create_key(env)
    server = Server(env, log_path=directory / "server.log")
    worker = JobWorker(env, log_path=directory / "worker.log")
    try:
        server.wait_ready()
        rows = "unique_id,timestamp,value\n" + "".join(
            f"doc-{s},2026-01-{day:02d}T00:00:00,{10 + s + day % 7}\n" for s in range(2) for day in range(1, 31))
        answer = requests.post(f"{server.url}/batches", data=rows.encode(), timeout=60,
                               params={"forecast_horizon": 3, "data_frequency": "Daily", "forecast_frequency": "Daily"},
                               headers={**bearer(created["key"]), "Content-Type": "text/csv"})
        assert answer.status_code == 202, answer.text
        batch_id = answer.json()["id"]
        wait_for(lambda: requests.get(f"{server.url}/batches/{batch_id}", headers=bearer(created["key"]),
                                      timeout=10).json()["status"] == "done", 120, "the docs' batch")
        yield Service(server, env, created["key"], created["id"], batch_id, directory)
    finally:
        worker.stop()
        server.stop()


def pointed_at(code: str, url: str) -> str:
    for host in PLACEHOLDER_HOSTS:
        code = code.replace(host, url)
    return code.replace("<API_KEY>", "{KEY}")


def run_shell(block: Block, svc: Service, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = pointed_at(block.code, svc.server.url)
    if "cd migrations" in code:
        # The block shows reaching migrations/ from the repository root, so it runs there, as written
        # (alembic reads DATABASE_URL, set below to a database of its own: it writes nothing here).
        cwd = ROOT
    else:
        code = code.replace(".venv/bin/", f"{VENV_BIN}/")
    key_id = svc.key_id
    if "KEY_ID" in code:  # a key of its own to rotate and revoke, written where the block names it
        key_id = create_key(svc.env, "--name", "managed-by-the-docs")["id"]
        code = re.sub(r"(?<![$\w])KEY_ID\b", key_id, code)
    env = {**os.environ, **svc.env, "PYTHONPATH": str(ROOT), "KEY": svc.key, "API_KEY": svc.key,
           "ADMIN_KEY": svc.key, "BASE": svc.server.url, "BATCH_ID": svc.batch_id, "KEY_ID": key_id,
           "FLASK_APP": str(ROOT / "wsgi.py")}
    if block.document == "docs/migrations.md":  # a database of its own: the block downgrades what it upgrades
        env["DATABASE_URL"] = f"sqlite:///{svc.directory / 'migrations.sqlite3'}"
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def reader_inputs() -> dict[str, Any]:
    import pandas as pd

    index = pd.date_range("2026-01-01", periods=24 * 14, freq="h")
    series = pd.Series([20 + 5 * math.sin(2 * math.pi * i / 24) + 0.01 * i for i in range(len(index))], index=index)
    days = pd.date_range("2026-01-01", periods=60, freq="D")
    long_frame = pd.DataFrame({"unique_id": [f"store-{s}" for s in range(2) for _ in days],
                               "timestamp": [day for _ in range(2) for day in days],
                               "value": [10.0 + s + i % 7 for s in range(2) for i in range(len(days))]})
    months = pd.date_range("2020-01-01", periods=48, freq="MS")
    df = pd.DataFrame({"unique_id": [f"sku-{s}" for s in range(2) for _ in months],
                       "ds": [month for _ in range(2) for month in months],
                       "y": [100.0 + 10 * s + 8 * math.sin(2 * math.pi * i / 12) + i
                             for s in range(2) for i in range(len(months))]})
    return {"series": series, "long_frame": long_frame, "df": df}


@pytest.mark.parametrize("block", RUN, ids=lambda block: block.id)
def test_the_block_runs_as_pasted(block: Block, service: Service, tmp_path: Path) -> None:
    if block.document == "docs/batches.md" and "@series.csv" in block.code:
        (tmp_path / "series.csv").write_text(_series_csv_of_batches_md())
    if block.language == "python":
        code = pointed_at(block.code, service.server.url).replace('"{KEY}"', "KEY")
        from forecast_client import Client

        client = Client(service.server.url, api_key=service.key)
        namespace: dict[str, Any] = {"KEY": service.key, "client": client, **reader_inputs()}
        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            exec(compile(code, block.id, "exec"), namespace)  # noqa: S102 - the docs' own code
        finally:
            os.chdir(cwd)
            client.close()
        return
    done = run_shell(block, service, tmp_path)
    assert done.returncode == 0, f"{block.code}\n--- stdout\n{done.stdout[-2000:]}\n--- stderr\n{done.stderr[-2000:]}"
    assert not ERROR_ENVELOPE.search(done.stdout), done.stdout[-2000:]
    assert not list(ROOT.glob("series.csv")) and not list(ROOT.glob("results.*"))
    if "/results" in block.code and block.document == "README.md":
        assert "store-2," in done.stdout  # the batch was waited for: its results are there


def _series_csv_of_batches_md() -> str:
    """The CSV docs/batches.md shows beside its upload command, with enough points for a forecast."""
    return "unique_id,timestamp,value\n" + "".join(
        f"store-{s},2026-01-{day:02d}T00:00:00,{s * 4 + day}\n" for s in (1, 2) for day in range(1, 31))
