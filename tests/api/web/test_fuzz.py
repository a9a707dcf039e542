"""Property-based fuzzing of the HTTP contract.

(a) schemathesis generates requests from the app's own OpenAPI document (app.web.openapi.build_spec(), the
    document GET /openapi.json serves) for every operation, positive and negative data, with a valid key
    and without one, and sends them to the Flask app over WSGI: never a 5xx, every non-2xx body is the
    error envelope with a code from the enum, and schemathesis' own response checks pass.
(b) hypothesis posts random JSON values and mutations of a valid body to POST /forecast: the status is
    always one of 200, 400, 413, 415, 422 and the body is either a forecast or the envelope.

Forecasts that pass validation run in real forecast worker processes, hence slow.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app import openapi_documenters
from app.web.openapi import build_spec
from tests.support import bearer, build_app, new_key, services_of, settings_for

pytestmark = pytest.mark.slow

CODES = {"UNAUTHORIZED", "INVALID_REQUEST", "DATA_VALIDATION_ERROR", "RATE_LIMIT_EXCEEDED", "INTERNAL_ERROR"}
MODEL_IDS = ["forecast-model-1", "forecast-model-2", "forecast-model-3", "forecast-model-4"]
FUZZ_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    database=None,
    derandomize=True,  # the same examples every run: a failure here is reproducible, not a flake
    suppress_health_check=list(HealthCheck),
)



@schemathesis.serializer("application/x-protobuf")
def _remote_write_body(ctx: object, value: object) -> bytes:
    # POST /api/v1/write documents its body as binary: whatever bytes are generated go as they are, so the route
    # meets arbitrary (mostly undecodable) bodies.
    return value if isinstance(value, bytes) else str(value).encode()


SCHEMA = schemathesis.openapi.from_dict(build_spec(openapi_documenters()))
OPERATIONS = sorted((op.ok().method.upper(), op.ok().path) for op in SCHEMA.get_all_operations())
UNKEYED_PATHS = {"/healthz", "/readyz"}  # probes need no key


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Flask, str]]:
    path = tmp_path_factory.mktemp("fuzz") / "keys.sqlite3"
    app = build_app(
        settings_for(f"sqlite:///{path}", forecast_workers=2, auth_failure_limit="1000000/minute",
                     forecast_timeout_seconds=20.0),
        start_workers=True,
    )
    key, _ = new_key(
        app, permissions=("read", "write", "admin", "delete"), per_minute=10_000_000, per_hour=10_000_000,
        per_day=10_000_000,
    )
    yield app, key
    services_of(app).close()


# Azure Anomaly Detector's own paths answer errors in Azure's shape, which its SDK parses (docs/anomalies.md).
AZURE_PREFIX = "/anomalydetector/"


def assert_azure_error(status: int, content_type: str, body: Any, context: str) -> None:
    assert content_type.startswith("application/json"), f"{context}: {status} with Content-Type {content_type!r}"
    assert isinstance(body, dict) and set(body) == {"code", "message"}, f"{context}: {status} body {body!r:.300}"
    assert isinstance(body["code"], str) and body["code"] and body["code"] not in CODES, f"{context}: {body!r:.300}"
    assert isinstance(body["message"], str) and body["message"], context


# The routes of Nixtla's client answer errors in Nixtla's shape, which the client raises (docs/nixtla.md).
NIXTLA_PATHS = ("/v2/", "/validate_api_key", "/model_params")


def assert_nixtla_error(status: int, content_type: str, body: Any, context: str) -> None:
    assert content_type.startswith("application/json"), f"{context}: {status} with Content-Type {content_type!r}"
    assert isinstance(body, dict) and set(body) == {"detail", "code"}, f"{context}: {status} body {body!r:.300}"
    assert isinstance(body["detail"], str) and body["detail"], context
    assert isinstance(body["code"], str) and body["code"], context


def assert_envelope(status: int, content_type: str, body: Any, context: str) -> None:
    assert content_type.startswith("application/json"), f"{context}: {status} with Content-Type {content_type!r}"
    assert isinstance(body, dict) and set(body) == {"error"}, f"{context}: {status} body {body!r:.300}"
    error = body["error"]
    assert isinstance(error, dict), context
    assert {"code", "message"} <= set(error) <= {"code", "message", "details"}, f"{context}: {error!r:.300}"
    assert error["code"] in CODES, f"{context}: code {error['code']!r}"
    assert isinstance(error["message"], str) and error["message"], context
    assert isinstance(error.get("details", {}), dict), context


def assert_forecast(body: Any, horizon: int | None, context: str) -> None:
    assert isinstance(body, dict), context
    assert list(body) == ["forecast_timestamps", "lower_bound", "median", "upper_bound"], context
    lengths = {len(body[name]) for name in body}
    assert len(lengths) == 1, f"{context}: arrays not parallel {lengths}"
    if horizon is not None:
        assert lengths == {horizon}, context
    for low, mid, high in zip(body["lower_bound"], body["median"], body["upper_bound"], strict=True):
        assert all(isinstance(v, int | float) and math.isfinite(v) for v in (low, mid, high)), context
        assert low <= mid <= high, context


# --- (a) schemathesis against the app's own OpenAPI document -------------------------------------------


def _header(response: schemathesis.Response, name: str) -> str:
    # schemathesis keeps headers as {lower-case name: [values]}
    values = {key.lower(): value for key, value in response.headers.items()}.get(name.lower()) or [""]
    return values[0] if isinstance(values, list) else str(values)


def _without_authorization(headers: dict[str, Any] | None) -> dict[str, Any]:
    return {name: value for name, value in (headers or {}).items() if name.lower() != "authorization"}


def _has_inputs(method: str, path: str) -> bool:
    definition = SCHEMA.raw_schema["paths"][path][method.lower()]
    return bool(definition.get("parameters") or definition.get("requestBody"))


# Negative data needs something to break: only operations with parameters or a body get that mode.
CASES = [
    pytest.param(method, path, mode, id=f"{method} {path} {mode.value}")
    for method, path in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or _has_inputs(method, path)
]


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_schemathesis_operation(served: tuple[Flask, str], method: str, path: str, mode: GenerationMode) -> None:
    """Each generated example is sent twice, with a valid key and without one: generating the examples costs
    more than answering them, and the same examples serve both."""
    app, key = served
    operation = SCHEMA[path][method]
    checks = [not_a_server_error, status_code_conformance, content_type_conformance]
    if mode is GenerationMode.POSITIVE:
        checks += [response_schema_conformance, response_headers_conformance]
    seen: dict[tuple[bool, int], int] = {}

    def send(case: schemathesis.Case, keyed: bool) -> None:
        case.headers = _without_authorization(case.headers)
        if keyed:
            case.headers.update(bearer(key))
        response = case.call(app=app)
        status = response.status_code
        seen[keyed, status] = seen.get((keyed, status), 0) + 1
        event(f"status {status} {'with' if keyed else 'without'} a key")
        context = f"{method} {path} [{mode.value}, {'key' if keyed else 'no key'}] {case.body!r:.200}"
        assert status < 500, f"{context}: {status} {response.text[:300]}"
        if status >= 400 and path not in UNKEYED_PATHS:
            check = (assert_azure_error if path.startswith(AZURE_PREFIX)
                     else assert_nixtla_error if path.startswith(NIXTLA_PATHS) else assert_envelope)
            check(status, _header(response, "Content-Type"), response.json(), context)
        if not keyed and path not in UNKEYED_PATHS:
            assert status == 401, f"{context}: {status} without a key"
        case.validate_response(response, checks=checks)

    @FUZZ_SETTINGS
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: schemathesis.Case) -> None:
        send(case, keyed=True)
        send(case, keyed=False)

    run()
    assert {keyed for keyed, _ in seen} == {True, False}, "no example was generated"


def test_openapi_document_served_is_the_one_fuzzed(served: tuple[Flask, str]) -> None:
    app, key = served
    response = app.test_client().get("/openapi.json", headers=bearer(key))
    assert response.status_code == 200
    assert response.get_json() == json.loads(json.dumps(build_spec(openapi_documenters())))


# --- (b) hypothesis on the request schema ----------------------------------------------------------------

ALLOWED = {200, 400, 413, 415, 422}

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=10), children, max_size=6),
    max_leaves=40,
)
top_level_keys = st.sampled_from(["series", "forecast_horizon", "data_frequency", "forecast_frequency", "confidence"])
random_objects = st.dictionaries(top_level_keys | st.text(max_size=10), json_values, max_size=6)


def valid_body(points: int = 24) -> dict[str, Any]:
    return {
        "series": [
            {
                "timestamps": [f"2026-01-{1 + i // 24:02d}T{i % 24:02d}:00:00" for i in range(points)],
                "values": [float(10 + (i * 7) % 11) for i in range(points)],
            }
        ],
        "forecast_horizon": 5,
        "data_frequency": "Hours",
        "forecast_frequency": "Hours",
        "confidence": 0.9,
    }


extreme_numbers = st.sampled_from(
    [0, -0.0, 1, -1, 10**20, -(10**20), 10**400, 1e308, -1e308, 1.7976931348623157e308, 5e-324, 1e-300,
     2**53 + 1, 0.1, 0.99, 0.0999999, 0.9900001, 100, 101, 2**63, -(2**63)]
) | st.floats(allow_nan=False, allow_infinity=False) | st.integers()

PATHS: list[tuple[str | int, ...]] = [
    ("series",), ("forecast_horizon",), ("data_frequency",), ("forecast_frequency",), ("confidence",),
    ("series", 0), ("series", 0, "timestamps"), ("series", 0, "values"),
    ("series", 0, "timestamps", 3), ("series", 0, "values", 3), ("series", 0, "values", 0),
    ("series", 0, "timestamps", 0), ("series", 0, "timestamps", -1),
]


def _parent(body: Any, path: tuple[str | int, ...]) -> Any:
    node = body
    for step in path[:-1]:
        node = node[step]
    return node


def drop(path: tuple[str | int, ...]) -> Callable[[Any], None]:
    def apply(body: Any) -> None:
        del _parent(body, path)[path[-1]]

    return apply


def replace_with(path: tuple[str | int, ...], value: Any) -> Callable[[Any], None]:
    def apply(body: Any) -> None:
        _parent(body, path)[path[-1]] = value

    return apply


def fill_values(value: Any) -> Callable[[Any], None]:
    def apply(body: Any) -> None:
        body["series"][0]["values"] = [value] * len(body["series"][0]["values"])

    return apply


mutations = st.one_of(
    st.sampled_from(PATHS).map(drop),
    st.tuples(st.sampled_from(PATHS), json_values).map(lambda pv: replace_with(*pv)),
    st.tuples(st.sampled_from(PATHS), extreme_numbers).map(lambda pv: replace_with(*pv)),
    extreme_numbers.map(fill_values),
    st.sampled_from(["Seconds", "Minutes", "Daily", "Monthly", "hours", "", "Hours "]).map(
        lambda f: replace_with(("forecast_frequency",), f)
    ),
)


@pytest.fixture(scope="module")
def client_and_key(served: tuple[Flask, str]) -> tuple[Any, str]:
    app, key = served
    return app.test_client(), key


def check_answer(response: Any, horizon: int | None, context: str) -> None:
    status = response.status_code
    event(f"status {status}")  # pytest --hypothesis-show-statistics shows the mix
    assert status in ALLOWED, f"{context}: {status} {response.get_data(as_text=True)[:300]}"
    if status == 200:
        assert_forecast(response.get_json(), horizon, context)
    else:
        assert_envelope(status, response.headers.get("Content-Type", ""), response.get_json(), context)


@FUZZ_SETTINGS
@given(body=json_values | random_objects)
def test_random_json_bodies(client_and_key: tuple[Any, str], body: Any) -> None:
    client, key = client_and_key
    response = client.post("/forecast", headers=bearer(key), json=body)
    check_answer(response, None, f"body {body!r:.300}")


@settings(FUZZ_SETTINGS, max_examples=60)
@given(
    steps=st.lists(mutations, min_size=1, max_size=3),
    model=st.sampled_from([*MODEL_IDS, None, "forecast-model-5", ""]),
    content_type=st.sampled_from(["application/json", "application/json; charset=utf-8",
                                  "application/problem+json", "text/plain", None]),
)
def test_mutated_valid_bodies(client_and_key: tuple[Any, str], steps: list[Callable[[Any], None]],
                              model: str | None, content_type: str | None) -> None:
    client, key = client_and_key
    body: Any = valid_body()
    for step in steps:
        try:
            step(body)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation removed or replaced the parent: keep what we have
    headers = bearer(key)
    if model is not None:
        headers["X-Model-Id"] = model
    if content_type is not None:
        headers["Content-Type"] = content_type
    raw = json.dumps(body, allow_nan=True)
    response = client.post("/forecast", headers=headers, data=raw)
    horizon = body.get("forecast_horizon") if isinstance(body, dict) else None
    check_answer(response, horizon if isinstance(horizon, int) else None, f"{model} {content_type} {raw[:300]}")


@settings(FUZZ_SETTINGS, max_examples=30)
@given(literal=st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1E+999", "0e0", "-0",
                                "1.0e-400", "123456789012345678901234567890"]),
       where=st.sampled_from(["value", "horizon", "confidence"]))
def test_raw_number_literals(client_and_key: tuple[Any, str], literal: str, where: str) -> None:
    client, key = client_and_key
    body = valid_body()
    if where == "value":
        body["series"][0]["values"][2] = "__X__"
    elif where == "horizon":
        body["forecast_horizon"] = "__X__"
    else:
        body["confidence"] = "__X__"
    raw = json.dumps(body).replace('"__X__"', literal)
    response = client.post("/forecast", headers={**bearer(key), "Content-Type": "application/json"}, data=raw)
    check_answer(response, 5, raw[:200])
