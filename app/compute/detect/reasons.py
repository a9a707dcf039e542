"""Why a row was flagged, in a sentence: the signal that decided it (app.compute.detect.state's codes) and its
numbers, on the stream's own scale. A row that is not flagged has no reason (None)."""

from __future__ import annotations

from app.compute.detect.state import DENSITY, FROZEN, LEVEL, POINT, SHIFT, SPREAD

SHORT_ROWS = 6  # the detector's short and long windows (app.compute.detect.streaming)
LONG_ROWS = 36


def number(value: float) -> str:
    """A number as a person reads it: four significant digits, no exponent for everyday magnitudes."""
    return f"{value:.4g}"


def reason(signal: int, size: float, value: float, lower: float, upper: float, *, short_rows: int = SHORT_ROWS,
           long_rows: int = LONG_ROWS) -> str | None:
    """The sentence for one flagged row (``signal`` 0: not flagged, None)."""
    if signal == POINT:
        side = "above" if size > 0 else "below"
        return f"The value {number(value)} is far {side} its expected range {number(lower)} to {number(upper)}."
    if signal == SHIFT:
        side = "above" if size > 0 else "below"
        return (f"The last {short_rows} points moved together: on average {number(abs(size))} {side} what was "
                "expected of them (a shift).")
    if signal == SPREAD:
        return (f"The last {short_rows} points strayed {number(size)} on average from what was expected, more than "
                "this stream usually does (noisier).")
    if signal == DENSITY:
        return (f"Over the last {long_rows} points the values strayed {number(size)} on average from what was "
                "expected, more often or further than this stream usually does.")
    if signal == LEVEL:
        side = "above" if size > 0 else "below"
        return (f"The last {long_rows} points sit on average {number(abs(size))} {side} the level expected of them "
                "(a level change).")
    if signal == FROZEN:
        return (f"The value {number(value)} has not changed for {round(size)} points, far longer than this stream "
                "has held still before (a stuck metric?).")
    return None
