"""app.serving.checks: the start-up report's refusals and warnings."""

from __future__ import annotations

import pytest

from app.compute.detect import native
from app.serving import checks
from app.serving.checks import startup_report
from app.settings import Settings


@pytest.fixture
def plain_detector_meant(monkeypatch: pytest.MonkeyPatch) -> None:
    """The detector warning below is not what these tests are about."""
    monkeypatch.setenv(native.PURE_VARIABLE, "1")


def test_several_processes_without_redis_are_refused(plain_detector_meant: None) -> None:
    settings = Settings(redis_url=None, forecast_workers=2, forecast_queue_limit=8)
    report = startup_report(settings, processes=2, threads=32)
    assert len(report.refusals) == 1 and "without REDIS_URL" in report.refusals[0] and report.warnings == []
    assert startup_report(settings, processes=1, threads=32).refusals == []
    with_redis = Settings(redis_url="redis://127.0.0.1:6379/0", forecast_workers=2, forecast_queue_limit=8)
    assert startup_report(with_redis, processes=4, threads=32).refusals == []


def test_too_few_threads_for_the_forecast_slots_is_a_warning_from_the_apps_settings(plain_detector_meant: None) -> None:
    settings = Settings(forecast_workers=4, forecast_queue_limit=8)
    report = startup_report(settings, processes=1, threads=12)
    assert report.refusals == [] and len(report.warnings) == 1
    assert "up to 12 forecasts" in report.warnings[0] and "GUNICORN_THREADS" in report.warnings[0]
    assert startup_report(settings, processes=1, threads=13).warnings == []


def test_a_detector_without_its_compiled_build_is_a_warning_unless_plain_python_is_meant(
        monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(forecast_workers=2, forecast_queue_limit=8)
    monkeypatch.delenv(native.PURE_VARIABLE, raising=False)
    monkeypatch.setattr(checks, "current_build", lambda: None)
    (warning,) = startup_report(settings, processes=1, threads=32).warnings
    assert "Python sources" in warning and "native_build" in warning
    monkeypatch.setenv(native.PURE_VARIABLE, "1")
    assert startup_report(settings, processes=1, threads=32).warnings == []
