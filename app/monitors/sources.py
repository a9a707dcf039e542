"""Where a monitor's points come from (pushed, or read from Prometheus) and where its alerts go besides the
webhook (Alertmanager): the checks on those fields and how a monitor shows them. The reading itself is in
app/monitors/prometheus/reader.py, the alerts in app/monitors/alerts/alertmanager.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row

from app.errors import MalformedInput
from app.monitors.alerts.webhooks import WebhookAddressError, check_url
from app.monitors.intake import selectors
from app.series.frequencies import UNIT_SECONDS
from app.web.validation import problem

# The step of a Prometheus-backed monitor's points: one per unit of its data_frequency. Calendar units have
# no fixed length, and PromQL steps are fixed, so those frequencies cannot be read from Prometheus.
STEP_SECONDS = UNIT_SECONDS
MAX_QUERY_LENGTH = 4096
# What a new monitor learns from first: up to this many of the latest steps (never more than it retains).
BACKFILL_POINTS = 1000

PENDING = "pending"  # not read yet
OK = "ok"


def _refuse(field: str, issue: str, provided: Any) -> MalformedInput:
    return MalformedInput(f"Invalid request: {field}: {issue}.", details=problem(field, issue, provided))


def checked_url(field: str, url: str, *, allow_private: bool) -> None:
    """The webhook address rules, for a Prometheus or Alertmanager base URL."""
    try:
        check_url(url, allow_private=allow_private, field=field)
    except WebhookAddressError as exc:
        raise _refuse(field, str(exc), url) from exc
    if "?" in url or "#" in url:
        raise _refuse(field, "Must be a base URL, without a query or fragment", url)


def check_fields(fields: dict[str, Any], current: Row[Any] | None, *, allow_private: bool) -> None:
    """400 for a source or Alertmanager that cannot work: a query without a URL (or the reverse), a calendar
    frequency, a query that is blank or too long, an address the webhook rules refuse."""
    url = fields["prometheus_url"] if "prometheus_url" in fields else (current.prometheus_url if current else None)
    query = fields["prometheus_query"] if "prometheus_query" in fields else (
        current.prometheus_query if current else None)
    if (url is None) != (query is None):
        field = "prometheus_query" if query is None else "prometheus_url"
        raise _refuse(field, "prometheus_url and prometheus_query go together: set both, or neither", None)
    if current is not None and (current.prometheus_query is None) != (query is None):
        raise _refuse("prometheus_query", "A monitor's source is fixed at creation (pushed points or a "
                      "Prometheus query); create another monitor to change it", fields.get("prometheus_query"))
    if query is not None:
        frequency = current.data_frequency if current is not None else fields["data_frequency"]
        if frequency not in STEP_SECONDS:
            raise _refuse("data_frequency", "A Prometheus-backed monitor needs one of: " + ", ".join(STEP_SECONDS),
                          frequency)
        if not query.strip():
            raise _refuse("prometheus_query", "Must not be blank", query)
        if len(query) > MAX_QUERY_LENGTH:
            raise _refuse("prometheus_query", f"Must be at most {MAX_QUERY_LENGTH} characters", query[:64])
    selectors.check_monitor_field(fields, prometheus_backed=query is not None)
    if fields.get("prometheus_url") is not None:
        checked_url("prometheus_url", fields["prometheus_url"], allow_private=allow_private)
    if fields.get("alertmanager_url") is not None:
        checked_url("alertmanager_url", fields["alertmanager_url"], allow_private=allow_private)


def set_on_create(values: dict[str, Any], fields: dict[str, Any], now: datetime) -> None:
    """Adds a new monitor's source and Alertmanager columns to ``values``, the columns it is inserted with."""
    values["alertmanager_url"] = fields.get("alertmanager_url")
    values["prometheus_url"] = fields.get("prometheus_url")
    values["prometheus_query"] = fields.get("prometheus_query")
    if values["prometheus_query"] is not None:
        values["source_status"] = PENDING
        values["source_message"] = "Not read yet: the first read backfills the history."
        values["source_due_at"] = now


def apply_changes(monitor: Row[Any], changes: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The source and Alertmanager columns ``changes`` gives the monitor, as values to update it with."""
    values: dict[str, Any] = {}
    if "alertmanager_url" in changes:
        values["alertmanager_url"] = changes["alertmanager_url"]
    changed = False
    for name in ("prometheus_url", "prometheus_query"):
        if name in changes and changes[name] != getattr(monitor, name):
            values[name] = changes[name]
            changed = True
    if changed:
        # Read again at once, from where the last read stopped: a query fixed after an error catches up.
        values["source_status"] = PENDING
        values["source_message"] = "Changed: not read since."
        values["source_due_at"] = now
    return values


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def view(monitor: Row[Any]) -> dict[str, Any]:
    if monitor.prometheus_query is None:
        source: dict[str, Any] = {"kind": "push"}
    else:
        source = {
            "kind": "prometheus",
            "prometheus_url": monitor.prometheus_url,
            "query": monitor.prometheus_query,
            "step_seconds": STEP_SECONDS.get(monitor.data_frequency),
            "status": monitor.source_status,
            "message": monitor.source_message,
            "checked_at": _iso(monitor.source_checked_at),
            "read_until": None if monitor.source_read_until is None else _iso(
                datetime.fromtimestamp(monitor.source_read_until, UTC)),
        }
    return {"source": source, "alertmanager_url": monitor.alertmanager_url}


def pushed_to_reader(monitor_id: str) -> MalformedInput:
    issue = "This monitor reads its points from Prometheus; it takes no pushed points"
    return MalformedInput(f"Invalid request: {issue}.", details=problem("monitor_id", issue, monitor_id[:64]))
