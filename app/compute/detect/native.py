"""The streaming detector compiled to C by mypyc, and when the compiled modules may stand for the sources.

The detector judges a row in plain Python, row after row, so it is most of what POST /anomalies and a
monitor's point cost. mypyc compiles the same source files, unchanged, into extension modules that judge a
row without the interpreter's dispatch of every operation and give the same numbers bit for bit (tests/unit/
compute/detect/test_native.py compares them). ``make install`` builds them (app.compute.detect.native_build) into
BUILD_DIR, outside the sources, with a stamp of the sources they were built from.

The package puts BUILD_DIR first on its path only while every stamped source is unchanged, so an edited
detector never runs stale compiled code: it runs from its sources until the next build. Without a build (no
C compiler, a PaaS that skips the step) or with FORECAST_PURE_DETECTOR=1, the sources run: same verdicts,
slower. Nothing here imports the detector, so the package can consult it before loading anything.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
ROOT = PACKAGE_DIR.parents[2]
BUILD_DIR = ROOT / ".native"
# The modules a row goes through, and the state they keep (snapshot.py, which saves it, reads its field types
# from the source: compiled classes keep only their runtime classes).
COMPILED = ("budget", "values", "counts", "surprises", "predictors", "weekly", "habits", "frozen", "windows",
            "streaming", "state")
# What the compiled code was type-checked against as well: a change there may break what it assumed.
READ_BY_COMPILED = (ROOT / "app" / "series" / "frequencies.py",)
PURE_VARIABLE = "FORECAST_PURE_DETECTOR"
STAMP = "stamp.json"


def sources() -> list[Path]:
    return [*(PACKAGE_DIR / f"{name}.py" for name in COMPILED), *READ_BY_COMPILED]


def fingerprint() -> dict[str, str]:
    """Each source's SHA-256, and the extension suffix (this interpreter's ABI) the build is for."""
    prints = {str(path.relative_to(ROOT)): hashlib.sha256(path.read_bytes()).hexdigest() for path in sources()}
    return {**prints, "extension": EXTENSION_SUFFIXES[0]}


def pure_requested() -> bool:
    return os.environ.get(PURE_VARIABLE, "") not in ("", "0")


def compiled_dir(build_dir: Path = BUILD_DIR) -> Path | None:
    """Where the compiled modules are, if they were built from the sources as they are now and plain Python is not
    requested (else None)."""
    return None if pure_requested() else current_build(build_dir)


def current_build(build_dir: Path = BUILD_DIR) -> Path | None:
    """Where the compiled modules are, if they were built from the sources as they are now (else None)."""
    try:
        stamp = json.loads((build_dir / STAMP).read_text())
        current = fingerprint()
    except (OSError, ValueError):
        return None
    modules = build_dir / "lib" / "app" / "compute" / "detect"
    if stamp != current or not all((modules / f"{name}{current['extension']}").is_file() for name in COMPILED):
        return None
    return modules


def active() -> bool:
    """Whether this process runs the compiled detector."""
    from app.compute.detect import streaming

    return Path(streaming.__file__).suffix != ".py"
