from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.compute.pool import pin_blas_threads  # noqa: E402

pin_blas_threads()  # before any test module loads numpy

from tests.support import build_app, drop_all_tables, postgres_database, settings_for  # noqa: E402


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs `--dist loadgroup --no-loadscope-reorder`), the tests of a module
    that share a module- or class-scoped fixture (a gunicorn, an app, a database) run on one worker, so that
    fixture is built once; every other test goes to whichever worker is free. The workers take the end-to-end
    (`slow`) tests first, so that no long one starts last while the other workers sit idle."""
    for item in items:
        fixture_info = getattr(item, "_fixtureinfo", None)
        if fixture_info is None:
            continue
        scopes = {definitions[-1].scope for definitions in fixture_info.name2fixturedefs.values() if definitions}
        if scopes & {"module", "class", "package"}:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    if "PYTEST_XDIST_WORKER" in os.environ:  # every worker sorts alike, as xdist needs; one process keeps the order
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish() -> None:
    """Collects garbage once here and freezes what is left out of the collector. After a pytest-xdist worker
    reports its session finished, pytest collects garbage several more times (for exceptions raised in __del__),
    each over the whole heap of every module the tests loaded, while execnet gives the worker five seconds to end
    and then sends it SIGINT: that KeyboardInterrupt landed in hypothesis' gc callback and ended `make test` with
    a PytestUnraisableExceptionWarning. This collection still runs under pytest's unraisable hook, so whatever it
    finds is reported as before."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with postgres_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Runs a test once on SQLite and once on the real PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'keys.sqlite3'}"
        return
    url = request.getfixturevalue("postgres_url")
    yield url
    drop_all_tables(url)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def module_database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One database per test module, on SQLite and on the real PostgreSQL (a fresh database, dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'keys.sqlite3'}"
        return
    with postgres_database() as url:
        yield url


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    application = build_app(settings_for(f"sqlite:///{tmp_path / 'keys.sqlite3'}"))
    yield application
    application.extensions["forecast_service"].close()


@pytest.fixture(scope="module")
def module_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    """One SQLite-backed app shared by a module's tests; a module aliases it as `app` where no test needs a
    fresh database. Tests that share it make their own keys, so counters and usage never cross between them."""
    application = build_app(settings_for(f"sqlite:///{tmp_path_factory.mktemp('app') / 'keys.sqlite3'}"))
    yield application
    application.extensions["forecast_service"].close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()
