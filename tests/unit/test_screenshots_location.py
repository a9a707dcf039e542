"""`make test` leaves the checkout clean: the browser tests photograph the dashboard into a temporary folder,
and refreshing the documented screenshots is its own command, `make screenshots`."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_a_test_run_writes_screenshots_outside_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("selenium")
    from tests.e2e import test_dashboard_browser as browser

    monkeypatch.delenv("SCREENSHOTS_DIR", raising=False)
    assert not browser.screenshot_dir().resolve().is_relative_to(ROOT.resolve())
    monkeypatch.setenv("SCREENSHOTS_DIR", "docs/screenshots")
    assert browser.screenshot_dir() == ROOT / "docs" / "screenshots"


def test_make_screenshots_refreshes_the_documented_ones() -> None:
    makefile = (ROOT / "Makefile").read_text()
    target = makefile[makefile.index("\nscreenshots:"):].split("\n\n")[0]
    assert "SCREENSHOTS_DIR=$(CURDIR)/docs/screenshots" in target and "test_dashboard_browser.py" in target
    assert "make screenshots" in (ROOT / "docs" / "development.md").read_text()
