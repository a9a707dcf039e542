"""Model-1's per-season rules, each removed in turn, on every series of the development sets it touches.

    python bench/rule_ablations.py [variant ...]

In process, 2 processes, 95% intervals; writes bench/results/rule-ablations.md. A rule earns its place when
removing it costs the sets it was not fitted on too; one whose removal costs no set more than 0.5% (sMAPE or
MASE) goes.
"""
import os
import sys
import time
from dataclasses import replace
from multiprocessing import Pool

os.environ["OPENBLAS_NUM_THREADS"] = "1"
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import datasets
import numpy as np
from datasets import SETS

from app.compute.forecast.model_1_combination import ValidatedCombination
from app.compute.forecast.seasons import MODEL_1_SEASONS, Season
from app.series.frequencies import seasonal_periods


def table(**rows):
    t = dict(MODEL_1_SEASONS)
    for season, changes in rows.items():
        t[Season[season]] = replace(t[Season[season]], **changes)
    return t

QUARTERLY = ["m1-quarterly", "tourism-quarterly"]
MONTHLY = ["m1-monthly", "tourism-monthly"]
LONG = ["m4-hourly", "m4-weekly"]

VARIANTS = {
    "shipped": ({}, QUARTERLY + MONTHLY + LONG),
    "no model-3 share (quarterly)": ({"QUARTERLY": {"mstl_share": 0.0}}, QUARTERLY),
    "no Theta pair (quarterly)": ({"QUARTERLY": {"pair": "never", "pair_share": 0.0}}, QUARTERLY),
    "keep 6, not 3 (quarterly; removed)": ({"QUARTERLY": {"keep": 6}}, QUARTERLY),
    "no Theta pair (monthly)": ({"MONTHLY": {"pair": "never", "pair_share": 0.0}}, MONTHLY),
    "keep 3, not all (monthly)": ({"MONTHLY": {"keep": 3}}, MONTHLY),
    "no 3-cycle members (long seasons)": ({"LONG": {"three_cycle": False}}, LONG),
}
_MODEL = None
def init(name):
    global _MODEL
    _MODEL = ValidatedCombination(seasons=table(**VARIANTS[name][0]))
def task(args):
    ds, s = args
    per = seasonal_periods(ds.data_frequency, 1, len(s.history))
    fitted = _MODEL.fit(np.asarray(s.history, dtype=float), ds.horizon, per)
    med, lo, hi = fitted.predict(0.95)
    lo, hi = np.minimum(lo, med), np.maximum(hi, med)
    return {0.95: (med, lo, hi)}
if __name__ == "__main__":
    import common as c

    names = sys.argv[1:] or list(VARIANTS)
    rows = []
    for name in names:
        sets = VARIANTS[name][1]
        for set_name in sets:
            ds = SETS[set_name]
            series = datasets.load(set_name)
            t = time.time()
            with Pool(2, initializer=init, initargs=(name,)) as pool:
                fc = pool.map(task, [(ds, s) for s in series], chunksize=4)
            sc = datasets.score(ds, series, fc)
            rows.append([name, set_name, len(series), f"{sc.smape:.3f}", f"{sc.mase:.3f}", f"{sc.coverage[0.95]:.3f}"])
            print(" | ".join(map(str, rows[-1])), f"{time.time() - t:.0f}s", flush=True)
    c.write_table("rule-ablations", "Model-1 rule ablations", [
        "every series of each set a rule touches (test split), model-1 built with the rule changed, in process",
        "shipped: the rules as they are; each other row changes one rule of seasons.MODEL_1_SEASONS"],
        ["variant", "set", "series", "sMAPE", "MASE", "cov 0.95"], rows)
