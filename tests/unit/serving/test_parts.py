"""app/serving's parts, each on its own: configuration from the environment, start-up checks, request framing,
the answers the worker gives itself, reading within deadlines (a socket pair for the client), log redaction and
the master's process tweaks, the worker's quit handler. The worker itself is tested against a real gunicorn
(tests/e2e/test_slow_clients.py, test_keepalive.py, test_hostile.py)."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gunicorn.http import errors as http_errors

from app.compute.detect import native
from app.serving import checks, framing, process, refusals
from app.serving.checks import startup_report
from app.serving.config import (
    DEFAULT_BIND,
    ClientLimits,
    bind_addresses,
    threads_per_process,
    web_processes,
    worker_timeout,
)
from app.serving.framing import NO_BODY, BodyFraming, HeadLimits
from app.serving.hooks import wipe_multiprocess_dir
from app.serving.logs import RedactKeys
from app.serving.reading import DeadlineUnreader, RequestTimedOut
from app.settings import Settings
from app.web.observability import KEY_FORMAT, KEY_SHAPED, redact_keys
from tests.support import ROOT

KEY = "ak_" + "0123456789abcdef" * 4
HEAD_LIMITS = HeadLimits.of(4094, 100, 16384)

# --- config ----------------------------------------------------------------------------------------------------


def test_bind_prefers_bind_then_a_paas_port_then_loopback() -> None:
    assert bind_addresses({"BIND": "unix:/run/app.sock", "PORT": "9000"}) == ["unix:/run/app.sock"]
    assert bind_addresses({"PORT": "9000"}) == ["0.0.0.0:9000"]
    assert bind_addresses({}) == [DEFAULT_BIND] == ["127.0.0.1:8000"]
    assert bind_addresses({"BIND": "", "PORT": ""}) == [DEFAULT_BIND]


def test_process_and_thread_counts() -> None:
    assert (web_processes({}), threads_per_process({})) == (1, 32)
    assert (web_processes({"WEB_CONCURRENCY": "3"}), threads_per_process({"GUNICORN_THREADS": "8"})) == (3, 8)
    for bad in ("0", "two", "1.5"):
        with pytest.raises(SystemExit, match="WEB_CONCURRENCY"):
            web_processes({"WEB_CONCURRENCY": bad})


def test_worker_timeout_outlasts_the_forecast_timeout() -> None:
    assert worker_timeout(Settings(forecast_timeout_seconds=30.0)) == 60
    assert worker_timeout(Settings(forecast_timeout_seconds=90.5)) == 120


def test_client_limits_from_the_environment() -> None:
    assert ClientLimits.from_env({}) == ClientLimits(header_seconds=5.0, body_seconds=10.0, body_min_rate=8192.0,
                                                     send_seconds=60.0)
    limits = ClientLimits.from_env({"HEADER_TIMEOUT_SECONDS": "2.5", "BODY_TIMEOUT_SECONDS": "4",
                                    "BODY_MIN_BYTES_PER_SECOND": "1000", "SEND_TIMEOUT_SECONDS": "7"})
    assert limits == ClientLimits(header_seconds=2.5, body_seconds=4.0, body_min_rate=1000.0, send_seconds=7.0)
    for name in ("HEADER_TIMEOUT_SECONDS", "BODY_TIMEOUT_SECONDS", "BODY_MIN_BYTES_PER_SECOND", "SEND_TIMEOUT_SECONDS"):
        for bad in ("0", "-1", "soon", "nan"):
            with pytest.raises(SystemExit, match=name):
                ClientLimits.from_env({name: bad})


def test_a_body_deadline_grows_with_the_bytes_received() -> None:
    limits = ClientLimits(body_seconds=10.0, body_min_rate=1000.0)
    assert limits.body_deadline(100.0, 0) == 110.0
    assert limits.body_deadline(100.0, 5000) == 115.0


# --- start-up checks -------------------------------------------------------------------------------------------


@pytest.fixture
def plain_detector_meant(monkeypatch: pytest.MonkeyPatch) -> None:
    """The detector warning below is not what these tests are about."""
    monkeypatch.setenv(native.PURE_VARIABLE, "1")


def test_several_processes_without_redis_are_refused(plain_detector_meant: None) -> None:
    settings = Settings(redis_url=None, forecast_workers=2, forecast_queue_limit=8)
    report = startup_report(settings, processes=2, threads=32)
    assert len(report.refusals) == 1 and "without REDIS_URL" in report.refusals[0] and report.warnings == []
    assert startup_report(settings, processes=1, threads=32).refusals == []
    with_redis = Settings(redis_url="redis://127.0.0.1:6379/0", forecast_workers=2, forecast_queue_limit=8)
    assert startup_report(with_redis, processes=4, threads=32).refusals == []


def test_too_few_threads_for_the_forecast_slots_is_a_warning_from_the_apps_settings(plain_detector_meant: None) -> None:
    settings = Settings(forecast_workers=4, forecast_queue_limit=8)
    report = startup_report(settings, processes=1, threads=12)
    assert report.refusals == [] and len(report.warnings) == 1
    assert "up to 12 forecasts" in report.warnings[0] and "GUNICORN_THREADS" in report.warnings[0]
    assert startup_report(settings, processes=1, threads=13).warnings == []


def test_a_detector_without_its_compiled_build_is_a_warning_unless_plain_python_is_meant(
        monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(forecast_workers=2, forecast_queue_limit=8)
    monkeypatch.delenv(native.PURE_VARIABLE, raising=False)
    monkeypatch.setattr(checks, "current_build", lambda: None)
    (warning,) = startup_report(settings, processes=1, threads=32).warnings
    assert "Python sources" in warning and "native_build" in warning
    monkeypatch.setenv(native.PURE_VARIABLE, "1")
    assert startup_report(settings, processes=1, threads=32).warnings == []


# --- framing ---------------------------------------------------------------------------------------------------


def test_the_head_ends_at_the_first_blank_line_even_split_across_reads() -> None:
    head = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    assert framing.find_head_end(head) == len(head)
    assert framing.find_head_end(head + b"body") == len(head)
    assert framing.find_head_end(b"GET / HTTP/1.1\r\n") is None
    partial = b"GET / HTTP/1.1\r\nHost: x\r\n\r"
    assert framing.find_head_end(partial) is None
    assert framing.find_head_end(partial + b"\n", max(0, len(partial) - 3)) == len(head)


def test_gunicorns_limits_are_normalised_as_its_parser_does() -> None:
    assert HEAD_LIMITS == HeadLimits(request_line=4094, fields=100, field_size=16384, headers=100 * 16386 + 4)
    assert HeadLimits.of(0, 0, 0) == HeadLimits(request_line=8190, fields=32768, field_size=8190,
                                                headers=32768 * 8192 + 4)
    assert HeadLimits.of(99999, 40000, -1).request_line == 8190


def test_a_head_over_the_limits_is_refused_before_it_ends() -> None:
    limits = HeadLimits.of(20, 2, 10)  # headers: 2 * 12 + 4 = 28 bytes
    assert framing.oversized_head(b"GET /" + b"a" * 10, limits) is None
    assert framing.oversized_head(b"GET /" + b"a" * 20, limits) == 400  # no line end yet, already too long
    assert framing.oversized_head(b"GET /" + b"a" * 20 + b"\r\n", limits) == 400
    assert framing.oversized_head(b"GET / HTTP/1.1\r\nA: b\r\n", limits) is None
    assert framing.oversized_head(b"GET / HTTP/1.1\r\n" + b"X" * 29, limits) == 431


@pytest.mark.parametrize("head,expected", [
    (b"GET / HTTP/1.1\r\nHost: x", NO_BODY),
    (b"POST / HTTP/1.1\r\nContent-Length: 12", BodyFraming(length=12)),
    (b"POST / HTTP/1.1\r\ncontent-length:  7 ", BodyFraming(length=7)),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked", BodyFraming(chunked=True)),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked", BodyFraming(chunked=True)),
    # Heads gunicorn refuses read as bodiless: they go to it at once, to be answered.
    (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2", NO_BODY),
    (b"POST / HTTP/1.1\r\nContent-Length: -1", NO_BODY),
    (b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked", NO_BODY),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip", NO_BODY),
    (b"POST / HTTP/1.1\r\nContent-Length : 5", NO_BODY),  # gunicorn refuses the space before the colon
])
def test_body_framing(head: bytes, expected: BodyFraming) -> None:
    assert framing.body_framing(head + b"\r\n\r\n") == expected


def test_a_chunked_body_is_complete_at_its_last_chunk_and_trailers() -> None:
    body = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\n\r\n"
    assert framing.chunked_body_end(body, 0)[0] == len(body)
    assert framing.chunked_body_end(body + b"GET / HTTP/1.1\r\n", 0)[0] == len(body)
    with_trailers = b"4\r\nWiki\r\n0\r\nX-Sum: 1\r\n\r\n"
    assert framing.chunked_body_end(with_trailers, 0)[0] == len(with_trailers)
    for cut in range(len(body)):  # every prefix is still arriving, and resuming finds the end
        end, resume = framing.chunked_body_end(body[:cut], 0)
        assert end is None
        assert framing.chunked_body_end(body, resume)[0] == len(body)
    # A size line gunicorn refuses is not waited on.
    assert framing.chunked_body_end(b"zz\r\n", 0)[0] == 4


# --- refusals ---------------------------------------------------------------------------------------------------


def _parsed(raw: bytes) -> tuple[str, dict[str, str], dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    assert int(headers["Content-Length"]) == len(body)
    return status, headers, json.loads(body)


def test_an_answer_is_the_error_envelope_and_closes() -> None:
    status, headers, body = _parsed(refusals.line_too_long(HEAD_LIMITS).encode())
    assert status == "HTTP/1.1 400 Bad Request"
    assert headers["Content-Type"] == "application/json" and headers["Connection"] == "close"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert body == {"error": {"code": "INVALID_REQUEST", "message": "The request line is longer than the server "
                              "accepts.", "details": {"limit_bytes": 4094}}}
    status, _, body = _parsed(refusals.headers_too_large(HEAD_LIMITS).encode())
    assert status == "HTTP/1.1 431 Request Header Fields Too Large" and body["error"]["code"] == "INVALID_REQUEST"
    status, _, body = _parsed(refusals.UNEXPECTED.encode())
    assert status == "HTTP/1.1 500 Internal Server Error" and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == "INTERNAL_ERROR"
    limits = ClientLimits()
    for answer in (refusals.head_too_slow(limits), refusals.body_too_slow(limits)):
        status, _, body = _parsed(answer.encode())
        assert status == "HTTP/1.1 408 Request Timeout" and body["error"]["code"] == "INVALID_REQUEST"


@pytest.mark.parametrize("exc,status", [
    (http_errors.LimitRequestLine(5000, 4094), 400),
    (http_errors.LimitRequestHeaders("limit request headers fields size"), 431),
    (http_errors.InvalidRequestLine(f"GET /{KEY}"), 400),
    (http_errors.InvalidRequestMethod(KEY.upper()), 400),
    (http_errors.InvalidHTTPVersion(f"HTTP/1.1 {KEY}"), 400),
    (http_errors.InvalidHeader(f"X-Key: {KEY}"), 400),
    (http_errors.InvalidHeaderName(KEY), 400),
    (http_errors.ObsoleteFolding("X-A"), 400),
    (http_errors.UnsupportedTransferCoding("gzip"), 501),
    (http_errors.ForbiddenProxyRequest("10.0.0.1"), 403),
    (http_errors.ConfigurationProblem("x"), 500),
])
def test_gunicorns_refusals_are_answered_without_quoting_the_request(exc: Exception, status: int) -> None:
    answer = refusals.for_parse_error(exc, HEAD_LIMITS)
    assert answer is not None and answer.status == status
    assert not KEY_SHAPED.search(answer.encode().decode("latin-1"))


def test_an_unexpected_error_is_left_to_the_worker() -> None:
    assert refusals.for_parse_error(ValueError("boom"), HEAD_LIMITS) is None


# --- keys: one shape, redacted in any letter case ---------------------------------------------------------------


def test_a_key_is_lower_case_and_whole() -> None:
    assert KEY_FORMAT.match(KEY)
    for near_miss in (KEY.upper(), "AK_" + KEY[3:], KEY + "0", KEY + "\n", KEY[:-1], " " + KEY):
        assert not KEY_FORMAT.match(near_miss), near_miss


@pytest.mark.parametrize("shown", [KEY, KEY.upper(), "AK_" + KEY[3:], "Ak_" + KEY[3:].upper(),
                                   "aK_" + "".join(c.upper() if i % 2 else c for i, c in enumerate(KEY[3:]))])
def test_key_shaped_strings_are_redacted_in_any_case(shown: str) -> None:
    redacted = redact_keys(f"id={shown}; path=/x/{shown}?k={shown}")
    assert redacted == "id=ak_01234567…cdef; path=/x/ak_01234567…cdef?k=ak_01234567…cdef"
    assert not re.search(r"ak_[0-9a-f]{64}", redacted, re.IGNORECASE)


def test_gunicorns_log_records_are_redacted_in_any_case() -> None:
    record = logging.LogRecord("gunicorn.error", logging.WARNING, __file__, 1,
                               "Invalid request from ip=%s: %s", ("127.0.0.1", f"GET /{KEY.upper()}"), None)
    try:
        raise ValueError(f"with {KEY.swapcase()}")
    except ValueError:
        record.exc_info = sys.exc_info()
    assert RedactKeys().filter(record)
    assert record.getMessage() == "Invalid request from ip=127.0.0.1: GET /ak_01234567…cdef"
    assert record.exc_text is not None and "ak_01234567…cdef" in record.exc_text
    assert not KEY_SHAPED.search(record.getMessage() + record.exc_text)


# --- the master's process tweaks -------------------------------------------------------------------------------


def test_the_allocator_threshold_is_fixed_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        ctypes.CDLL("libc.so.6").mallopt  # noqa: B018
    except (OSError, AttributeError):
        pytest.skip("not glibc")
    assert process.keep_large_buffers_returnable() is True

    def no_glibc(name: str) -> None:
        raise OSError(name)

    monkeypatch.setattr(process.ctypes, "CDLL", no_glibc)
    assert process.keep_large_buffers_returnable() is False


def test_the_master_pins_blas_to_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # an operator's explicit choice is kept
    process.prepare_master()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1" and os.environ["MKL_NUM_THREADS"] == "1"
    assert os.environ["OMP_NUM_THREADS"] == "3"


def test_a_worker_settles_its_collector_and_shares_the_gil_once_ready() -> None:
    # In a process of its own: the hook changes process-wide settings this test process must keep.
    script = ("import gc, json, sys, types\n"
              "from app.serving.hooks import post_worker_init\n"
              "before = gc.get_threshold()\n"
              "post_worker_init(types.SimpleNamespace())\n"
              "print(json.dumps([before, gc.get_threshold(), gc.get_freeze_count(), sys.getswitchinterval()]))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            cwd=ROOT, check=True)
    before, after, frozen, switch = json.loads(result.stdout.strip().splitlines()[-1])
    assert after == [process.YOUNG_COLLECTION_CONTAINERS, before[1], before[2]]
    assert frozen > 1000  # the modules and what they built are out of the collector's reach
    assert switch == pytest.approx(process.GIL_SWITCH_SECONDS)


# --- reading within the deadlines (a socket pair stands for the client) -----------------------------------------


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    server_side, client_side = socket.socketpair()
    yield server_side, client_side
    server_side.close()
    client_side.close()


def test_a_head_not_sent_by_its_deadline_times_out(pair: tuple[socket.socket, socket.socket]) -> None:
    server_side, _ = pair
    unreader = DeadlineUnreader(server_side, ClientLimits(header_seconds=0.1))
    unreader.expect_head(time.monotonic() + 0.1)
    with pytest.raises(RequestTimedOut) as timed_out:
        unreader.chunk()
    assert timed_out.value.answer.status == 408 and timed_out.value.answer == refusals.head_too_slow(unreader.limits)
    assert unreader.timed_out
    with pytest.raises(RequestTimedOut):  # past the deadline, no read waits at all
        unreader.chunk()


def test_a_body_deadline_grows_with_each_read_and_the_answer_gets_its_send_timeout_back(
    pair: tuple[socket.socket, socket.socket]
) -> None:
    server_side, client_side = pair
    limits = ClientLimits(body_seconds=5.0, body_min_rate=1000.0, send_seconds=7.0)
    unreader = DeadlineUnreader(server_side, limits)
    heard: list[int] = []
    unreader.on_received = heard.append
    closed: list[bool] = []
    unreader.expect_body(on_time_out=lambda: closed.append(True))
    first = unreader.deadline
    client_side.sendall(b"x" * 500)
    assert unreader.chunk() == b"x" * 500
    assert unreader.deadline == pytest.approx(first + 0.5)
    assert heard == [500] and server_side.gettimeout() == 7.0
    unreader.expect_body(time.monotonic() + 0.05, on_time_out=lambda: closed.append(True))  # the loop's deadline
    with pytest.raises(RequestTimedOut) as timed_out:
        unreader.chunk()
    assert timed_out.value.answer == refusals.body_too_slow(limits) and closed == [True]


def test_lingering_waits_a_bounded_time_per_read(pair: tuple[socket.socket, socket.socket],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import app.serving.reading as reading

    monkeypatch.setattr(reading, "LINGER_READ_SECONDS", 0.05)
    server_side, client_side = pair
    unreader = DeadlineUnreader(server_side, ClientLimits())
    unreader.linger()
    client_side.sendall(b"rest of a body")
    assert unreader.chunk() == b"rest of a body"
    with pytest.raises(RequestTimedOut):  # a pause longer than one read may wait
        unreader.chunk()


def test_bytes_read_ahead_go_back_to_the_event_loop(pair: tuple[socket.socket, socket.socket]) -> None:
    unreader = DeadlineUnreader(pair[0], ClientLimits())
    assert unreader.buffered() == 0
    unreader.unread(b"GET /next HTTP/1.1\r\n")
    assert unreader.buffered() == 20
    assert unreader.take_buffered() == b"GET /next HTTP/1.1\r\n" and unreader.buffered() == 0


# --- hooks -----------------------------------------------------------------------------------------------------


def test_a_previous_runs_metric_files_are_wiped(tmp_path: Path) -> None:
    (tmp_path / "counter_123.db").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("kept")
    wipe_multiprocess_dir(str(tmp_path))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt"]
    wipe_multiprocess_dir(None)
    wipe_multiprocess_dir(str(tmp_path / "absent"))


def test_ctrl_c_while_the_loop_hands_a_request_to_a_thread_stops_the_worker() -> None:
    """Python runs a signal handler between two steps of the main thread, here inside ``tpool.submit`` with the
    thread pool's lock held. gthread's handler shut the pool down right there: it waited forever for that lock,
    and the worker hung until its master killed it (CI saw Ctrl-C leave a server running for 30 s)."""
    from concurrent.futures import ThreadPoolExecutor

    from gunicorn.config import Config

    from app.serving.worker import ServingWorker

    worker = ServingWorker(1, os.getpid(), [], None, 30, Config(), logging.getLogger("test"))
    worker.tpool = ThreadPoolExecutor(1)
    quit_returned = threading.Event()

    def signal_lands_inside_submit() -> None:
        with worker.tpool._shutdown_lock:  # type: ignore[attr-defined]
            worker.handle_quit(signal.SIGINT, None)
        quit_returned.set()

    threading.Thread(target=signal_lands_inside_submit, daemon=True).start()
    assert quit_returned.wait(5), "the quit handler waited for the lock the interrupted step holds"
    assert not worker.alive
    worker.tpool.shutdown()
    worker.tmp.close()
