"""Which alert events a run of judged points raises: one incident opens with its first anomaly and ends at the
first point after which the detector's incident is over (48 points in a row with nothing beyond their range, its
level adopted as the new normal, or a point of it marked normal); a gap in the points does not end it. Pure logic
over the verdicts; the store writes what it plans.

A webhook gets every anomalous point and the incident's end (with its start, length and peak: its anomaly
furthest from what was expected); Alertmanager gets one firing alert when the incident opens and one resolved
when it ends."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app.monitors.alerts import alertmanager
from app.monitors.types import EventSource, IncidentPlan, SeriesState, Verdict


def plan_events(
    monitor: SeriesState,
    epochs: Sequence[int],
    texts: Sequence[str],
    values: Sequence[float],
    verdicts: Sequence[Verdict],
    *,
    anomalies_since: Callable[[int], int],
    started_text: Callable[[int], str],
    stored_point: Callable[[int], dict[str, Any] | None],
    peak_since: Callable[[int], dict[str, Any] | None],
) -> IncidentPlan:
    """The events of these new points (in time order, after every stored one). ``anomalies_since(epoch)`` counts
    the stored anomalies of an incident that opened before them and ``peak_since(epoch)`` is its stored peak;
    ``started_text(epoch)`` is a point's timestamp as it was sent; ``stored_point(epoch)`` a stored point as an
    alert describes it."""
    plan = IncidentPlan(open_epoch=monitor.open_anomaly_epoch, seq=monitor.event_seq)
    if plan.open_epoch is None:
        for verdict in verdicts:
            if verdict.is_anomaly:
                break
        else:
            return plan  # nothing opens, nothing closes: most appends
    run_count: int | None = None  # anomalies in the open incident, looked up only when needed
    first: dict[str, Any] | None = None  # the open incident's first point, which its resolved alert describes
    peak: dict[str, Any] | None = None  # its anomaly furthest from expected among these points
    for epoch, text, value, verdict in zip(epochs, texts, values, verdicts, strict=True):
        if verdict.warmup:
            continue
        point = {"timestamp": text, "value": value, "expected": verdict.expected, "lower_bound": verdict.lower,
                 "upper_bound": verdict.upper, "anomaly_score": verdict.score, "direction": verdict.direction,
                 "reason": verdict.reason}
        if verdict.is_anomaly:
            if plan.open_epoch is None:
                plan.open_epoch, run_count, first = epoch, 0, point
            elif run_count is None:
                run_count = anomalies_since(plan.open_epoch)
            if run_count == 0 and monitor.alertmanager_url:
                plan.seq += 1
                plan.events.append((plan.seq, "firing", alertmanager.firing(monitor, epoch, point),
                                    alertmanager.DESTINATION))
            run_count += 1
            if peak is None or _deviation(point) > _deviation(peak):
                peak = point
            if monitor.webhook_url:
                plan.seq += 1
                plan.events.append((plan.seq, "anomaly", {"point": point}, "webhook"))
        elif plan.open_epoch is not None and not verdict.incident:
            if run_count is None:
                run_count = anomalies_since(plan.open_epoch)
            if monitor.webhook_url:
                plan.seq += 1
                # An incident that opened before these points has its peak so far among the stored ones.
                # The stored one first: max() keeps the earliest of equals, as the stored peak's order does.
                peaks = [p for p in (None if first else peak_since(plan.open_epoch), peak) if p is not None]
                run = {"started_at": started_text(plan.open_epoch), "ended_at": text, "anomalous_points": run_count,
                       "peak": max(peaks, key=_deviation) if peaks else None}
                plan.events.append((plan.seq, "anomaly_ended", {"run": run, "point": point}, "webhook"))
            if monitor.alertmanager_url:
                plan.seq += 1
                described = first or stored_point(plan.open_epoch) or point
                plan.events.append((plan.seq, "resolved",
                                    alertmanager.resolved(monitor, plan.open_epoch, epoch, described),
                                    alertmanager.DESTINATION))
            plan.open_epoch, run_count, first, peak = None, None, None, None
    return plan


def _deviation(point: dict[str, Any]) -> float:
    return abs(point["value"] - point["expected"])


def closed_by_feedback(monitor: EventSource, *, first: dict[str, Any], marked: dict[str, Any],
                       marked_epoch: int, anomalies: int) -> IncidentPlan:
    """The events of an incident a user closed by marking its last remaining anomaly normal (``marked``): it ends
    there, as a run that ends on a normal point does, with ``"closed_by": "feedback"`` in the webhook's run."""
    return closed(monitor, first=first, last=marked, last_epoch=marked_epoch, anomalies=anomalies, by="feedback")


def closed(monitor: EventSource, *, first: dict[str, Any], last: dict[str, Any], last_epoch: int, anomalies: int,
           by: str, peak: dict[str, Any] | None = None) -> IncidentPlan:
    """The events of an open incident closed by ``by`` ("feedback", "retired") at the point ``last``; ``peak`` is
    its anomaly furthest from expected (none once every anomaly was marked normal)."""
    plan = IncidentPlan(open_epoch=None, seq=monitor.event_seq)
    if monitor.webhook_url:
        plan.seq += 1
        run = {"started_at": first["timestamp"], "ended_at": last["timestamp"], "anomalous_points": anomalies,
               "peak": peak, "closed_by": by}
        plan.events.append((plan.seq, "anomaly_ended", {"run": run, "point": last}, "webhook"))
    if monitor.alertmanager_url:
        assert monitor.open_anomaly_epoch is not None
        plan.seq += 1
        start = monitor.open_anomaly_epoch
        alert = alertmanager.resolved(monitor, start, max(start, last_epoch), first)
        plan.events.append((plan.seq, "resolved", alert, alertmanager.DESTINATION))
    return plan
