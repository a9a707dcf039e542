"""The fast paths of the web process answer exactly what the per-item paths answer.

Each fast path (orjson for bodies, the one-array timestamp check, the one-pass value check) may only say
"valid, here is the result" or step aside; these tests put random and hand-picked inputs through both.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from flask import Flask, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.forecast import body as forecast_body
from app.forecast import schemas
from app.series import regular as regular_module
from app.series.regular import regular_axis
from app.series.timestamps import FREQUENCIES, TimeAxis, TimestampError, _parse_axis_per_item, parse_axis
from app.web import fields, jsonio, validation
from app.web.errors import ApiError

# ------------------------------------------------------------------------------------------- JSON parsing


def _outcome(parse: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "ok", repr(parse(data))  # repr tells 1 from 1.0 and -0.0 from 0.0
    except RecursionError:
        return "recursion", None
    except (ValueError, UnicodeDecodeError) as exc:
        return "error", f"{type(exc).__name__}: {exc}"


def _reject_constant(name: str) -> float:
    return float(name.replace("Infinity", "inf"))


def _same_as_json(data: bytes) -> None:
    assert _outcome(jsonio.loads, data) == _outcome(json.loads, data)
    constants = (
        lambda raw: jsonio.loads_with_constants(raw, _reject_constant),
        lambda raw: json.loads(raw, parse_constant=_reject_constant),
    )
    assert _outcome(constants[0], data) == _outcome(constants[1], data)


EDGE_DOCUMENTS = [
    b"18446744073709551615",
    b"18446744073709551616",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"1" * 400,
    b"[" + b"9" * 19 + b"]",
    b'{"forecast_horizon": 100000000000000000000}',
    b"1e400",
    b"-1e400",
    b"1E+999",
    b"0e0",
    b"-0",
    b"-0.0",
    b"NaN",
    b"-Infinity",
    b"[1, NaN]",
    b'{"a":1,"a":2}',
    b'"\\ud800"',
    b'"\\ud83d\\ude00"',
    b"\xef\xbb\xbf{}",
    '{"a": "é"}'.encode("utf-16"),
    b'"\xed\xa0\x80"',
    b"\xff",
    b"",
    b" ",
    b"[1,]",
    b"{} x",
    b" \x0c{}",
    b'"\x01"',
    b'"\x7f"',
    b"0.1e-400",
    b"1.7976931348623157e308",
    b"2.2250738585072014e-308",
    b"4.9e-324",
    b"123456789012345678.5",
    b"0.30000000000000004",
    b"[" * 300 + b"]" * 300,
    b"[" * 950 + b"]" * 950,
    b"[" * 1100 + b"]" * 1100,
    b'{"x":' * 600 + b"1" + b"}" * 600,
]


@pytest.mark.parametrize("data", EDGE_DOCUMENTS, ids=range(len(EDGE_DOCUMENTS)))
def test_edge_documents_parse_as_json_parses_them(data: bytes) -> None:
    _same_as_json(data)


json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values, ascii_only=st.booleans())
def test_random_documents_parse_as_json_parses_them(value: Any, ascii_only: bool) -> None:
    _same_as_json(json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"))


@settings(max_examples=400, deadline=None)
@given(
    digits=st.text("0123456789", min_size=1, max_size=30),
    fraction=st.text("0123456789", max_size=30),
    exponent=st.integers(-400, 400),
    sign=st.sampled_from(["", "-"]),
)
def test_numbers_parse_as_json_parses_them(digits: str, fraction: str, exponent: int, sign: str) -> None:
    digits = digits.lstrip("0") or "0"
    for text in (
        f"{sign}{digits}",
        f"{sign}{digits}.{fraction or '0'}",
        f"{sign}{digits}e{exponent}",
        f"{sign}{digits}.{fraction or '0'}E{exponent:+d}",
    ):
        _same_as_json(text.encode())


@settings(max_examples=300, deadline=None)
@given(value=json_values, cut=st.integers(0, 200), junk=st.binary(max_size=3))
def test_damaged_documents_fail_or_parse_as_json_does(value: Any, cut: int, junk: bytes) -> None:
    text = json.dumps(value).encode("utf-8", "surrogatepass")
    _same_as_json(text[:cut] + junk + text[cut:])


# ------------------------------------------------------------------------------------------- JSON responses


@pytest.fixture(scope="module")
def json_app() -> Flask:
    app = Flask(__name__)
    app.json = jsonio.OrjsonProvider(app)
    app.json.sort_keys = False  # type: ignore[attr-defined]
    return app


def _stdlib_response_text(value: Any) -> str:
    from flask.json.provider import _default

    return json.dumps(value, default=_default, ensure_ascii=True, sort_keys=False, separators=(",", ":")) + "\n"


@settings(max_examples=300, deadline=None)
@given(value=json_values | st.lists(st.floats()))
def test_responses_read_back_as_json_writes_them(json_app: Flask, value: Any) -> None:
    with json_app.app_context():
        body = json_app.json.response(value).get_data(as_text=True)
    expected = _stdlib_response_text(value)
    # The same document; where orjson could not write json's text (NaN, non-ASCII, big integers) the same text.
    assert repr(json.loads(body)) == repr(json.loads(expected))
    if not expected.isascii() or "NaN" in expected or "Infinity" in expected:
        assert body == expected


@pytest.mark.parametrize("value", [
    {"direction": [None, "up", None], "score": [0.5, 1e16, 2.0], "period": None},
    {"a": [float("nan"), None]}, {"a": (float("inf"),), "b": None}, [None, np.float64("nan")],
])
def test_nulls_are_nones_and_never_a_written_nan(json_app: Flask, value: Any) -> None:
    with json_app.app_context():
        body = json_app.json.response(value).get_data(as_text=True)
    expected = _stdlib_response_text(value)
    assert repr(json.loads(body)) == repr(json.loads(expected))
    if "NaN" in expected or "Infinity" in expected:
        assert body == expected


def test_response_types_flask_knows(json_app: Flask) -> None:
    import decimal
    import uuid
    from dataclasses import dataclass

    @dataclass
    class Point:
        x: int

    value = {
        "when": datetime(2026, 1, 2, 3, 4, 5),
        "id": uuid.UUID(int=7),
        "amount": decimal.Decimal("1.50"),
        "point": Point(3),
        "numpy": np.float64(1.25),
        3: "int key",
        "big": 2**80,
    }
    with json_app.app_context():
        body = json_app.json.response(value).get_data(as_text=True)
    assert body == _stdlib_response_text(value)


# ------------------------------------------------------------------------------------------- timestamps


def _axis_key(axis: TimeAxis) -> tuple[Any, ...]:
    # Aware datetimes compare by instant: the offsets must match too.
    return (
        axis.frequency,
        axis.step,
        axis.count,
        axis.first.isoformat(),
        axis.last.isoformat(),
        axis.last_text,
        axis.suffix,
        axis.fraction_digits,
        axis.month_end,
    )


def _per_item(timestamps: list[Any], frequency: str) -> tuple[Any, ...]:
    try:
        return ("ok", _axis_key(_parse_axis_per_item(timestamps, frequency)))
    except TimestampError as exc:
        return ("error", exc.issue, exc.index, exc.provided, exc.expected)


def _check_agreement(timestamps: list[Any], frequency: str) -> None:
    expected = _per_item(timestamps, frequency)
    regular = regular_axis(timestamps, frequency)
    if regular is not None:
        assert ("ok", _axis_key(regular)) == expected
    try:
        outcome: tuple[Any, ...] = ("ok", _axis_key(parse_axis(timestamps, frequency)))
    except TimestampError as exc:
        outcome = ("error", exc.issue, exc.index, exc.provided, exc.expected)
    assert outcome == expected


_CALENDAR = {"Monthly": 1, "Quarterly": 3, "Yearly": 12}
_FIXED = {
    "Seconds": timedelta(seconds=1),
    "Minutes": timedelta(minutes=1),
    "Hours": timedelta(hours=1),
    "Daily": timedelta(days=1),
    "Weekly": timedelta(days=7),
}


def _write(moment: datetime, digits: int, suffix: str) -> str:
    text = moment.strftime("%Y-%m-%dT%H:%M:%S").rjust(19, "0")
    if digits:
        text += "." + f"{moment.microsecond:06d}"[:digits]
    return text + suffix


def _add_months(start: datetime, months: int, month_end: bool) -> datetime | None:
    import calendar

    year, month0 = divmod(start.year * 12 + start.month - 1 + months, 12)
    if year > 9999:
        return None
    last = calendar.monthrange(year, month0 + 1)[1]
    return start.replace(year=year, month=month0 + 1, day=last if month_end else min(start.day, last))


@st.composite
def series(draw: st.DrawFn) -> tuple[list[Any], str]:
    frequency = draw(st.sampled_from(FREQUENCIES))
    count = draw(st.integers(2, 40))
    step = draw(st.sampled_from([1, 1, 2, 3, 7, 12]))
    digits = draw(st.integers(0, 6))
    suffix = draw(st.sampled_from(["", "Z", "+00:00", "+05:30", "-08:00", "+23:59"]))
    start = draw(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9990, 1, 1)))
    if digits == 0 or draw(st.booleans()):
        start = start.replace(microsecond=0)
    if frequency in _CALENDAR:
        month_end = draw(st.booleans())
        if month_end:
            start = _add_months(start.replace(day=1), 0, True) or start
        moments = []
        for i in range(count):
            moment = _add_months(start, i * step * _CALENDAR[frequency], month_end)
            if moment is None:
                break
            moments.append(moment)
    else:
        moments = []
        for i in range(count):
            try:
                moments.append(start + _FIXED[frequency] * step * i)
            except OverflowError:
                break
    moments = [m for m in moments if m.year <= 9999]
    if len(moments) < 2:
        moments = [datetime(2020, 1, 31), datetime(2020, 2, 29)]
    texts: list[Any] = [_write(m, digits, suffix) for m in moments]
    # Damage: none, or one element changed in one of the ways a client gets it wrong.
    damage = draw(
        st.sampled_from(
            [
                "none",
                "none",
                "char",
                "swap",
                "drop",
                "offset",
                "zulu",
                "fraction",
                "type",
                "duplicate",
                "year0",
                "day31",
                "unicode",
            ]
        )
    )
    at = draw(st.integers(0, len(texts) - 1))
    if damage == "char":
        position = draw(st.integers(0, len(texts[at]) - 1))
        char = draw(st.sampled_from(list("0123456789-:TZ+.x \n")))
        texts[at] = texts[at][:position] + char + texts[at][position + 1 :]
    elif damage == "swap" and len(texts) > 2:
        texts[at], texts[-1] = texts[-1], texts[at]
    elif damage == "drop" and len(texts) > 3:
        del texts[at]
    elif damage == "offset":
        texts[at] = texts[at][: len(texts[at]) - len(suffix)] + draw(st.sampled_from(["+01:00", "Z", "", "-00:00"]))
    elif damage == "zulu":
        texts = [t[: len(t) - len(suffix)] + "Z" if i % 2 else t for i, t in enumerate(texts)]
    elif damage == "fraction":
        body = texts[at][: len(texts[at]) - len(suffix)]
        head = body.split(".")[0]
        texts[at] = head + draw(st.sampled_from(["", ".0", ".000000", ".1234567"])) + suffix
    elif damage == "type":
        texts[at] = draw(st.sampled_from([None, 5, 1.5, ["x"], True]))
    elif damage == "duplicate" and at > 0:
        texts[at] = texts[at - 1]
    elif damage == "year0":
        texts[at] = "0000" + texts[at][4:]
    elif damage == "day31":
        texts[at] = texts[at][:8] + "31" + texts[at][10:]
    elif damage == "unicode":
        texts[at] = texts[at][:3] + "\u0663" + texts[at][4:]
    return texts, frequency


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=series())
def test_one_array_check_agrees_with_the_per_item_path(case: tuple[list[Any], str]) -> None:
    timestamps, frequency = case
    _check_agreement(timestamps, frequency)


@pytest.mark.parametrize(
    "timestamps,frequency",
    [
        (["2024-01-31T00:00:00", "2024-02-29T00:00:00", "2024-03-31T00:00:00"], "Monthly"),
        (["2024-01-30T00:00:00", "2024-02-29T00:00:00", "2024-03-30T00:00:00"], "Monthly"),
        (["2023-11-30T00:00:00", "2024-02-29T00:00:00", "2024-05-30T00:00:00"], "Quarterly"),
        (["2024-02-29T00:00:00", "2025-02-28T00:00:00", "2026-02-28T00:00:00"], "Yearly"),
        (["9999-12-31T23:00:00", "9999-12-31T23:30:00"], "Minutes"),
        (["2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00"], "Daily"),
        (["2026-01-01T00:00:00.5", "2026-01-01T00:00:01.500", "2026-01-01T00:00:02.5"], "Seconds"),
        (["2026-01-01T00:00:00", "2026-01-01T00:00:00"], "Hours"),
        (["2026-01-01T01:00:00", "2026-01-01T00:00:00"], "Hours"),
        (["2026-01-01T00:00:00", "2026-01-01T00:90:00"], "Hours"),
        (["2026-02-29T00:00:00", "2026-03-01T00:00:00"], "Daily"),
        (["2026-01-01T00:00:00+24:00", "2026-01-02T00:00:00+24:00"], "Daily"),
    ],
)
def test_hand_picked_axes_agree(timestamps: list[str], frequency: str) -> None:
    _check_agreement(timestamps, frequency)


def test_long_regular_series_takes_the_one_array_path() -> None:
    start = datetime(2020, 1, 1, tzinfo=timezone(timedelta(hours=2)))
    stamps = [(start + timedelta(minutes=5 * i)).isoformat() for i in range(5000)]
    axis = regular_axis(stamps, "Minutes")
    assert axis is not None and axis.step == 5 and axis.count == 5000
    _check_agreement(stamps, "Minutes")


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=series(), block=st.integers(2, 7))
def test_checks_a_block_at_a_time_agree_with_the_per_item_path(case: tuple[list[Any], str], block: int) -> None:
    # Long series are checked a block of rows at a time; small blocks put every kind of defect at a boundary.
    timestamps, frequency = case
    with patch.object(regular_module, "_BLOCK_ROWS", block):
        _check_agreement(timestamps, frequency)


@pytest.mark.parametrize("frequency", ["Hours", "Monthly"])
@pytest.mark.parametrize("at", [8191, 8192, 8193, 16384, 19999])
def test_defects_at_block_boundaries_of_a_long_series(frequency: str, at: int) -> None:
    start = datetime(100, 1, 31)
    if frequency == "Hours":
        stamps = [(start + timedelta(hours=i)).isoformat() for i in range(20_000)]
    else:
        stamps = [_write(_add_months(start, i, True) or start, 0, "") for i in range(20_000)]
    _check_agreement(stamps, frequency)
    assert regular_axis(stamps, frequency) is not None
    for damaged in (stamps[:at] + stamps[at + 1 :], [*stamps[:at], stamps[at - 1], *stamps[at + 1 :]],
                    [*stamps[:at], stamps[at][:8] + "28" + stamps[at][10:], *stamps[at + 1 :]]):
        _check_agreement(damaged, frequency)


# ------------------------------------------------------------------------------------------- values

value_items = (
    st.floats()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.sampled_from([None, True, False, "1.5", 1e300, -1e300, 1.0000001e300, [1.0]])
)


@settings(max_examples=500, deadline=None)
@given(
    values=st.lists(
        st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300)
        | st.integers(-(2**80), 2**80),
        max_size=30,
    )
    | st.lists(value_items, max_size=30)
)
def test_one_pass_value_check_agrees_with_the_per_item_check(values: list[Any]) -> None:
    fast_problems: list[dict[str, Any]] = []
    slow_problems: list[dict[str, Any]] = []
    fast = fields.values_array(values, fast_problems)
    slow = fields.check_values(values, slow_problems)
    assert repr(fast_problems) == repr(slow_problems)
    if not slow_problems:
        assert fast.dtype == np.float64
        assert repr(fast.tolist()) == repr(slow)


# ------------------------------------------------------------------------------------------- whole bodies

_MAX_POINTS = 10_000


def _general_outcome(raw: bytes, headers: dict[str, str], max_points: int) -> tuple[Any, ...]:
    """What the general path (json, marshmallow, the per-stage checks) answers for a POST /forecast body."""
    try:
        forecast_request, submitted = schemas.load_request(validation.parse_json_body(raw), headers)
        series = schemas.check_series(submitted, forecast_request.data_frequency, max_points=max_points)
    except ApiError as exc:
        return ("error", exc.status, exc.message, json.dumps(exc.details, sort_keys=True, default=repr))
    return _ok_outcome(forecast_request, series)


def _ok_outcome(forecast_request: schemas.ForecastRequest, series: schemas.SeriesData) -> tuple[Any, ...]:
    # tobytes tells -0.0 from 0.0; repr tells 1 from 1.0 in the request's fields
    return ("ok", repr(forecast_request), _axis_key(series.axis), series.values.dtype.str, series.values.tobytes())


def _read_outcome(raw: bytes, headers: dict[str, str], max_points: int) -> tuple[Any, ...]:
    try:
        forecast_request, series = forecast_body.read_forecast_request(raw, headers, max_points=max_points)
    except ApiError as exc:
        return ("error", exc.status, exc.message, json.dumps(exc.details, sort_keys=True, default=repr))
    return _ok_outcome(forecast_request, series)


def _check_body(raw: bytes, headers: dict[str, str], max_points: int = _MAX_POINTS) -> bool:
    """Both paths answer alike; True when the typed pass took the body."""
    expected = _general_outcome(raw, headers, max_points)
    typed = forecast_body._read_well_formed(raw, headers, max_points=max_points)
    if typed is not None:
        assert _ok_outcome(*typed) == expected
    assert _read_outcome(raw, headers, max_points) == expected
    return typed is not None


number_literals = (
    st.floats(allow_nan=False, allow_infinity=False).map(repr)
    | st.integers(-(10**30), 10**30).map(str)
    | st.builds(
        lambda sign, digits, fraction, exponent: f"{sign}{digits.lstrip('0') or '0'}"
        + (f".{fraction}" if fraction else "")
        + (f"e{exponent}" if exponent is not None else ""),
        st.sampled_from(["", "-"]),
        st.text("0123456789", min_size=1, max_size=25),
        st.text("0123456789", max_size=25),
        st.none() | st.integers(-400, 400),
    )
    | st.sampled_from(
        ["-0", "-0.0", "0e0", "1E5", "1E+5", "1e-400", "1e400", "-1e400", "1.7976931348623157e308", "2e308",
         "1e300", "1.0000001e300", "-1e300", "4.9e-324", "NaN", "Infinity", "-Infinity", "true", "false", "null",
         '"1"', "01", "1.", ".5", "+1", "[1]", "1" * 400, "123456789012345678901234567890"]
    )
)


@st.composite
def forecast_bodies(draw: st.DrawFn) -> tuple[bytes, dict[str, str], int]:
    """A POST /forecast body spelled in one of the ways encoders write it, valid or with one defect."""
    defect = draw(st.sampled_from(
        ["none"] * 8 + ["timestamps", "count", "value", "horizon", "frequency", "confidence", "unknown",
                        "duplicate", "deep", "not-an-object", "header", "max-points"]
    ))
    if defect == "timestamps":
        timestamps, frequency = draw(series())  # damaged or short, now and then still valid
    else:
        frequency = draw(st.sampled_from(FREQUENCIES))
        timestamps = _regular_texts(draw, frequency, draw(st.integers(10, 60)))
    count = len(timestamps) + (draw(st.sampled_from([-1, 1])) if defect == "count" else 0)
    plain = st.floats(-1e6, 1e6, allow_nan=False).map(repr) | st.integers(-(10**6), 10**6).map(str)
    values = draw(st.lists(plain, min_size=count, max_size=count))
    if defect == "value" or draw(st.integers(0, 3)) == 0:  # an unusual spelling, valid or not
        values[draw(st.integers(0, len(values) - 1))] = draw(number_literals)
    separator = draw(st.sampled_from([",", ", ", ",\n  ", " , "]))
    if draw(st.integers(0, 4)) == 0:  # some digit written as an escape: the same string to json
        at = draw(st.integers(0, len(timestamps) - 1))
        if isinstance(timestamps[at], str) and timestamps[at][:1].isdigit():
            timestamps = [*timestamps]
            timestamps[at] = "\x00ESC" + timestamps[at]
    stamp_text = "[" + separator.join(_literal(t) for t in timestamps) + "]"
    if draw(st.integers(0, 5)) == 0:
        stamp_text = "[ " + stamp_text[1:]
    arrays = [f'"timestamps": {stamp_text}', '"values": [' + separator.join(values) + "]"]
    fields = {
        "series": "[{" + ", ".join(draw(st.permutations(arrays))) + "}]",
        "forecast_horizon": draw(st.sampled_from(["48", "1", "100"])),
        "data_frequency": f'"{frequency}"',
        "forecast_frequency": f'"{frequency}"',
    }
    confidence = draw(st.sampled_from([None, "0.95", "0.5", "0.1", "0.99", "9.5e-1", "0.9500000000000001"]))
    if defect == "horizon":
        fields["forecast_horizon"] = draw(st.sampled_from(["0", "101", "48.0", "1e1", '"5"', "true", "null",
                                                           "100000000000000000000"]))
    elif defect == "frequency":
        fields[draw(st.sampled_from(["data_frequency", "forecast_frequency"]))] = '"Hourly"'
    elif defect == "confidence":
        confidence = draw(st.sampled_from(["1", "0", '"0.9"', "NaN", "null", "true", "1e400", "0.05"]))
    if confidence is not None:
        fields["confidence"] = confidence
    items = list(fields.items())
    if defect == "unknown":
        items.append(("note", '{"any": [1, "two", null]}'))
    elif defect == "duplicate":  # json takes the last of duplicate keys; both orders are tried
        name = draw(st.sampled_from(["forecast_horizon", "data_frequency", "confidence", "series"]))
        other = (name, draw(st.sampled_from(['"x"', "7", "0.5", "[]", '"Hours"'])))
        items.insert(0 if draw(st.booleans()) else len(items), other)
    elif defect == "deep":
        items.append(("note", "[" * 1100 + "]" * 1100))
    items = draw(st.permutations(items))
    text = "{" + ", ".join(f'"{name}": {value}' for name, value in items) + "}"
    if defect == "not-an-object":
        text = "[" + text + "]"
    headers = {"X-Model-Id": draw(st.sampled_from(["nope", "forecast-model-1"])),
               "X-Model-Selector": "forecast-model-3"} if defect == "header" else draw(
        st.sampled_from([{}, {"X-Model-Id": "forecast-model-2"}, {"X-Model-Selector": "forecast-model-4"}]))
    max_points = 12 if defect == "max-points" else _MAX_POINTS
    return text.encode("utf-8", "surrogatepass"), headers, max_points


def _literal(item: Any) -> str:
    if isinstance(item, str) and item.startswith("\x00ESC"):
        text = item[4:]
        return '"\\u003' + text[0] + text[1:] + '"'  # its first digit as an escape, e.g. \u0032 for "2"
    return json.dumps(item)


def _regular_texts(draw: st.DrawFn, frequency: str, count: int) -> list[Any]:
    start = draw(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2100, 1, 1))).replace(microsecond=0)
    suffix = draw(st.sampled_from(["", "Z", "+02:00"]))
    if frequency in _CALENDAR:
        moments = [_add_months(start, i * _CALENDAR[frequency], False) for i in range(count)]
    else:
        moments = [start + _FIXED[frequency] * i for i in range(count)]
    return [_write(m, 0, suffix) for m in moments if m is not None]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=forecast_bodies())
def test_typed_body_pass_answers_as_the_general_path(case: tuple[bytes, dict[str, str], int]) -> None:
    raw, headers, max_points = case
    _check_body(raw, headers, max_points)


def _plain_body(count: int, values: list[str] | None = None, **spelling: Any) -> bytes:
    stamps = [(datetime(2024, 1, 1) + timedelta(hours=i)).isoformat() for i in range(count)]
    numbers = values if values is not None else [repr(float(i % 17) / 3) for i in range(count)]
    body = {"series": [{"timestamps": stamps, "values": [0] * count}], "forecast_horizon": 24,
            "data_frequency": "Hours", "forecast_frequency": "Hours"}
    text = json.dumps(body, **spelling)
    zeros = json.dumps([0] * count, **{k: v for k, v in spelling.items() if k == "separators"})
    return text.replace(zeros, "[" + ",".join(numbers) + "]", 1).encode()


@pytest.mark.parametrize("spelling", [{}, {"separators": (",", ":")}, {"indent": 2}])
def test_well_formed_bodies_take_the_typed_pass(spelling: dict[str, Any]) -> None:
    # Indented bodies too: their timestamps are decoded as a list, still without the general path.
    assert _check_body(_plain_body(500, **spelling), {})


@pytest.mark.parametrize(
    "literal",
    ["-0", "-0.0", "1", "1.0", "1E5", "123456789012345678901", "9007199254740993", "1e300", "1e301", "1e400",
     "4.9e-324", "2.2250738585072014e-308", "0.30000000000000004", "1" * 400, "NaN", "-Infinity", "null", "true"],
)
def test_each_number_spelling_reads_as_json_reads_it(literal: str) -> None:
    numbers = [repr(float(i)) for i in range(30)]
    numbers[7] = literal
    _check_body(_plain_body(30, numbers), {})


# ------------------------------------------------------------------------------------------- body reading


def _gunicorn_body(data: bytes, declared: int) -> Any:
    from gunicorn.http.body import Body, LengthReader
    from gunicorn.http.unreader import IterUnreader

    return Body(LengthReader(IterUnreader(data[i : i + 8192] for i in range(0, len(data), 8192)), declared))


@pytest.mark.parametrize("sent,declared", [(300_000, 300_000), (150_000, 300_000), (1, 1), (0, 0)])
def test_body_from_gunicorns_length_reader_is_werkzeugs(json_app: Flask, sent: int, declared: int) -> None:
    from app.web.body import read_body

    data = bytes(range(256)) * (300_000 // 256 + 1)
    expected = _gunicorn_body(data[:sent], declared).read(declared) if declared else b""
    body = _gunicorn_body(data[:sent], declared)
    environ = {"wsgi.input": body, "wsgi.input_terminated": True, "CONTENT_LENGTH": str(declared)}
    with json_app.test_request_context("/forecast", method="POST", environ_overrides=environ):
        assert request.content_length == declared
        assert read_body(1_000_000) == expected
        assert body.read() == b""  # nothing left behind for the next request on the connection


def test_body_over_the_limit_is_still_werkzeugs_413(json_app: Flask) -> None:
    from werkzeug.exceptions import RequestEntityTooLarge

    from app.web.body import read_body

    json_app.config["MAX_CONTENT_LENGTH"] = 100
    try:
        body = _gunicorn_body(b"x" * 200, 200)
        environ = {"wsgi.input": body, "wsgi.input_terminated": True, "CONTENT_LENGTH": "200"}
        with (
            json_app.test_request_context("/forecast", method="POST", environ_overrides=environ),
            pytest.raises(RequestEntityTooLarge),
        ):
            read_body(1_000)
    finally:
        json_app.config["MAX_CONTENT_LENGTH"] = None
