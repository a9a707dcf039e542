"""What forecast work returns to the web process (plain lists, picklable)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ForecastResult:
    median: list[float]
    lower: list[float]
    upper: list[float]
    fallback: str | None = None
