"""Prometheus remote write 1.0 in (POST /api/v1/write): the body decoded, each series routed to the monitors whose
``remote_write_selector`` matches its labels (as that monitor's series of those labels), and every series' samples
stored and judged through app.monitors.intake.ingest in a few transactions for the whole body.

A malformed body (not snappy, not a WriteRequest) is a 400 and nothing is stored: Prometheus does not retry a 4xx.
Within a well-formed body, what cannot become a point is counted by outcome and dropped, and the rest is stored:
one odd series must not make Prometheus drop or endlessly retry a whole batch of good ones. A monitor that could not
be written for a reason that may pass (the database busy, the worker pool full) makes the answer a 5xx, which
Prometheus retries; the monitors that were written answer the retry's samples as duplicates, so nothing is lost and
nothing is judged twice.
"""

from __future__ import annotations

import logging
import math
import struct
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from app.compute.pool import PoolError, WorkerPool
from app.db import Database
from app.errors import InputTooLarge, InvalidInput, MalformedInput, NotFound, ServiceError
from app.monitors import label_sets
from app.monitors.intake import ingest, selectors, transactions
from app.monitors.intake.points import IncomingPoints
from app.monitors.intake.route_cache import ROUTE_OVERHEAD, RouteCache
from app.monitors.records import monitors_table
from app.monitors.state.runtime import MonitorRuntime
from app.monitors.store import epoch_text
from app.web.fields import MAX_ABS_VALUE
from app.web.metrics import REMOTE_WRITE_SAMPLES
from app.web.validation import problem

if TYPE_CHECKING:
    from app.monitors.intake.prompb.remote_pb2 import WriteRequest

log = logging.getLogger("app.monitors.remote_write")

# The decoded protobuf may be larger than the snappy body by this factor at most (snappy's own worst case is
# about 21); beyond it the body is refused before it is decompressed.
MAX_EXPANSION = 32
# And never more than this in all: what one request may hold in memory decoded.
MAX_DECODED_BYTES = 64 << 20
# Prometheus' stale marker: a NaN with this exact bit pattern, sent when a series disappears from its target.
STALE_NAN_BITS = 0x7FF0000000000002
# Whole seconds identify a point; the range of dates the API can write back (0001-01-01 .. 9999-12-31).
MIN_EPOCH = -62_135_596_800
MAX_EPOCH = 253_402_300_799

OUTCOMES = (
    "stored",  # stored and judged
    "duplicate",  # already stored with the same value (a retried batch): answered as stored
    "unmatched",  # no monitor's selector matches the series
    "stale_marker",  # Prometheus' end-of-series marker
    "nan",  # another NaN: Prometheus' "no value"
    "not_finite",  # +Inf or -Inf
    "out_of_range",  # magnitude above 1e300, as for pushed points
    "bad_timestamp",  # outside the years 1-9999
    "same_second",  # a later sample in the same whole second as the previous one of its series
    "out_of_order",  # older than the monitor's newest stored point and not stored
    "conflict",  # its second is stored with another value
    "too_far_ahead",  # dated further ahead of the server's clock than its monitor allows (it would freeze the series)
    "unjudged",  # the detector failed on its series' points: not stored, and that series' state is rebuilt
    "series_limit",  # a new series of a monitor that follows MAX_SERIES_PER_MONITOR series already
    "invalid_series",  # no __name__, a duplicated or malformed label name
    "labels_too_large",  # beyond MAX_LABELS, MAX_LABEL_NAME_CHARS or MAX_LABEL_VALUE_CHARS
    "histogram",  # native histogram samples: a monitor judges plain values
    "failed",  # the monitor could not be written now; the 5xx answer makes Prometheus retry
)
# The labelled children, found once (labels() checks and locks on every call).
_COUNTERS = {outcome: REMOTE_WRITE_SAMPLES.labels(outcome) for outcome in OUTCOMES}


def decode(body: bytes) -> WriteRequest:
    """The WriteRequest in a snappy block-compressed body, or a 400 (413 when it would decode too large)."""
    # The decoders (protobuf, cramjam) load with the first write, not in every process that imports the app.
    import cramjam
    from google.protobuf.message import DecodeError

    from app.monitors.intake.prompb.remote_pb2 import WriteRequest

    if not body:
        raise _malformed("empty body: expected a snappy-compressed WriteRequest")
    try:
        decoded_length = cramjam.snappy.decompress_raw_len(body)
    except Exception:  # cramjam raises its own DecompressionError and ValueError for a bad length header
        raise _malformed("not snappy block format (the length header does not decode)") from None
    if decoded_length > min(max(len(body) * MAX_EXPANSION, 1 << 20), MAX_DECODED_BYTES):
        raise InputTooLarge(f"The body would decompress to {decoded_length:,} bytes, more than {MAX_EXPANSION} "
                              f"times its size or {MAX_DECODED_BYTES >> 20} MiB; the service refuses it undecoded.")
    try:
        raw = bytes(cramjam.snappy.decompress_raw(body))
    except Exception:
        raise _malformed("corrupt or truncated snappy data") from None
    request = WriteRequest()
    try:
        request.ParseFromString(raw)
    except (DecodeError, RuntimeError, ValueError):
        raise _malformed("the decompressed body is not a protobuf WriteRequest") from None
    return request


def check_size(request: WriteRequest, most: int) -> None:
    """A 413 for a request of more than ``most`` samples (MAX_POINTS, as for a bulk body), before any is routed or
    judged. A 4xx, which Prometheus does not retry: the same body would never fit. Prometheus sends at most its
    ``queue_config.max_samples_per_send`` samples a request, far fewer by default."""
    samples = 0
    for entry in request.timeseries:
        samples += len(entry.samples) + len(entry.histograms)
        if samples > most:
            total = sum(len(e.samples) + len(e.histograms) for e in request.timeseries)
            raise InputTooLarge(
                f"The request holds {total:,} samples, more than the {most:,} (MAX_POINTS) a request may; nothing of "
                "it was stored. Send fewer at once: lower queue_config.max_samples_per_send.",
                details=problem("body", f"At most {most} samples (MAX_POINTS)", total))


def _malformed(issue: str) -> MalformedInput:
    return MalformedInput(f"Malformed remote-write body: {issue}.", details=problem("body", issue, ""))


@dataclass
class Received:
    """What became of a request's samples, by outcome; ``retry`` when some monitor could not be written now."""

    counts: Counter[str] = field(default_factory=Counter)
    retry: bool = False


class _Targets:
    """An account's monitors that take remote-written series. Each selector is indexed under one label=value pair
    it requires (the last equality matcher: usually the most telling, after the metric name), so a series is
    checked only against the selectors indexed under its own pairs and those with no equality matcher, not
    against every monitor of the account."""

    def __init__(self, rows: list[tuple[str, str]]) -> None:
        self.by_pair: dict[tuple[str, str], list[tuple[str, selectors.Selector]]] = {}
        self.anywhere: list[tuple[str, selectors.Selector]] = []
        for monitor_id, text in rows:
            selector = _parsed(text)
            if selector is None:
                continue
            pair = selector.required_pair
            (self.by_pair.setdefault(pair, []) if pair is not None else self.anywhere).append((monitor_id, selector))

    def __bool__(self) -> bool:
        return bool(self.by_pair or self.anywhere)

    def matching(self, labels: dict[str, str]) -> list[str]:
        found = [m for m, s in self.anywhere if s.matches(labels)]
        for pair in labels.items():
            candidates = self.by_pair.get(pair)
            if candidates:
                found.extend(m for m, s in candidates if s.matches(labels))
        return found


# A label set as it came, and its route: its outcome when unusable, else its sorted labels and the monitors it feeds.
Raw = tuple[tuple[str, str], ...]
Route = tuple[str | None, label_sets.Labels, list[str]]
# The routes of the label sets some monitor takes, per account and under its selectors as they were: a fleet sends
# the same label sets every scrape, so each is checked and matched once per process while the account's selectors
# stay as they are. A label set no monitor takes, or an unusable one, is never kept (it is checked again whenever it
# comes): a sender of endless distinct label sets leaves nothing behind its request.
ROUTES = RouteCache()


def route(account_id: str, targets: _Targets, raw: Raw) -> Route:
    known = ROUTES.get(account_id, targets, raw)
    if known is None:
        labels = dict(raw)
        problem = _label_outcome(labels, len(raw))
        identity = tuple(sorted(labels.items()))
        known = (problem, identity, [] if problem or not targets else targets.matching(labels))
        if problem is None and known[2]:
            ROUTES.put(account_id, targets, raw, known, size=ROUTE_OVERHEAD * (1 + len(raw) + len(known[2])) + sum(
                sys.getsizeof(name) + sys.getsizeof(value) for name, value in raw))
    return known


_TARGETS: dict[str, tuple[tuple[tuple[str, str], ...], _Targets]] = {}


_PARSED: dict[str, selectors.Selector | None] = {}
_PARSED_LOCK = threading.Lock()
_PARSED_LIMIT = 10_000


def _parsed(text: str) -> selectors.Selector | None:
    selector = _PARSED.get(text)
    if selector is None and text not in _PARSED:
        try:
            selector = selectors.parse(text)
        except selectors.SelectorError:
            # Stored selectors were checked on the way in; one that no longer parses (a rule tightened since)
            # takes nothing rather than everything.
            log.warning("a stored remote_write_selector does not parse; its monitor receives nothing")
        with _PARSED_LOCK:
            if len(_PARSED) >= _PARSED_LIMIT:
                _PARSED.clear()
            _PARSED[text] = selector
    return selector


def targets_of(database: Database, account_id: str) -> _Targets:
    monitors = monitors_table.c
    statement = select(monitors.id, monitors.remote_write_selector).where(
        monitors.account_id == account_id, monitors.remote_write_selector.is_not(None),
        monitors.prometheus_query.is_(None))
    with database.engine.connect() as connection:
        rows = tuple((row[0], row[1]) for row in connection.execute(statement))
    kept = _TARGETS.get(account_id)
    if kept is not None and kept[0] == rows:
        return kept[1]
    targets = _Targets(list(rows))
    if len(_TARGETS) >= _PARSED_LIMIT:
        _TARGETS.clear()
    _TARGETS[account_id] = (rows, targets)
    return targets


def _label_outcome(labels: dict[str, str], sent: int) -> str | None:
    """The outcome of a series' samples when its labels are unusable (``sent`` labels came), else None."""
    problem = label_sets.label_problem(labels)
    if problem == "too_large":
        return "labels_too_large"
    if problem is not None or len(labels) != sent or not labels.get("__name__"):
        return "invalid_series"
    return None


def _points(samples: Any, counts: Counter[str], texts: dict[int, str]) -> IncomingPoints:
    """One series' samples as points: time order, whole seconds, finite values; the rest counted. ``texts`` keeps
    each second's timestamp text for the request (a fleet's samples share their seconds)."""
    epochs: list[int] = []
    values: list[float] = []
    for sample in sorted(samples, key=lambda s: s.timestamp) if len(samples) > 1 else samples:
        value = sample.value
        if value != value:
            bits = struct.unpack("<Q", struct.pack("<d", value))[0]
            counts["stale_marker" if bits == STALE_NAN_BITS else "nan"] += 1
            continue
        if math.isinf(value):
            counts["not_finite"] += 1
            continue
        if abs(value) > MAX_ABS_VALUE:
            counts["out_of_range"] += 1
            continue
        epoch = sample.timestamp // 1000
        if not MIN_EPOCH <= epoch <= MAX_EPOCH:
            counts["bad_timestamp"] += 1
            continue
        if epochs and epoch <= epochs[-1]:
            counts["same_second"] += 1
            continue
        epochs.append(epoch)
        values.append(value)
    return IncomingPoints(epochs=epochs, values=values,
                          texts=[texts.get(e) or texts.setdefault(e, epoch_text(e)) for e in epochs])


def receive(*, database: Database, pool: WorkerPool, runtime: MonitorRuntime, account_id: str,
            request: WriteRequest, max_points: int) -> Received:
    """Routes and stores a decoded request's samples; counts every sample's outcome (also in the metric)."""
    received = Received()
    counts = received.counts
    targets = targets_of(database, account_id)
    # The samples of each (monitor, label set): Prometheus sends one TimeSeries entry per sample or few (the labels
    # repeated), so entries with equal labels are one series.
    routed: dict[tuple[str, label_sets.Labels], list[Any]] = {}
    for entry in request.timeseries:
        samples = len(entry.samples)
        if entry.histograms:
            counts["histogram"] += len(entry.histograms)
        if not samples:
            continue
        if len(entry.labels) > label_sets.MAX_LABELS:
            counts["labels_too_large"] += samples
            continue
        problem, identity, matched = route(account_id, targets,
                                           tuple((label.name, label.value) for label in entry.labels))
        if problem is not None:
            counts[problem] += samples
            continue
        if not matched:
            counts["unmatched"] += samples
            continue
        for monitor_id in matched:
            routed.setdefault((monitor_id, identity), []).extend(entry.samples)
    batch = []
    texts: dict[int, str] = {}
    for (monitor_id, identity), samples in routed.items():
        points = _points(samples, counts, texts)
        if points.epochs:
            batch.append(ingest.SeriesPoints(monitor_id, identity, points))
    if batch:
        _store(database=database, pool=pool, runtime=runtime, account_id=account_id, batch=batch,
               received=received, most_points=max_points)
    for outcome, count in counts.items():
        _COUNTERS[outcome].inc(count)
    return received


def _store(*, database: Database, pool: WorkerPool, runtime: MonitorRuntime, account_id: str,
           batch: list[ingest.SeriesPoints], received: Received, most_points: int) -> None:
    counts = received.counts
    try:
        outcomes = transactions.append_chunked(database=database, pool=pool, runtime=runtime,
                                               account_id=account_id, batch=batch, lenient=True,
                                               most_points=most_points)
    except (SQLAlchemyError, PoolError, ServiceError) as exc:
        if isinstance(exc, ServiceError) and exc.caller_at_fault:
            raise
        log.warning("remote write: samples not written now (%s); asking the sender to retry", type(exc).__name__)
        counts["failed"] += sum(len(entry.points.epochs) for entry in batch)
        received.retry = True
        return
    for entry, outcome in zip(batch, outcomes, strict=True):
        sent = len(entry.points.epochs)
        if isinstance(outcome, NotFound):  # deleted since the selectors were read
            counts["unmatched"] += sent
        elif isinstance(outcome, ingest.PointsNotJudged):  # retried, they would fail again
            counts["unjudged"] += sent
        elif isinstance(outcome, InvalidInput):  # a new series beyond the monitor's cap
            counts["series_limit"] += sent
        elif isinstance(outcome, ServiceError):
            if not outcome.caller_at_fault:
                counts["failed"] += sent
                received.retry = True
            else:  # e.g. became Prometheus-backed: it takes no pushed points
                counts["unmatched"] += sent
        else:
            counts["stored"] += len(outcome.verdicts)
            counts["duplicate"] += len(outcome.old_records)
            for name, count in outcome.dropped.items():
                counts[name] += count
