"""Timestamps of an anomaly request: the forms /forecast accepts, but gaps and jitter are allowed.

The accepted text forms are those of app.series.timestamps (same regular expressions, so the two
endpoints never disagree about what a timestamp is). Here the series only has to be strictly increasing
and written in one form throughout; the spacing may vary, because real streams miss intervals and
arrive off the grid. Timestamps without an offset are taken as UTC. As there, a timestamp whose offset
carries it outside 0001-01-01T00:00:00Z..9999-12-31T23:59:59.999999Z is refused, and a format error names the
accepted form.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from app.series.timestamps import FORM_RES, TIMESTAMP_RE, UTC_RANGE_ISSUE, TimestampError, format_error

if TYPE_CHECKING:  # numpy loads on the first series, so the admin CLI never pays for it
    import numpy as np

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The instants a datetime can hold, as offsets from the epoch; one outside cannot be written back as a date.
# Compared exactly (timedelta, whole microseconds): near 2.5e11 s a float cannot tell 23:59:59.999999 from the
# next second.
_FIRST_INSTANT = datetime.min.replace(tzinfo=UTC) - _EPOCH
_LAST_INSTANT = datetime.max.replace(tzinfo=UTC) - _EPOCH
_FIRST_MICROSECONDS = _FIRST_INSTANT // timedelta(microseconds=1)
_LAST_MICROSECONDS = _LAST_INSTANT // timedelta(microseconds=1)
_FORM_NAMES = {"naive": "no UTC offset", "Z": "a 'Z' suffix", "offset": "a ±HH:MM offset"}


def _form(match_suffix: str | None) -> str:
    if match_suffix is None:
        return "naive"
    return "Z" if match_suffix == "Z" else "offset"


def epoch_seconds(timestamps: Sequence[object], *, increasing: bool = True) -> np.ndarray:
    """UTC seconds of every timestamp (float64); raises TimestampError naming the first defective index.
    With ``increasing=False`` a timestamp may repeat or step back (real exports do: a clock corrected, an
    hour of local time written twice); the caller judges rows in the order given."""
    import numpy as np

    fast = _epoch_seconds_fast(timestamps)
    if fast is not None:
        return fast
    return np.asarray(_epoch_seconds_walk(timestamps, increasing=increasing), dtype=np.float64)


def _epoch_seconds_fast(timestamps: Sequence[object]) -> np.ndarray | None:
    """numpy's ISO parser for a clean series (one form, one offset, increasing); None sends it to the walk."""
    import numpy as np

    first = timestamps[0]
    match = TIMESTAMP_RE.fullmatch(first) if isinstance(first, str) else None
    if match is None:
        return None
    form = _form(match.group(2))
    try:
        if not all(map(FORM_RES[form].fullmatch, timestamps)):  # TypeError on a non-string
            return None
        texts: Sequence[str] = timestamps  # type: ignore[assignment]
        shift = 0.0
        if form == "Z":
            texts = [text[:-1] for text in texts]
        elif form == "offset":
            if len({text[-6:] for text in texts}) != 1:
                return None
            offset = first[-6:]
            shift = (1 if offset[0] == "+" else -1) * (int(offset[1:3]) * 3600 + int(offset[4:6]) * 60)
            texts = [text[:-6] for text in texts]
        if min(texts) < "0001":  # year 0 parses in numpy, not in Python's datetime (nor ISO 8601 proper)
            return None
        instants = np.array(texts, dtype="datetime64[us]")
    except (TypeError, ValueError):
        return None
    since_epoch = instants - np.datetime64("1970-01-01T00:00:00", "us")
    seconds = since_epoch.astype(np.float64) / 1e6 - shift
    if len(seconds) > 1 and not (np.diff(seconds) > 0).all():
        return None
    # Increasing, so the ends decide whether every instant is one a datetime holds.
    shift_us = int(shift) * 1_000_000
    if (int(since_epoch[0].astype(np.int64)) - shift_us < _FIRST_MICROSECONDS
            or int(since_epoch[-1].astype(np.int64)) - shift_us > _LAST_MICROSECONDS):
        return None
    return seconds


def _epoch_seconds_walk(timestamps: Sequence[object], *, increasing: bool = True) -> list[float]:
    first = timestamps[0]
    match = TIMESTAMP_RE.fullmatch(first) if isinstance(first, str) else None
    if match is None:
        raise format_error(0, first)
    form = _form(match.group(2))
    pattern = FORM_RES[form]
    out: list[float] = []
    previous: datetime | None = None
    for index, text in enumerate(timestamps):
        if not isinstance(text, str) or pattern.fullmatch(text) is None:
            other = TIMESTAMP_RE.fullmatch(text) if isinstance(text, str) else None
            if other is None:
                raise format_error(index, text)
            raise TimestampError(
                f"mixed timestamp forms: the series starts with {_FORM_NAMES[form]}, "
                f"this timestamp has {_FORM_NAMES[_form(other.group(2))]}",
                index,
                text,
            )
        try:
            instant = datetime.fromisoformat(text)
        except ValueError:  # a day the month does not have (2026-02-30)
            raise format_error(index, text) from None
        if instant.tzinfo is None:
            instant = instant.replace(tzinfo=UTC)
        since_epoch = instant - _EPOCH  # aware arithmetic: exact, even for an instant past the range
        if not _FIRST_INSTANT <= since_epoch <= _LAST_INSTANT:
            raise TimestampError(UTC_RANGE_ISSUE, index, text)
        if increasing and previous is not None and not instant > previous:
            raise TimestampError("timestamps must be strictly increasing", index, text)
        previous = instant
        out.append(since_epoch.total_seconds())
    return out


def utc_text(text: str) -> str:
    """A well-formed timestamp (TIMESTAMP_RE) written as the same instant in UTC with "Z", its fraction kept:
    the one form an answer that mixes stored and computed instants writes them all in. A timestamp without an
    offset is UTC already, as everywhere in the API. Text that is not one is handed back as it is."""
    if len(text) >= 20 and text[10] == "T" and text[-1] == "Z":
        return text
    match = TIMESTAMP_RE.fullmatch(text)
    if match is None:
        return text
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is not None:
            moment = moment.astimezone(UTC)
    except (ValueError, OverflowError):
        return text
    digits = len(match.group(1) or "")
    wall = moment.replace(tzinfo=None)
    if digits:
        return wall.isoformat(timespec="microseconds")[: 20 + digits] + "Z"
    return wall.isoformat(timespec="seconds") + "Z"


def moment_text(moment: datetime, *, microseconds: bool = False) -> str:
    """An aware (or UTC naive) datetime as UTC with "Z", the year written with four digits as ISO 8601 and the
    API's own parser want it (strftime's %Y writes year 1 as "1")."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment.isoformat(timespec="microseconds" if microseconds else "seconds") + "Z"


def epoch_text(epoch: float) -> str:
    """Whole seconds since the Unix epoch as UTC with "Z" (see moment_text)."""
    return moment_text(_EPOCH + timedelta(seconds=epoch))
