"""app.serving.reading: reading within the deadlines, a socket pair standing for the client."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from app.serving import refusals
from app.serving.config import ClientLimits
from app.serving.reading import DeadlineUnreader, RequestTimedOut


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
