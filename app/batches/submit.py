"""A batch submission read and checked before anything is stored: the request's shape (400), its size (413),
its media type (415). Each series' data is not judged here: a worker judges it exactly as POST /forecast would,
and a bad series gets its own error in the results.

A CSV upload is streamed to the database in pieces as it arrives (the web process never holds it, and workers
on other machines can read it); only the column of series ids is scanned on the way, to count the series for
the size limit and the rate limits. pandas parses it in the worker."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from werkzeug.datastructures import MultiDict

from app.anomalies.schemas import load_request as load_anomaly_request
from app.batches import backtest
from app.batches import covariates as batch_covariates
from app.batches.one_series import ANOMALIES, BACKTEST, FORECAST, KINDS
from app.batches.schemas import ID_LENGTH, AnomalyBatchRequestSchema, ForecastBatchRequestSchema
from app.errors import InputTooLarge, MalformedInput
from app.forecast.schemas import load_request as load_forecast_request
from app.web.validation import envelope, load_object, problem, unstorable

CSV_HEADER = ("unique_id", "timestamp", "value")
# Nixtla's (statsforecast's) long format names the same three columns so; either header is taken, in any order.
NIXTLA_CSV_HEADER = ("unique_id", "ds", "y")
CSV_HEADERS = (CSV_HEADER, NIXTLA_CSV_HEADER)
# Upload pieces stored as one row each: large enough to keep rows few (a thousand for 1 GB), small enough that
# the piece and the database driver's copy of it (psycopg's is twice as large, as hex) add little to the web
# process's memory.
PIECE_BYTES = 1024 * 1024
READ_BYTES = PIECE_BYTES
# A CSV line longer than this is not a row of three short fields.
MAX_LINE_BYTES = 1024 * 1024
# The id limit of a JSON batch's series, held to a CSV's unique_id alike.
MAX_ID_CHARS = ID_LENGTH[1]

_forecast_schema = ForecastBatchRequestSchema()
_anomaly_schema = AnomalyBatchRequestSchema()
_backtest_schema = backtest.BacktestBatchRequestSchema()
_SCHEMAS = {FORECAST: _forecast_schema, ANOMALIES: _anomaly_schema, BACKTEST: _backtest_schema}
_FIELDS = {
    FORECAST: ("forecast_horizon", "data_frequency", "forecast_frequency", "confidence",
               *batch_covariates.BODY_FIELDS),
    ANOMALIES: ("data_frequency", "false_alarms_per_week", "confidence", "sensitivity"),
    BACKTEST: (*backtest.FIELDS, *batch_covariates.BODY_FIELDS),
}


@dataclass(frozen=True)
class BatchFields:
    kind: str
    # The fields every series is judged with (as its single-series request would carry them) and the model
    # header: stored with the batch, handed to each series' check.
    parameters: dict[str, Any]


def too_many_series(count: int, maximum: int) -> InputTooLarge:
    return InputTooLarge(
        f"The batch holds {count:,} series; at most {maximum:,} are accepted in one batch.",
        details={"field": "series", "issue": "too many series", "provided": f"{count} series", "maximum": maximum},
    )


def read_json_batch(body: Any, headers: Mapping[str, str], *, max_series: int,
                    escaped: bool = True) -> tuple[BatchFields, list[dict[str, Any]]]:
    """The batch's fields and its series (id, timestamps, values), or the 400/413 of the whole request.
    ``escaped``: the body holds a \\u escape (else no string in it can hold NUL or a lone surrogate)."""
    if isinstance(body, dict) and isinstance(body.get("series"), list) and len(body["series"]) > max_series:
        raise too_many_series(len(body["series"]), max_series)
    kind = body.get("kind", FORECAST) if isinstance(body, dict) else FORECAST
    schema = _SCHEMAS.get(kind, _forecast_schema) if isinstance(kind, str) else _forecast_schema
    problems: list[dict[str, Any]] = []
    data = load_object(schema, body, problems)
    seen: dict[str, int] = {}
    for index, series in enumerate(data["series"]):
        if series["id"] in seen:
            problems.append(problem(f"series[{index}].id", f"Must be unique within the batch (also series"
                                    f"[{seen[series['id']]}])", series["id"]))
        seen.setdefault(series["id"], index)
    if not problems and data["kind"] == BACKTEST:
        # Known from the request alone, so refused before anything is stored.
        problems = backtest.short_series_problems(data["series"], data)
    if not problems and data["kind"] != ANOMALIES:
        problems = batch_covariates.json_series_problems(data["series"], data, backtest=data["kind"] == BACKTEST)
    if problems:
        raise MalformedInput(f"Invalid request: {problems[0]['field']}: {problems[0]['issue']}.",
                             details=envelope(problems))
    fields = check_fields(data["kind"], body, headers)
    series = [{"id": s["id"], "timestamps": s["timestamps"], "values": s["values"],
               **({"covariates": s["covariates"]} if s.get("covariates") else {})} for s in data["series"]]
    if escaped:
        refuse_unstorable(series)
    return fields, series


def refuse_unstorable(series: list[dict[str, Any]]) -> None:
    """400 for a string in a series that no database could keep as text (NUL, a lone surrogate): the batch is
    kept for the workers, and stored text is held to that everywhere (app.web.validation.unstorable). Only
    bodies with escapes need the walk: neither can be written in JSON otherwise."""
    for index, one in enumerate(series):
        arrays = [(f"series[{index}].{name}", one[name]) for name in ("timestamps", "values")]
        for number, covariate in enumerate(one.get("covariates") or ()):
            where = f"series[{index}].covariates[{number}]"
            arrays += [(f"{where}.name", [covariate.get("name")]),
                       *((f"{where}.{part}", covariate.get(part) or []) for part in ("history", "future"))]
        for field, items in arrays:
            for position, item in enumerate(items):
                issue = unstorable(item) if isinstance(item, str) else None
                if issue is not None:
                    raise MalformedInput(f"Invalid request: {field}: {issue}.",
                                         details=problem(field, issue, item, index=position))


def check_fields(kind: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> BatchFields:
    """The batch's fields and model header, loaded as the single-series endpoint loads them (a 400 names any
    problem exactly as that endpoint would)."""
    fields = {name: body[name] for name in _FIELDS[kind] if name in body}
    probe = {**fields, "series": [{"timestamps": [], "values": []}]}
    if kind in (FORECAST, BACKTEST):
        forecast_request = load_forecast_request(probe, headers)[0]
        # Batch-wide, so judged once here: a bad country or calendar feature refuses the batch as it would
        # refuse POST /forecast (422, the same words), with nothing stored.
        batch_covariates.check_batch_wide(forecast_request.holidays, forecast_request.calendar_features)
        model_id = forecast_request.model_id
        if kind == BACKTEST and fields.get("models"):
            model_id = fields["models"][0]
    else:
        model_id = load_anomaly_request(probe, headers).detector
    return BatchFields(kind=kind, parameters={"fields": fields, "headers": {"X-Model-Id": model_id}})


_INTEGER = re.compile(r"[+-]?\d{1,18}")


def fields_from_query(args: MultiDict[str, str], headers: Mapping[str, str]) -> BatchFields:
    """A CSV batch's fields, from the query string: numbers where the text is one, so the body schema judges
    them as it judges JSON (a horizon of "ten" is "Not a valid integer.")."""
    body: dict[str, Any] = {}
    for name, value in args.items():
        if name == "models":  # models=a,b or models=a&models=b
            body[name] = [model for given in args.getlist(name) for model in given.split(",")]
        elif name in ("forecast_horizon", "sensitivity", "n_windows", "step_size") and _INTEGER.fullmatch(value):
            body[name] = int(value)
        elif name in ("confidence", "false_alarms_per_week"):
            try:
                body[name] = float(value)
            except ValueError:
                body[name] = value
        else:
            body[name] = value
    batch_covariates.body_from_query(args, body)
    kind = body.get("kind", FORECAST)
    schema = _SCHEMAS.get(kind, _forecast_schema)
    # The series arrive in the body; the fields are checked with a stand-in for them.
    load_object(schema, {**body, "series": [{"id": "-", "timestamps": [], "values": []}]}, [])
    return check_fields(kind if kind in KINDS else FORECAST, body, headers)


# The csv module's own limit on one field (its default, which pandas would not apply): no field of a row of
# three short fields comes near it, and the scan never holds more than this of one.
MAX_FIELD_CHARS = 128 * 1024
# Where a row ends, for the scan as for pandas' parser, which splits rows on a lone carriage return too.
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")


class UploadScan:
    """Checks a CSV upload's header and counts its distinct series ids as the bytes stream past.

    What is a row is decided as pandas' parser decides it in the worker (a line ends at \\n, \\r\\n or a
    lone \\r; a quoted field may hold line breaks), so the series counted here, against the size and rate
    limits, are the series the worker finds; the worker computes no more than were counted all the same
    (app.batches.tasks). Each distinct id is kept as a 64-bit hash, never as its text, so the scan's memory
    is a few dozen bytes per series whatever the ids' length; the id limit of JSON batches holds here too."""

    def __init__(self, *, max_series: int, declared: Mapping[str, list[str]] | None = None,
                 covariates: bool = True) -> None:
        self.max_series = max_series
        # An anomaly batch has no covariates: a further column would be read by no one.
        self.covariates = covariates
        # The batch's lists naming covariate columns (hist_exog_list, categorical_exog_list): checked against
        # the header, so a list naming no column is refused before anything is stored.
        self.declared = declared or {}
        # hash() of bytes is keyed per process (SipHash): a client cannot make two ids collide on purpose.
        self.ids: set[int] = set()
        self._rest = b""
        self._pattern: re.Pattern[bytes] | None = None
        self._column = 0
        self._empty = hash(b"")

    def feed(self, data: bytes) -> None:
        if b"\0" in data:
            raise MalformedInput("Invalid CSV upload: it holds a NUL character, which no field may contain.",
                                 details=problem("body", "NUL character", "\\x00"))
        text = self._rest + data
        cut = _row_end(text)
        if cut < 0:
            if len(text) > MAX_LINE_BYTES:
                raise _bad_csv("line too long", f"more than {MAX_LINE_BYTES} bytes without a line break")
            self._rest = text
            return
        self._rest = text[cut:]
        self._lines(text[:cut])

    def finish(self) -> int:
        if self._rest.strip():
            self._lines(self._rest + b"\n")
        self._rest = b""
        if self._pattern is None:
            raise _bad_csv("missing header", "")
        self.ids.discard(self._empty)
        if not self.ids:
            raise _bad_csv("no rows", "")
        return len(self.ids)

    def _lines(self, lines: bytes) -> None:
        if self._pattern is None:
            header, *rest = _LINE_BREAK.split(lines, maxsplit=1)
            self._header(header)
            lines = rest[0] if rest else b""
        if b'"' in lines:  # quoted fields: the csv module finds the id column
            ids = self._quoted_ids(lines)
        else:
            assert self._pattern is not None
            ids = self._pattern.findall(lines.replace(b"\r", b"\n"))
        if ids and max(map(len, ids)) > MAX_ID_CHARS:
            for one in ids:
                if len(one) > MAX_ID_CHARS and len(one.decode("utf-8", "replace")) > MAX_ID_CHARS:
                    raise _long_id(one)
        self.ids.update(map(hash, ids))
        count = len(self.ids) - (self._empty in self.ids)
        if count > self.max_series:
            raise too_many_series(count, self.max_series)

    def _quoted_ids(self, lines: bytes) -> list[bytes]:
        # newline="": the csv module then sees every line break as written, and ends a row where pandas does.
        rows = csv.reader(io.StringIO(lines.decode("utf-8", "replace"), newline=""))
        try:
            return [row[self._column].encode() for row in rows if len(row) > self._column]
        except csv.Error as error:
            if "field larger than field limit" in str(error):
                raise MalformedInput(
                    f"Invalid CSV upload: a field is longer than {MAX_FIELD_CHARS:,} characters.",
                    details=problem("body", "field too long", f"more than {MAX_FIELD_CHARS} characters",
                                    maximum=MAX_FIELD_CHARS),
                ) from None
            raise _bad_csv(f"invalid CSV: {str(error)[:120]}", "") from None

    def _header(self, line: bytes) -> None:
        names = [name.strip().strip('"') for name in line.decode("utf-8", "replace").lstrip("\ufeff").split(",")]
        header = next((header for header in CSV_HEADERS if set(header) <= set(names)), None)
        if header is None:
            raise _bad_csv("Must be the header unique_id,timestamp,value (or unique_id,ds,y)", ",".join(names))
        # Every further column is a covariate (docs/batches.md, Covariates).
        further = [name for name in names if name not in header]
        if further and not self.covariates:
            raise _bad_csv("Must be the header unique_id,timestamp,value (or unique_id,ds,y): an anomaly batch "
                           "takes no covariate columns", ",".join(names)[:200])
        found = batch_covariates.header_problems(further, self.declared)
        if found:
            raise MalformedInput(f"Invalid CSV upload: {found[0]['field']}: {found[0]['issue']}.",
                                 details=envelope(found))
        self._column = names.index("unique_id")
        self._pattern = re.compile(rb"^(?:[^,\r\n]*,){%d}([^,\r\n]*)" % self._column, re.MULTILINE)


def _row_end(text: bytes) -> int:
    """Where the last complete row of ``text`` ends (after its line break), or -1: a line break inside a quoted
    field (an odd number of quotes before it) ends no row. ``text`` starts at the start of a row."""
    cut = max(text.rfind(b"\n"), text.rfind(b"\r"))
    if cut < 0 or b'"' not in text:
        return cut + 1 if cut >= 0 else -1
    odd = text.count(b'"', 0, cut + 1) % 2
    while odd and cut >= 0:
        before = max(text.rfind(b"\n", 0, cut), text.rfind(b"\r", 0, cut))
        odd ^= text.count(b'"', before + 1, cut + 1) % 2
        cut = before
    return cut + 1 if cut >= 0 else -1


def _long_id(unique_id: bytes) -> MalformedInput:
    text = unique_id.decode("utf-8", "replace")
    return MalformedInput(
        f"Invalid CSV upload: unique_id: Must be between 1 and {MAX_ID_CHARS} characters, as a JSON batch's ids.",
        details=problem("unique_id", f"Must be between 1 and {MAX_ID_CHARS} characters",
                        f"{text[:32]}... ({len(text):,} characters)", maximum=MAX_ID_CHARS),
    )


def _bad_csv(issue: str, provided: str) -> MalformedInput:
    return MalformedInput(f"Invalid CSV upload: {issue}.", details=problem("body", issue, provided))


def pieces(stream: Any, *, max_bytes: int, scan: UploadScan) -> Iterator[bytes]:
    """The upload in pieces of about PIECE_BYTES, scanned on the way; 413 past ``max_bytes``. A read of a whole
    piece is handed on as it is: the web process then holds one piece at a time, never a second copy of it."""
    parts: list[bytes] = []
    size = received = 0
    while True:
        data = stream.read(READ_BYTES)
        if not data:
            break
        received += len(data)
        if received > max_bytes:
            raise InputTooLarge.over(max_bytes)
        scan.feed(data)
        parts.append(data)
        size += len(data)
        if size >= PIECE_BYTES:
            yield parts[0] if len(parts) == 1 else b"".join(parts)
            parts, size = [], 0
    if parts:
        yield b"".join(parts)
