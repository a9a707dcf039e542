"""A CSV batch upload: the web process's scan of the id column, and the worker's split into series."""

from __future__ import annotations

import io
import math

import pytest

from app.batches.csv_split import UploadError, series_from_csv
from app.batches.submit import PIECE_BYTES, UploadScan, pieces
from app.errors import InputTooLarge, MalformedInput
from app.web.errors import api_error_for

UPLOAD = (
    b"value,unique_id,timestamp\r\n"
    b"1.5,a,2026-01-01T00:00:00\r\n"
    b'2,"b,with comma",2026-01-01T00:00:00\r\n'
    b"2.5,a,2026-01-02T00:00:00\r\n"
    b",b,2026-01-02T00:00:00\r\n"
    b'nan,"b,with comma",2026-01-02T00:00:00\r\n'
    b"abc,b,2026-01-03T00:00:00\r\n"
    b"\r\n"
    b"0.1,c,2026-01-01T00:00:00"  # no line break at the end
)


def scan(data: bytes, step: int, max_series: int = 10) -> int:
    scanner = UploadScan(max_series=max_series)
    for start in range(0, len(data), step):
        scanner.feed(data[start:start + step])
    return scanner.finish()


@pytest.mark.parametrize("step", [1, 7, 64, 10_000])
def test_the_scan_counts_distinct_ids_whatever_the_pieces(step: int) -> None:
    assert scan(UPLOAD, step) == 4  # a, "b,with comma", b, c


class ShortReads(io.RawIOBase):
    """A request body that hands over at most ``most`` bytes a read, as a socket may."""

    def __init__(self, data: bytes, most: int) -> None:
        self._data, self._at, self._most = data, 0, most

    def read(self, size: int = -1) -> bytes:
        end = self._at + min(size, self._most)
        out, self._at = self._data[self._at:end], min(end, len(self._data))
        return out


@pytest.mark.parametrize("most", [PIECE_BYTES, PIECE_BYTES // 3 + 1])
def test_the_upload_is_stored_in_pieces_of_at_least_piece_bytes_in_order(most: int) -> None:
    row = b"s1,2026-01-01T00:00:00,1.5\n"
    body = b"unique_id,timestamp,value\n" + row * (2 * PIECE_BYTES // len(row) + 5)
    scanner = UploadScan(max_series=10)
    stored = list(pieces(ShortReads(body, most), max_bytes=len(body), scan=scanner))
    assert b"".join(stored) == body and scanner.finish() == 1
    assert len(stored) == 3 and all(len(piece) >= PIECE_BYTES for piece in stored[:-1])
    with pytest.raises(InputTooLarge) as too_large:
        list(pieces(ShortReads(body, most), max_bytes=len(body) - 1, scan=UploadScan(max_series=10)))
    assert api_error_for(too_large.value).status == 413


def test_the_scan_refuses_a_wrong_header_and_too_many_series() -> None:
    with pytest.raises(MalformedInput) as refused:
        scan(b"id,timestamp,value\nx,2026-01-01T00:00:00,1\n", 100)
    assert api_error_for(refused.value).status == 400
    with pytest.raises(InputTooLarge) as too_many:
        scan(b"unique_id,timestamp,value\n" + b"".join(b"s%d,t,1\n" % i for i in range(5)), 8, max_series=4)
    assert api_error_for(too_many.value).status == 413 and too_many.value.details["maximum"] == 4


def test_series_in_order_of_first_appearance_with_values_as_json_would_hold_them() -> None:
    split = series_from_csv(iter([UPLOAD[:40], UPLOAD[40:]]), max_series=10)
    assert len(split) == 4
    series = list(split)
    assert list(split) == []  # handed out once
    assert [s["id"] for s in series] == ["a", "b,with comma", "b", "c"]
    assert series[0] == {"id": "a", "timestamps": ["2026-01-01T00:00:00", "2026-01-02T00:00:00"],
                         "values": [1.5, 2.5]}
    assert series[1]["values"][0] == 2.0 and math.isnan(series[1]["values"][1])
    assert series[2]["values"] == [None, "abc"]  # an empty cell is missing; text is not a number
    assert series[3]["values"] == [0.1]


def test_an_unreadable_upload_is_an_error_of_the_whole_batch() -> None:
    with pytest.raises(UploadError) as failed:
        series_from_csv(iter([b"unique_id,timestamp,value\na,1,2,3,4\n"]), max_series=10)
    assert failed.value.envelope["code"] == "INVALID_REQUEST"
    with pytest.raises(UploadError):
        series_from_csv(iter([b"unique_id,timestamp\na,1\n"]), max_series=10)
