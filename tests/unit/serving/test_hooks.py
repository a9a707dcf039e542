"""app.serving.hooks: a worker settles its collector and GIL switch once ready; a previous run's metric files
are wiped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.serving import process
from app.serving.hooks import wipe_multiprocess_dir
from tests.support import ROOT


def test_a_worker_settles_its_collector_and_shares_the_gil_once_ready() -> None:
    # In a process of its own: the hook changes process-wide settings this test process must keep.
    script = ("import gc, json, sys, types\n"
              "from app.serving.hooks import post_worker_init\n"
              "before = gc.get_threshold()\n"
              "post_worker_init(types.SimpleNamespace())\n"
              "print(json.dumps([before, gc.get_threshold(), gc.get_freeze_count(), sys.getswitchinterval()]))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            cwd=ROOT, check=True)
    before, after, frozen, switch = json.loads(result.stdout.strip().splitlines()[-1])
    assert after == [process.YOUNG_COLLECTION_CONTAINERS, before[1], before[2]]
    assert frozen > 1000  # the modules and what they built are out of the collector's reach
    assert switch == pytest.approx(process.GIL_SWITCH_SECONDS)


def test_a_previous_runs_metric_files_are_wiped(tmp_path: Path) -> None:
    (tmp_path / "counter_123.db").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("kept")
    wipe_multiprocess_dir(str(tmp_path))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt"]
    wipe_multiprocess_dir(None)
    wipe_multiprocess_dir(str(tmp_path / "absent"))
