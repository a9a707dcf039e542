"""bench/alarm_frontier.py patches the detector's module constants per step: every step after any other runs with
exactly its own constants, and the shipped step with the constants the sources set."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import ROOT

PROBE = """
import json, sys
sys.path.insert(0, 'bench')
import alarm_frontier as f
from app.compute.detect import native, state, streaming, surprises, windows
def constants():
    return [surprises.PRIOR_ROWS, state.RECORD_CAP, streaming.RECORD_CAP, windows.RECORD_CAP]
seen = {'sources': constants(), 'compiled': native.active()}
for step in ['PRIOR_ROWS=10^12 (record ignored)', 'RECORD_CAP=1.0', 'false_alarms_per_week=3', 'shipped']:
    detector = f.detector_for(step, 'Minutes')
    seen[step] = constants() + [detector.false_alarms_per_week]
print(json.dumps(seen))
"""


def test_each_step_runs_with_its_own_constants_and_shipped_restores_the_sources() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["compiled"] is False  # the compiled build would ignore the patches
    prior, cap = seen["sources"][0], seen["sources"][1]
    assert seen["sources"] == [prior, cap, cap, cap]
    assert seen["PRIOR_ROWS=10^12 (record ignored)"] == [1e12, cap, cap, cap, 1.0]
    assert seen["RECORD_CAP=1.0"] == [prior, 1.0, 1.0, 1.0, 1.0]
    assert seen["false_alarms_per_week=3"] == [prior, cap, cap, cap, 3.0]
    assert seen["shipped"] == [prior, cap, cap, cap, 1.0]
