"""Prometheus remote write against a real gunicorn, the hostile shapes: a remote-write 2.0 body is refused 415 (as
the 2.0 spec asks of a 1.0 receiver), never answered 204 and dropped; a body of more samples than MAX_POINTS is a
413 with nothing stored (a 4xx, so Prometheus does not retry it); and endless distinct label sets no monitor takes
leave the web process's memory where it was (their routes are not kept)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cramjam
import pytest
import requests

from tests.support import Server, bearer, child_pids, cli_in_process, cmdline, remote_write_body

MAX_POINTS = 2000
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
V1 = "application/x-protobuf"
V2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str]]]:
    directory = tmp_path_factory.mktemp("rw-limits")
    env = {"DATABASE_URL": f"sqlite:///{directory / 'keys.sqlite3'}", "FORECAST_WORKERS": "1",
           "WEB_CONCURRENCY": "1", "MAX_POINTS": str(MAX_POINTS), "LOG_LEVEL": "WARNING"}
    cli_in_process("db", "upgrade", env=env)

    def key(account: str, permissions: str) -> str:
        return str(json.loads(cli_in_process(
            "keys", "create", "--account", account, "--permissions", permissions, "--per-minute", "100000",
            "--per-hour", "1000000", "--per-day", "10000000", "--json", env=env).stdout)["key"])

    keys = {"owner": key("acct-rw", "read,write"), "write_only": key("acct-empty", "write")}
    server = Server(env, log_path=directory / "gunicorn.log")
    server.wait_ready()
    yield server, keys
    server.stop()


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        out.append(low | (0x80 if number else 0))
        if not number:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:  # a length-delimited field
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def v2_body(labels: dict[str, str], samples: list[tuple[int, float]]) -> bytes:
    """An io.prometheus.write.v2.Request as Prometheus 3 sends it (symbols table, label references, samples)."""
    symbols = [""]
    refs = []
    for name, value in sorted(labels.items()):
        for text in (name, value):
            if text not in symbols:
                symbols.append(text)
            refs.append(symbols.index(text))
    series = _field(1, b"".join(_varint(ref) for ref in refs))
    for timestamp, value in samples:
        series += _field(2, b"\x09" + struct.pack("<d", value) + b"\x10" + _varint(timestamp))
    message = b"".join(_field(4, text.encode()) for text in symbols) + _field(5, series)
    return bytes(cramjam.snappy.compress_raw(message))


def post(server: Server, key: str, body: bytes, content_type: str = V1, version: str = "0.1.0") -> Any:
    return requests.post(f"{server.url}/api/v1/write", data=body, timeout=120, headers={
        **bearer(key), "Content-Type": content_type, "Content-Encoding": "snappy",
        "X-Prometheus-Remote-Write-Version": version})


def monitor(server: Server, key: str, selector: str) -> str:
    created = requests.post(f"{server.url}/monitors", headers=bearer(key), timeout=10, json={
        "name": selector, "data_frequency": "Minutes", "remote_write_selector": selector})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def points(server: Server, key: str, monitor_id: str) -> int:
    answer = requests.get(f"{server.url}/monitors/{monitor_id}?points=10000", headers=bearer(key), timeout=30)
    assert answer.status_code == 200, answer.text
    return len(answer.json()["points"])


def minutes(count: int) -> list[tuple[int, float]]:
    return [(T0_MS + i * 60_000, 10.0 + i % 7) for i in range(count)]


def test_a_remote_write_2_body_is_415_and_stores_nothing(served: tuple[Server, dict[str, str]]) -> None:
    server, keys = served
    owner = keys["owner"]
    monitor_id = monitor(server, owner, 'v2_probe{job="api"}')
    labels = {"__name__": "v2_probe", "job": "api"}
    refused = post(server, owner, v2_body(labels, minutes(5)), content_type=V2, version="2.0.0")
    assert refused.status_code == 415, refused.text
    error = refused.json()["error"]
    assert "remote write 1.0" in error["message"] and "prometheus.WriteRequest" in error["message"]
    assert error["details"]["field"] == "Content-Type"
    assert refused.headers["X-Prometheus-Remote-Write-Samples-Written"] == "0"
    assert points(server, owner, monitor_id) == 0
    # Any other message named is refused alike; 1.0's, named or not, is taken.
    other = post(server, owner, remote_write_body([(labels, minutes(3))]), content_type=f"{V1};proto=example.Other")
    assert other.status_code == 415, other.text
    named = post(server, owner, remote_write_body([(labels, minutes(3))]),
                 content_type=f"{V1};proto=prometheus.WriteRequest")
    assert named.status_code == 204, named.text
    assert points(server, owner, monitor_id) == 3


def test_a_body_over_max_points_samples_is_413_before_any_is_stored(served: tuple[Server, dict[str, str]]) -> None:
    server, keys = served
    owner = keys["owner"]
    monitor_id = monitor(server, owner, 'cap_probe{job="api"}')
    labels = {"__name__": "cap_probe", "job": "api"}
    over = post(server, owner, remote_write_body([(labels, minutes(MAX_POINTS + 1))]))
    assert over.status_code == 413, over.text
    error = over.json()["error"]
    assert f"{MAX_POINTS + 1:,} samples" in error["message"] and "max_samples_per_send" in error["message"]
    assert error["details"]["field"] == "body"
    assert points(server, owner, monitor_id) == 0
    # Spread over many series the cap is the same: it counts a request's samples, not a series'.
    spread = [({"__name__": "cap_probe", "job": "api", "shard": str(i)}, minutes(3))
              for i in range(MAX_POINTS // 3 + 1)]
    assert post(server, owner, remote_write_body(spread)).status_code == 413
    assert points(server, owner, monitor_id) == 0
    at_cap = post(server, owner, remote_write_body([(labels, minutes(MAX_POINTS))]))
    assert at_cap.status_code == 204, at_cap.text
    assert points(server, owner, monitor_id) == MAX_POINTS


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def hostile_labels_body(request: int, series: int = 150, labels: int = 100, chars: int = 4000) -> bytes:
    """The hostile tester's shape: ``series`` series of ``labels`` labels of about ``chars`` characters each, all
    distinct from every other request's (about 3 MB snappy-compressed, 60 MB decoded)."""
    return remote_write_body([({"__name__": f"junk_{request}_{s}",
                                **{f"l{i}": f"{request}-{s}-{i}-" + "x" * chars for i in range(labels - 1)}},
                               [(T0_MS, 1.0)]) for s in range(series)])


def test_unmatched_label_sets_leave_the_web_process_memory_where_it_was(
        served: tuple[Server, dict[str, str]]) -> None:
    server, keys = served
    workers = [pid for pid in child_pids(server.process.pid) if "gunicorn" in cmdline(pid)]
    assert len(workers) == 1, workers

    def send(request: int) -> None:
        answer = post(server, keys["write_only"], hostile_labels_body(request))
        assert answer.status_code == 204, answer.text
        assert answer.headers["X-Samples-Stored"] == "0" and answer.headers["X-Samples-Dropped"] == "150"

    for request in range(2):  # the process reaches the size one such request takes
        send(request)
    before = _rss_kib(workers[0])
    for request in range(2, 10):
        send(request)
    grown_mib = (_rss_kib(workers[0]) - before) / 1024
    print(f"\nweb process RSS {before / 1024:.0f} MiB after 2 requests, grown by {grown_mib:.0f} MiB over 8 more")
    # Each request's label sets are 60 MB of text: kept, eight of them would be about 480 MB.
    assert grown_mib < 150, f"the web process grew by {grown_mib:.0f} MiB over 8 requests of unmatched label sets"
