"""The web process and the admin CLI stay slim: the numeric stack loads only where it is used.

Estimators run in forecast worker processes and batch uploads are parsed in job workers, so the web process never
imports scipy, statsmodels or pandas; numpy and apispec load on a serving process's warm-up or first use, so
`flask --app wsgi keys ...` pays for neither.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

NEVER_IN_WEB = ("scipy", "statsmodels", "pmdarima", "sklearn", "pandas")
NOT_FOR_ADMIN_COMMANDS = ("numpy", "apispec")
# The job engine, and the clients and SQL dialects of backends the embedded default does not use: SQLite and no
# Redis load none.
UNCONFIGURED_BACKENDS = ("huey", "redis", "psycopg", "psycopg2", "sqlalchemy.dialects.postgresql")
# Prometheus remote write's decoders: loaded by the first write, not by every process that builds the app.
FIRST_WRITE_ONLY = ("google.protobuf", "cramjam")
# The stores are SQLAlchemy Core tables: the ORM would cost every process a fifth of its start-up.
NOT_USED = ("sqlalchemy.orm",)


def _loaded_after(code: str, tmp_path: Path) -> list[str]:
    names = NEVER_IN_WEB + NOT_FOR_ADMIN_COMMANDS + UNCONFIGURED_BACKENDS + FIRST_WRITE_ONLY + NOT_USED
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {names!r} if m in sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "DATABASE_URL": f"sqlite:///{tmp_path / 'keys.sqlite3'}"})
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_building_the_app_loads_no_numeric_library_no_unconfigured_backend_and_no_orm(tmp_path: Path) -> None:
    assert _loaded_after("import wsgi", tmp_path) == []


def test_the_job_engine_loads_with_its_first_use(tmp_path: Path) -> None:
    code = "import wsgi\nwsgi.app.extensions['forecast_service'].jobs"
    # Huey's storage module imports the Redis and PostgreSQL clients it could use, whichever is configured.
    assert "huey" in _loaded_after(code, tmp_path)


def test_a_warmed_up_web_process_loads_numpy_but_no_estimator_library(tmp_path: Path) -> None:
    code = (
        "import wsgi\n"
        "from app.series.regular import prepare_tables\n"
        "prepare_tables()\n"
        "from app import openapi_documenters\n"
        "from app.web.openapi import build_spec\n"
        "build_spec(openapi_documenters())"
    )
    assert _loaded_after(code, tmp_path) == ["apispec", "numpy"]
