"""Timestamps of an anomaly request: the forms /forecast accepts, but gaps and jitter are allowed.

The accepted text forms are those of app.forecast.timestamps (same regular expressions, so the two
endpoints never disagree about what a timestamp is). Here the series only has to be strictly increasing
and written in one form throughout; the spacing may vary, because real streams miss intervals and
arrive off the grid. Timestamps without an offset are taken as UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from app.forecast.timestamps import _FORM_RES, _TIMESTAMP_RE, TimestampError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FORM_NAMES = {"naive": "no UTC offset", "Z": "a 'Z' suffix", "offset": "a ±HH:MM offset"}


def _form(match_suffix: str | None) -> str:
    if match_suffix is None:
        return "naive"
    return "Z" if match_suffix == "Z" else "offset"


def epoch_seconds(timestamps: Sequence[object]) -> list[float]:
    """UTC seconds of every timestamp; raises TimestampError naming the first defective index."""
    first = timestamps[0]
    match = _TIMESTAMP_RE.fullmatch(first) if isinstance(first, str) else None
    if match is None:
        raise TimestampError("invalid timestamp format", 0, first)
    form = _form(match.group(2))
    pattern = _FORM_RES[form]
    out: list[float] = []
    previous: datetime | None = None
    for index, text in enumerate(timestamps):
        if not isinstance(text, str) or pattern.fullmatch(text) is None:
            other = _TIMESTAMP_RE.fullmatch(text) if isinstance(text, str) else None
            if other is None:
                raise TimestampError("invalid timestamp format", index, text)
            raise TimestampError(
                f"mixed timestamp forms: the series starts with {_FORM_NAMES[form]}, "
                f"this timestamp has {_FORM_NAMES[_form(other.group(2))]}",
                index,
                text,
            )
        try:
            instant = datetime.fromisoformat(text)
        except ValueError:  # a day the month does not have (2026-02-30)
            raise TimestampError("invalid timestamp format", index, text) from None
        if instant.tzinfo is None:
            instant = instant.replace(tzinfo=UTC)
        if previous is not None and not instant > previous:
            raise TimestampError("timestamps must be strictly increasing", index, text)
        previous = instant
        out.append((instant - _EPOCH).total_seconds())
    return out
