"""app.serving.framing: where a request's head ends, the head's limits as gunicorn's parser applies them, and
how its body is framed."""

from __future__ import annotations

import pytest

from app.serving import framing
from app.serving.framing import NO_BODY, BodyFraming, HeadLimits

HEAD_LIMITS = HeadLimits.of(4094, 100, 16384)


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
