"""Hand-made hostile requests against a real gunicorn: every answer is the contract's, fast, in bounded memory.

One gunicorn (default config, one worker process, one forecast worker) serves the whole module; the last
test reads the gunicorn worker's peak RSS (VmHWM) after all the hostile traffic and bounds it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import Server, bearer, child_pids, cli_in_process, cmdline

pytestmark = pytest.mark.slow

MAX_BODY = 4 * 1024 * 1024  # small enough to hit cheaply; a 10^6-element array of "1," (2 MB) still fits
MAX_POINTS = 100_000
ANSWER_WITHIN = 20.0  # a hang detector, not a speed target (make bench measures speed)
RSS_BOUND_KIB = int(1.5 * 1024 * 1024)  # 1.5 GiB: bounded memory is a correctness property
CODES = {"UNAUTHORIZED", "INVALID_REQUEST", "DATA_VALIDATION_ERROR", "RATE_LIMIT_EXCEEDED", "INTERNAL_ERROR"}


class Hostile:
    def __init__(self, server: Server, key: str) -> None:
        self.server, self.key = server, key
        self.session = requests.Session()

    def send(self, method: str, path: str, *, headers: dict[str, str] | None = None, data: Any = None,
             key: str | None = None) -> requests.Response:
        # A fresh connection each time: a kept-alive one may be closed by the server's idle timeout just as it
        # is reused, and a POST is not retried; that race is not what these tests are about.
        all_headers = {**bearer(self.key if key is None else key), "Connection": "close", **(headers or {})}
        started = time.monotonic()
        response = self.session.request(
            method, self.server.url + path, headers=all_headers, data=data, timeout=ANSWER_WITHIN + 5
        )
        elapsed = time.monotonic() - started
        assert elapsed < ANSWER_WITHIN, f"{method} {path} took {elapsed:.2f}s (bound {ANSWER_WITHIN}s)"
        return response

    def post_raw(self, raw: bytes | str, **kwargs: Any) -> requests.Response:
        headers = {"Content-Type": "application/json", **kwargs.pop("headers", {})}
        return self.send("POST", "/forecast", headers=headers, data=raw, **kwargs)

    def post_json(self, body: Any, **kwargs: Any) -> requests.Response:
        return self.post_raw(json.dumps(body), **kwargs)


def envelope(response: requests.Response, status: int, code: str) -> dict[str, Any]:
    """The error body: application/json, {"error": {"code", "message", "details"?}}."""
    assert response.status_code == status, (response.status_code, response.headers, response.text[:500])
    assert response.headers.get("Content-Type", "").startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) <= {"code", "message", "details"} and {"code", "message"} <= set(error)
    assert error["code"] == code and error["code"] in CODES
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error.get("details", {}), dict)
    return error


def hourly_body(points: int = 48, values: list[Any] | None = None) -> dict[str, Any]:
    start = datetime(2026, 1, 1)
    return {
        "series": [{
            "timestamps": [(start + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%S") for i in range(points)],
            "values": values if values is not None else [float(10 + i % 24) for i in range(points)],
        }],
        "forecast_horizon": 6,
        "data_frequency": "Hours",
        "forecast_frequency": "Hours",
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str], str]]:
    directory = tmp_path_factory.mktemp("hostile")
    env = {
        "DATABASE_URL": f"sqlite:///{directory / 'keys.sqlite3'}",
        "FORECAST_WORKERS": "1",
        "MAX_BODY_BYTES": str(MAX_BODY),
        "MAX_POINTS": str(MAX_POINTS),
        "AUTH_FAILURE_LIMIT": "10000/minute",
        "LOG_LEVEL": "WARNING",
    }
    cli_in_process("db", "upgrade", env=env)
    created = json.loads(cli_in_process("keys", "create", "--permissions", "read", "--per-minute", "100000",
                                        "--per-hour", "1000000", "--per-day", "10000000", "--json", env=env).stdout)
    server = Server(env, log_path=directory / "gunicorn.log")
    server.wait_ready()
    yield server, env, created["key"]
    server.stop()


@pytest.fixture(scope="module")
def hostile(served: tuple[Server, dict[str, str], str]) -> Hostile:
    return Hostile(served[0], served[2])


def gunicorn_worker(server: Server) -> int:
    workers = [pid for pid in child_pids(server.process.pid) if "gunicorn" in cmdline(pid)]
    assert len(workers) == 1, [(pid, cmdline(pid)) for pid in child_pids(server.process.pid)]
    return workers[0]


def vm_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def test_valid_request_still_answered(hostile: Hostile) -> None:
    response = hostile.post_json(hourly_body())
    assert response.status_code == 200, response.text
    assert len(response.json()["median"]) == 6


def test_body_one_byte_over_the_limit_is_413(hostile: Hostile) -> None:
    raw = json.dumps(hourly_body()).encode()
    at_limit = raw + b" " * (MAX_BODY - len(raw))  # JSON allows trailing whitespace
    assert len(at_limit) == MAX_BODY
    assert hostile.post_raw(at_limit).status_code == 200
    over = at_limit + b" "
    error = envelope(hostile.post_raw(over), 413, "INVALID_REQUEST")
    assert "larger" in error["message"]


def test_chunked_body_over_the_limit_is_413(hostile: Hostile) -> None:
    # No Content-Length: the limit must still hold while the body streams in.
    def chunks() -> Iterator[bytes]:
        yield json.dumps(hourly_body()).encode()  # a valid body, then padding past the cap
        chunk = b" " * 65536
        for _ in range(MAX_BODY // len(chunk) + 2):
            yield chunk

    envelope(hostile.post_raw(chunks()), 413, "INVALID_REQUEST")


@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_deeply_nested_json_is_400_fast(hostile: Hostile, opener: str) -> None:
    error = envelope(hostile.post_raw(opener * 100_000), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == "body"


def test_deep_nesting_inside_a_valid_body_is_answered(hostile: Hostile) -> None:
    body = json.dumps(hourly_body())
    nested = body[:-1] + ', "extra": ' + "[" * 50_000 + "]" * 50_000 + "}"
    response = hostile.post_raw(nested)
    assert response.status_code in (200, 400), response.text[:300]
    if response.status_code == 400:
        envelope(response, 400, "INVALID_REQUEST")


def test_million_values_is_422_over_max_points(hostile: Hostile) -> None:
    raw = hourly_body(10)
    raw["series"][0]["values"] = "__VALUES__"
    text = json.dumps(raw).replace('"__VALUES__"', "[" + ",".join(["1"] * 1_000_000) + "]")
    assert len(text) < MAX_BODY
    error = envelope(hostile.post_raw(text), 422, "DATA_VALIDATION_ERROR")
    problems = error["details"].get("errors", [error["details"]])
    assert any(p.get("maximum") == MAX_POINTS and p["issue"] == "too many data points" for p in problems), problems
    assert len(json.dumps(error)) < 2000  # provided is an excerpt, never the array


def test_million_timestamps_over_the_body_cap_is_413(hostile: Hostile) -> None:
    body = hourly_body(10)
    body["series"][0]["timestamps"] = ["2026-01-01T00:00:00"] * 1_000_000
    assert len(json.dumps(body)) < MAX_BODY * 6  # 22 MB: over the body cap, so the cap answers first
    envelope(hostile.post_json(body), 413, "INVALID_REQUEST")


def huge_shapes() -> dict[str, list[float]]:
    top = 1e308
    n = 200
    return {
        "constant": [top] * n,
        "alternating": [top if i % 2 else -top for i in range(n)],
        "spike": [0.0] * (n - 1) + [top],
        "half": [top] * (n // 2) + [0.0] * (n // 2),
        "float_max": [1.7976931348623157e308 * (1 if i % 3 else -1) for i in range(n)],
        "wiggle": [top * math.sin(i * i) for i in range(n)],
    }


@pytest.mark.parametrize("model", ["forecast-model-1", "forecast-model-2", "forecast-model-3", "forecast-model-4"])
@pytest.mark.parametrize("shape", list(huge_shapes()))
def test_huge_finite_values_never_500(hostile: Hostile, shape: str, model: str) -> None:
    response = hostile.post_json(hourly_body(200, huge_shapes()[shape]), headers={"X-Model-Id": model})
    if response.status_code == 200:
        body = response.json()
        for name in ("lower_bound", "median", "upper_bound"):
            assert all(isinstance(v, int | float) and math.isfinite(v) for v in body[name]), body[name][:3]
    else:
        assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
        envelope(response, response.status_code, response.json()["error"]["code"])


def test_values_at_the_magnitude_bound_are_forecast(hostile: Hostile) -> None:
    values = [1e300 * (1 if i % 2 else -1) for i in range(200)]
    response = hostile.post_json(hourly_body(200, values), headers={"X-Model-Id": "forecast-model-1"})
    assert response.status_code == 200, response.text[:300]
    assert all(math.isfinite(v) for v in response.json()["upper_bound"])


def test_numeric_strings_in_values_are_422(hostile: Hostile) -> None:
    values: list[Any] = [float(i) for i in range(48)]
    values[5] = "12.5"
    error = envelope(hostile.post_json(hourly_body(48, values)), 422, "DATA_VALIDATION_ERROR")
    assert error["details"]["field"] == "series[0].values" and error["details"]["index"] == 5
    all_strings = [str(float(i)) for i in range(48)]
    envelope(hostile.post_json(hourly_body(48, all_strings)), 422, "DATA_VALIDATION_ERROR")


ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
FULLWIDTH = str.maketrans("0123456789", "０１２３４５６７８９")
DEVANAGARI = str.maketrans("0123456789", "०१२३४५६७८९")


@pytest.mark.parametrize(
    "table", [ARABIC_INDIC, FULLWIDTH, DEVANAGARI], ids=["arabic-indic", "fullwidth", "devanagari"]
)
@pytest.mark.parametrize("where", ["one", "all"])
def test_unicode_digits_in_timestamps_are_422(hostile: Hostile, table: dict[int, str], where: str) -> None:
    body = hourly_body(48)
    stamps = body["series"][0]["timestamps"]
    if where == "one":
        stamps[7] = stamps[7].translate(table)
    else:
        body["series"][0]["timestamps"] = [s.translate(table) for s in stamps]
    error = envelope(hostile.post_json(body), 422, "DATA_VALIDATION_ERROR")
    assert error["details"]["issue"] == "invalid timestamp format"
    assert error["details"]["index"] == (7 if where == "one" else 0)


@pytest.mark.parametrize("stamp", ["2026-01-01T00:00:00\u200b", "2026\u201001\u201001T00:00:00",
                                   "2026-01-01T00:00:00\x00", "2026-01-01Ｔ00:00:00", "2026-01-01T00:00:00＋00:00"])
def test_lookalike_characters_in_timestamps_are_422(hostile: Hostile, stamp: str) -> None:
    body = hourly_body(48)
    body["series"][0]["timestamps"][0] = stamp
    error = envelope(hostile.post_json(body), 422, "DATA_VALIDATION_ERROR")
    assert error["details"]["issue"] == "invalid timestamp format"


def test_headers_over_8_kib_in_total_reach_the_app(hostile: Hostile) -> None:
    padding = {f"X-Pad-{i}": "p" * 1000 for i in range(12)}  # ~12 KiB of headers
    response = hostile.send("GET", "/verify", headers=padding)
    assert response.status_code == 200, response.text[:300]
    assert response.json()["success"] is True
    bad = hostile.send("GET", "/verify", headers=padding, key="ak_" + "0" * 64)
    envelope(bad, 401, "UNAUTHORIZED")


@pytest.mark.parametrize("path,method", [("/verify", "GET"), ("/forecast", "POST")])
def test_ten_kib_authorization_header_is_401_in_the_envelope(hostile: Hostile, path: str, method: str) -> None:
    credential = "ak_" + "a" * (10 * 1024)
    response = hostile.send(method, path, key=credential, data=b"{}" if method == "POST" else None)
    error = envelope(response, 401, "UNAUTHORIZED")
    assert credential not in response.text  # the bad key is never echoed back
    assert "aaaaaaaaaaaaaaaa" not in json.dumps(error)


def test_ten_kib_header_value_other_than_authorization_still_answered(hostile: Hostile) -> None:
    response = hostile.send("GET", "/verify", headers={"X-Request-Id": "r" * 10240})
    assert response.status_code == 200
    assert len(response.headers.get("X-Request-Id", "")) < 200  # an insane client id is not echoed


# Keep-alive connections after early answers (and idle ones that must not pin threads): tests/e2e/test_keepalive.py.


def test_service_still_healthy_and_worker_memory_bounded(served: tuple[Server, dict[str, str], str],
                                                           hostile: Hostile) -> None:
    server = served[0]
    assert hostile.post_json(hourly_body()).status_code == 200
    worker = gunicorn_worker(server)
    peak = vm_kib(worker, "VmHWM")
    current = vm_kib(worker, "VmRSS")
    forecast_peaks = {pid: vm_kib(pid, "VmHWM") for pid in child_pids(worker) if "multiprocessing" in cmdline(pid)}
    print(f"\ngunicorn worker pid {worker}: peak RSS (VmHWM) {peak / 1024:.1f} MiB, now {current / 1024:.1f} MiB; "
          f"forecast workers VmHWM: {', '.join(f'{v / 1024:.1f} MiB' for v in forecast_peaks.values()) or '-'}")
    assert peak < RSS_BOUND_KIB, f"gunicorn worker peak RSS {peak} KiB over {RSS_BOUND_KIB} KiB"
    assert all(v < RSS_BOUND_KIB for v in forecast_peaks.values()), forecast_peaks


# --- the same header hostility through nginx (TLS), as deployed -------------------------------------------


@pytest.fixture(scope="module")
def through_nginx(served: tuple[Server, dict[str, str], str], tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[str, str]]:
    from tests.support import running_nginx

    with running_nginx(tmp_path_factory.mktemp("hostile-nginx"), served[0].port) as (base, _, cert):
        yield base, str(cert)


def test_nginx_passes_a_ten_kib_authorization_header_to_the_app(through_nginx: tuple[str, str]) -> None:
    base, cert = through_nginx
    response = requests.get(base + "/verify", headers=bearer("ak_" + "a" * 10240), verify=cert, timeout=ANSWER_WITHIN)
    envelope(response, 401, "UNAUTHORIZED")


def test_nginx_passes_headers_over_8_kib_in_total(through_nginx: tuple[str, str],
                                                 served: tuple[Server, dict[str, str], str]) -> None:
    base, cert = through_nginx
    padding = {f"X-Pad-{i}": "p" * 1000 for i in range(12)}
    response = requests.get(base + "/verify", headers={**bearer(served[2]), **padding}, verify=cert,
                            timeout=ANSWER_WITHIN)
    assert response.status_code == 200, response.text[:300]


def test_nginx_refuses_oversized_headers_in_the_envelope(through_nginx: tuple[str, str]) -> None:
    base, cert = through_nginx
    response = requests.get(base + "/verify", headers={"X-Huge": "h" * 20000}, verify=cert, timeout=ANSWER_WITHIN)
    envelope(response, 400, "INVALID_REQUEST")


def test_nginx_answers_an_unreachable_app_in_the_envelope(tmp_path: Path) -> None:
    from tests.support import free_port, running_nginx

    with running_nginx(tmp_path, free_port()) as (base, _, cert):  # nothing listens upstream
        response = requests.get(base + "/verify", verify=str(cert), timeout=ANSWER_WITHIN)
    envelope(response, 500, "INTERNAL_ERROR")
