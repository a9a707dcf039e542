"""What a detector reads of the work it is given: the fields of DetectionWork and ChangePointWork
(app.compute.detect.work), as protocols.

They sit below both sides: work.py's ``run()`` calls the detectors, and the detectors type their argument with
these, so neither module imports the other's types and no import circle closes, not even a type-only one.
"""

from __future__ import annotations

from typing import Any, Protocol


class DetectionInput(Protocol):
    """DetectionWork as the detectors read it (work.py says what each field means)."""

    @property
    def epoch_seconds(self) -> Any: ...
    @property
    def values(self) -> Any: ...
    @property
    def data_frequency(self) -> str: ...
    @property
    def confidence(self) -> float | None: ...
    @property
    def detector(self) -> str | None: ...
    @property
    def start(self) -> int: ...
    @property
    def period(self) -> int | None: ...
    @property
    def false_alarms_per_week(self) -> float | None: ...


class ChangePointInput(Protocol):
    """ChangePointWork as detect_change_points reads it."""

    @property
    def values(self) -> Any: ...
    @property
    def stable_trend_window(self) -> int: ...
    @property
    def threshold(self) -> float: ...
    @property
    def period(self) -> int | None: ...
