"""A CSV batch upload: the web process's scan of the id column, and the worker's split into series."""

from __future__ import annotations

import math

import pytest

from app.batches.submit import UploadScan
from app.batches.tasks import UploadError, series_from_csv
from app.errors import ApiError

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


def test_the_scan_refuses_a_wrong_header_and_too_many_series() -> None:
    with pytest.raises(ApiError) as refused:
        scan(b"id,timestamp,value\nx,2026-01-01T00:00:00,1\n", 100)
    assert refused.value.status == 400
    with pytest.raises(ApiError) as too_many:
        scan(b"unique_id,timestamp,value\n" + b"".join(b"s%d,t,1\n" % i for i in range(5)), 8, max_series=4)
    assert too_many.value.status == 413 and too_many.value.details["maximum"] == 4


def test_series_in_order_of_first_appearance_with_values_as_json_would_hold_them() -> None:
    series = series_from_csv(iter([UPLOAD[:40], UPLOAD[40:]]), max_series=10)
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
