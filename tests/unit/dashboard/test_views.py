"""The dashboard writes counts as words do: "1 window", "4 windows", never "4 window(s)"."""

from __future__ import annotations

from app.dashboard.views import counted


def test_a_count_is_singular_or_plural() -> None:
    assert counted(1, "window") == "1 window"
    assert counted(4, "window") == "4 windows"
    assert counted(0, "key") == "0 keys"
    assert counted(1200, "point") == "1,200 points"
    assert counted(3, "series", "series") == "3 series"
