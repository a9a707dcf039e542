"""What importing the app costs, beside a bare Flask + SQLAlchemy import and a reference commit, in one run.

    python bench/import_cost.py [--reference REV] [--runs 7]

CPU seconds (user + system) of a child process that runs `import wsgi` (create_app on SQLite, no Redis), for
this checkout and for the reference (checked out into a temporary git worktree), interleaved run by run so
both see the same machine load; medians quoted, with each as a multiple of `import flask, sqlalchemy`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def child_cpu(code: str, cwd: Path, database: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], cwd=cwd, check=True,
                   env={**os.environ, "DATABASE_URL": f"sqlite:///{database}", "PYTHONPATH": str(cwd)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", default="5eea8fa", help="the commit to measure beside this code")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--output", default=str(c.RESULTS / "import-cost.md"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        reference = Path(tmp) / "reference"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(reference), args.reference],
                       check=True)
        try:
            samples: dict[str, list[float]] = {"bare": [], "this code": [], f"reference {args.reference}": []}
            for _ in range(args.runs):
                samples["bare"].append(child_cpu("import flask, sqlalchemy", Path(tmp), Path(tmp) / "bare.sqlite3"))
                samples["this code"].append(child_cpu("import wsgi", ROOT, Path(tmp) / "this.sqlite3"))
                samples[f"reference {args.reference}"].append(
                    child_cpu("import wsgi", reference, Path(tmp) / "reference.sqlite3"))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(reference)], check=False)
    bare = statistics.median(samples["bare"])
    rows = [f"| {name} | {statistics.median(values) * 1000:.0f} ms | {statistics.median(values) / bare:.2f}x |"
            for name, values in samples.items()]
    text = "\n".join([
        "# Importing the app", "", c.machine_line(), "",
        f"CPU (user + system) of a process that imports, medians of {args.runs} interleaved runs (target: the app "
        "at most 2x the bare import).", "", "| import | CPU | x bare |", "|---|---|---|", *rows, "",
    ])
    Path(args.output).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
