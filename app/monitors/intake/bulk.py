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

from app.errors import InvalidInput, MalformedInput
from app.monitors.intake.points import IncomingPoints, check_points
from app.monitors.label_sets import Labels, checked_labels
from app.web.validation import problem

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


@dataclass(frozen=True)
class RefusedRow:
    """A row wrong in itself, by its index in the body: left out, the other rows go on."""

    row: int
    error: InvalidInput


@dataclass
class BulkRows:
    monitors: dict[tuple[str, Labels], MonitorRows]  # by (monitor id, labels)
    rejected: list[RefusedRow]
    rows: int


def check_rows(rows: list[Any]) -> BulkRows:
    """The rows of a body, each a parsed JSON value or the MalformedInput of a line that was not JSON."""
    monitors: dict[tuple[str, Labels], MonitorRows] = {}
    rejected: list[RefusedRow] = []

    def reject(index: int, error: InvalidInput) -> None:
        rejected.append(RefusedRow(index, error))

    for index, row in enumerate(rows):
        if isinstance(row, MalformedInput):
            reject(index, InvalidInput(f"Invalid row: {row.message}", details={**(row.details or {}),
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
        except InvalidInput as exc:
            details = dict(exc.details or {})
            details["field"] = {"timestamps": "timestamp", "values": "value"}.get(details.get("field"),
                                                                                    details.get("field"))
            details.pop("index", None)
            reject(index, InvalidInput(exc.message, details={**details, "row": index}))
            continue
        try:
            labels = checked_labels(row.get("labels"), row=index)
        except InvalidInput as exc:
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


def _row_error(index: int, name: str, issue: str, provided: Any) -> InvalidInput:
    return InvalidInput(f"Invalid row: {name}: {issue}.", details=problem(name, issue, provided, row=index))
