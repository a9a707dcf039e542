"""The client package builds into a wheel that carries its type marker and imports on its own."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support import ROOT

pytestmark = pytest.mark.slow
CLIENT = ROOT / "clients" / "python"


def test_wheel_builds_installs_and_imports(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path / "dist"),
         str(CLIENT)],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("forecast_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert {"forecast_client/__init__.py", "forecast_client/py.typed", "forecast_client/_client.py"} <= names
    assert not any(name.startswith(("tests/", "examples/")) for name in names)
    assert "Requires-Dist: httpx" in metadata and 'extra == "pandas"' in metadata

    target = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import forecast_client as fc; "
        "assert fc.__file__.startswith(sys.argv[1]), fc.__file__; "
        "print(fc.__version__, fc.Client.__name__, fc.AsyncClient.__name__, 'pandas' in sys.modules)"
    )
    imported = subprocess.run([sys.executable, "-c", probe, str(target)], capture_output=True, text=True, timeout=60)
    assert imported.returncode == 0, imported.stderr
    # Importing the client does not pull pandas in: it is needed only for pandas input and to_pandas().
    assert imported.stdout.split() == ["0.1.0", "Client", "AsyncClient", "False"]
