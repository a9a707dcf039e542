"""What starting the app costs, beside a bare Flask + SQLAlchemy import and a reference commit, in one run.

    python bench/import_cost.py [--reference REV] [--runs 7]

CPU seconds (user + system) of a child process that runs `import wsgi` (create_app on SQLite, no Redis) and of
`flask --app wsgi keys list` (an admin command: the import plus one query), for this code and for the reference
(checked out into a temporary git worktree, run with the same virtualenv), interleaved run by run so all see the
same machine load; medians quoted, each as a multiple of `import flask, sqlalchemy`. `make bench` runs it as the
"import" suite, beside the previous layout.

Every tree is byte-compiled first (into a copy of this code): Flask and SQLAlchemy load from the bytecode pip wrote
when it installed them, and a deployed service loads its own from __pycache__ after its first start. A machine that
sets PYTHONDONTWRITEBYTECODE would otherwise make every run compile the service's sources (about a fifth of its
start-up) while the bare import compiles nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402

# The commit before the layout of app/ was redesigned (issue 42): the start-up it is compared with.
PREVIOUS_LAYOUT = "5eea8fa"
BARE = "import flask, sqlalchemy"


def child_cpu(args: list[str], cwd: Path, database_url: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**c.base_env(cwd), "DATABASE_URL": database_url}
    subprocess.run(args, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compiled_copy(root: Path, dest: Path) -> Path:
    """The service files of ``root`` copied to ``dest``, byte-compiled (the working tree stays untouched)."""
    c.copy_service(root, dest)
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([c.PYTHON, "-m", "compileall", "-q", "app", "migrations", "wsgi.py"], cwd=dest, env=env,
                   check=True, stdout=subprocess.DEVNULL, timeout=300)
    return dest


def measure(trees: dict[str, Path], tmp: Path, runs: int) -> dict[str, list[float]]:
    """CPU seconds of every run: the bare import, then each tree's import and keys list, interleaved."""
    python, flask = c.PYTHON, str(c.VENV_BIN / "flask")
    samples: dict[str, list[float]] = {BARE: []}
    with ExitStack() as stack:
        urls = {}
        for label, root in trees.items():
            folder = tmp / label.replace(" ", "-")
            folder.mkdir()
            urls[label] = stack.enter_context(c.database("sqlite", folder, app_root=root))
        for _ in range(runs):
            samples[BARE].append(child_cpu([python, "-c", BARE], tmp, f"sqlite:///{tmp / 'bare.sqlite3'}"))
            for label, root in trees.items():
                samples.setdefault(f"import wsgi, {label}", []).append(
                    child_cpu([python, "-c", "import wsgi"], root, urls[label]))
                samples.setdefault(f"flask keys list, {label}", []).append(
                    child_cpu([flask, "--app", "wsgi", "keys", "list"], root, urls[label]))
    return samples


def report(samples: dict[str, list[float]], runs: int, code: str) -> str:
    bare = statistics.median(samples[BARE])
    rows = [f"| {name} | {statistics.median(values) * 1000:.0f} ms | {statistics.median(values) / bare:.2f}x |"
            for name, values in samples.items()]
    return "\n".join([
        "# Starting the app", "", c.machine_line(), code, "",
        f"CPU (user + system) of a process, medians of {runs} interleaved runs (target: importing the app at most "
        "2x the bare import). `flask keys list` is the import plus the admin command and one query.", "",
        "| process | CPU | x bare |", "|---|---|---|", *rows, "",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", default=PREVIOUS_LAYOUT, help="the commit to measure beside this code")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--output", default=str(c.RESULTS / "import-cost.md"))
    args = ap.parse_args(argv)
    code = c.describe_code()
    with c.temp_dir("bench-import-") as tmp, c.git_worktree(args.reference) as reference:
        trees = {"this code": compiled_copy(c.APP_ROOT, tmp / "this-code-tree"),
                 f"reference {args.reference}": compiled_copy(reference, tmp / "reference-tree")}
        samples = measure(trees, tmp, args.runs)
    text = report(samples, args.runs, code)
    Path(args.output).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
