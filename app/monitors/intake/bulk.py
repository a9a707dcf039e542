"""Points for many monitors in one body (POST /monitors/points): rows checked one by one, grouped by series (a
monitor and a label set), each series' rows appended as one POST /monitors/{id}/points would append them.

A row is ``{"monitor_id", "timestamp", "value"}``, with ``"labels"`` for a labelled series of the monitor; the body
is ``{"points": [row, ...]}`` (JSON) or one row per line (newline-delimited JSON). A row that is wrong in itself
(not an object, a bad timestamp or value, not after the previous row of its series) gets its own 422 entry naming
its index and is left out; the other rows go on. A series' rows then succeed or fail together, with the single
append's answer or error: a conflict with the stored points refuses that series' rows and no other series'. A body
none of whose rows is usable is a plain 422.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from app.monitors.schemas import IncomingPoints, check_points
from app.monitors.series import Labels, checked_labels
from app.web.errors import ApiError, DataValidationError, InvalidRequest
from app.web.validation import parse_json_body, problem

# What new_monitor_id makes: anything else names no monitor, and is refused before it reaches a query (a NUL,
# say, which PostgreSQL cannot even compare).
MONITOR_ID_RE = re.compile(r"mon_[0-9a-f]{24}")
NDJSON_TYPES = ("application/x-ndjson", "application/jsonl", "application/jsonlines", "application/x-jsonlines")


@dataclass
class MonitorRows:
    """One series' accepted rows, in body order: their indexes in the body and the points they make."""

    rows: list[int] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    form: str | None = None

    def points(self) -> IncomingPoints:
        return IncomingPoints(epochs=self.epochs, texts=self.texts, values=self.values)


@dataclass
class BulkRows:
    monitors: dict[tuple[str, Labels], MonitorRows]  # by (monitor id, labels)
    rejected: list[dict[str, Any]]  # {"row", "status", "error"}
    rows: int


def error_entry(error: ApiError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.details:
        body["details"] = error.details
    return body


def parse_rows(raw: bytes, *, ndjson: bool, max_rows: int) -> list[Any]:
    """The rows of a body: a JSON body's ``points`` array, or one parsed value per non-blank NDJSON line (a line
    that is not JSON stays in place as an error, so it gets its own entry)."""
    if not ndjson:
        body = parse_json_body(raw)
        if not isinstance(body, dict) or not isinstance(body.get("points"), list):
            issue = "Must be a JSON object with a 'points' array of {monitor_id, timestamp, value} rows"
            raise InvalidRequest(f"Invalid request: points: {issue}.", details=problem("points", issue, ""))
        rows = body["points"]
    else:
        rows = []
        for line in raw.split(b"\n"):
            if not line.strip():
                continue
            if len(rows) >= max_rows:
                rows.append(None)  # enough to report the excess below without parsing the rest
                break
            try:
                rows.append(parse_json_body(line))
            except InvalidRequest as exc:
                rows.append(exc)
    if not rows:
        raise DataValidationError("Invalid points: at least one row is needed.",
                                  details=problem("points", "at least one row is needed", "0 rows", minimum=1))
    if len(rows) > max_rows:
        raise DataValidationError("Invalid points: too many rows.",
                                  details=problem("points", "too many rows", f"more than {max_rows}",
                                                  maximum=max_rows))
    return rows


def check_rows(rows: list[Any]) -> BulkRows:
    monitors: dict[tuple[str, Labels], MonitorRows] = {}
    rejected: list[dict[str, Any]] = []

    def reject(index: int, error: ApiError) -> None:
        rejected.append({"row": index, "status": error.status, "error": error_entry(error)})

    for index, row in enumerate(rows):
        if isinstance(row, InvalidRequest):
            reject(index, DataValidationError(f"Invalid row: {row.message}", details={**(row.details or {}),
                                                                                        "row": index}))
            continue
        if not isinstance(row, dict):
            reject(index, _row_error(index, "row", "Must be an object {monitor_id, timestamp, value}", row))
            continue
        monitor_id = row.get("monitor_id")
        if not isinstance(monitor_id, str) or not MONITOR_ID_RE.fullmatch(monitor_id):
            reject(index, _row_error(index, "monitor_id", "Must be a monitor id (mon_ and 24 hexadecimal digits)",
                                     monitor_id))
            continue
        if "timestamp" not in row or "value" not in row:
            missing = "timestamp" if "timestamp" not in row else "value"
            reject(index, _row_error(index, missing, "Required field is missing", None))
            continue
        try:
            point = check_points([row["timestamp"]], [row["value"]], max_points=1)
        except DataValidationError as exc:
            details = dict(exc.details or {})
            details["field"] = {"timestamps": "timestamp", "values": "value"}.get(details.get("field"),
                                                                                    details.get("field"))
            details.pop("index", None)
            reject(index, DataValidationError(exc.message, details={**details, "row": index}))
            continue
        try:
            labels = checked_labels(row.get("labels"), row=index)
        except DataValidationError as exc:
            reject(index, exc)
            continue
        text = point.texts[0]
        form = "Z" if text.endswith("Z") else ("offset" if len(text) > 19 and text[-6] in "+-" else "naive")
        group = monitors.setdefault((monitor_id, labels), MonitorRows())
        if group.form is not None and form != group.form:
            reject(index, _row_error(index, "timestamp", "mixed timestamp forms within one monitor's rows", text))
            continue
        if group.epochs and point.epochs[0] <= group.epochs[-1]:
            reject(index, _row_error(index, "timestamp", "not after the previous row of this monitor (each "
                                     "monitor's rows go in time order; whole seconds identify a point)", text))
            continue
        group.form = form
        group.rows.append(index)
        group.epochs.append(point.epochs[0])
        group.texts.append(text)
        group.values.append(point.values[0])
    return BulkRows(monitors={k: v for k, v in monitors.items() if v.rows}, rejected=rejected, rows=len(rows))


def _row_error(index: int, name: str, issue: str, provided: Any) -> DataValidationError:
    return DataValidationError(f"Invalid row: {name}: {issue}.", details=problem(name, issue, provided, row=index))


def no_usable_row(rejected: list[dict[str, Any]]) -> DataValidationError:
    """The answer when every row was refused: nothing to store, so the request itself is a 422 (its details list
    the rows' own errors, at most the first 100)."""
    first = rejected[0]["error"]
    details = {**first.get("details", {}), "rejected_rows": len(rejected), "errors": rejected[:100]}
    return DataValidationError(f"Invalid points: no usable row; the first: {first['message']}", details=details)
