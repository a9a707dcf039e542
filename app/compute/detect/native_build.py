"""Builds the compiled detector (app.compute.detect.native says what it is): ``python -m
app.compute.detect.native_build``, which ``make install`` runs (it does nothing while the build is of the sources as
they are). Needs mypy (mypyc) and a C compiler; if either is missing it says so and the detector runs from its
sources."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

from app.compute.detect.native import (
    BUILD_DIR,
    COMPILED,
    PACKAGE_DIR,
    READ_BY_COMPILED,
    ROOT,
    STAMP,
    current_build,
    fingerprint,
)


def build(build_dir: Path = BUILD_DIR) -> None:
    """Compiles COMPILED into ``build_dir``; the new modules replace the old ones whole, and the stamp comes last,
    so a process starting meanwhile finds either a complete build or none."""
    from mypyc.build import mypycify  # the build's own dependency: a server that never builds needs no import
    from setuptools import setup

    build_dir.mkdir(exist_ok=True)
    before = fingerprint()
    # mypyc names each module by its path from the current directory, and setuptools reads pyproject.toml there
    # (finding its table "beta": a warning that is not the user's concern).
    with tempfile.TemporaryDirectory(dir=build_dir) as scratch, contextlib.chdir(ROOT), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        work = Path(scratch)
        paths = [str((PACKAGE_DIR / f"{name}.py").relative_to(ROOT)) for name in COMPILED]
        # The modules the compiled code reads are type-checked with it, not compiled; every other import is
        # skipped (an unknown type, looked up at run time), which keeps the build to seconds.
        extensions = mypycify(["--follow-imports=skip", "--ignore-missing-imports", *paths,
                               *(str(path.relative_to(ROOT)) for path in READ_BY_COMPILED)],
                              only_compile_paths=paths, group_name="app.compute.detect.compiled",
                              target_dir=str(work / "c"))
        setup(name="forecast-detector-native", ext_modules=extensions, script_args=[
            "--quiet", "build_ext", "--build-lib", str(work / "lib"), "--build-temp", str(work / "tmp")])
        if fingerprint() != before:
            raise RuntimeError("the detector's sources changed during the build; build again")
        (build_dir / STAMP).unlink(missing_ok=True)
        shutil.rmtree(build_dir / "lib", ignore_errors=True)
        (work / "lib").rename(build_dir / "lib")
    (build_dir / STAMP).write_text(json.dumps(before, indent=1, sort_keys=True))


def main() -> int:
    if current_build() is not None:
        print(f"compiled detector in {BUILD_DIR} is up to date")
        return 0
    try:
        build()
    except Exception as exc:  # noqa: BLE001 - any failure leaves the plain-Python detector, which is correct
        print(f"the compiled detector was not built ({type(exc).__name__}: {exc}); the detector runs as plain "
              "Python (same verdicts, slower)", file=sys.stderr)
        return 1
    print(f"compiled detector built in {BUILD_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
