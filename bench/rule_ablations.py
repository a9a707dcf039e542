"""Models 1, 2 and 4's per-season rules, each removed in turn, on every series of the development sets it touches.

    python bench/rule_ablations.py [--split test|valid] [--sets a,b] [--list] [variant ...]

In process, 2 processes, 95% intervals. Each run's rows (variant, set, split) replace that key's earlier rows
in bench/results/rule-ablations.json, and bench/results/rule-ablations.md is rewritten from it, so the file
holds the latest measurement of every row. A rule earns its place when removing it costs a set it was not
fitted on; one that helps only the set it was fitted on goes, unless without it a set loses more than 0.5%
(sMAPE or MASE) or its 95% coverage moves away from 0.93-0.97. The decisions, by hand, follow the figures in the
Markdown file and survive a rerun; the rules and why they stay: app/compute/forecast/seasons.py.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field, replace  # noqa: E402
from multiprocessing import Pool  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import datasets  # noqa: E402
from datasets import SETS, DataSet, Series  # noqa: E402

from app.compute.forecast import seasons as S  # noqa: E402
from app.compute.forecast.model_1_combination import ValidatedCombination  # noqa: E402
from app.compute.forecast.model_2_theta import ThetaCombination  # noqa: E402
from app.compute.forecast.model_4_spike_robust import SpikeRobustCombination  # noqa: E402
from app.compute.forecast.template import ForecastModel  # noqa: E402
from app.series.frequencies import seasonal_periods  # noqa: E402

MODELS = {"model-1": (ValidatedCombination, S.MODEL_1_SEASONS), "model-2": (ThetaCombination, S.MODEL_2_SEASONS),
          "model-4": (SpikeRobustCombination, S.MODEL_4_SEASONS)}
YEARLY = ("m1-yearly", "tourism-yearly")
QUARTERLY = ("m1-quarterly", "tourism-quarterly")
MONTHLY = ("m1-monthly", "tourism-monthly")
LONG = ("m4-hourly", "m4-weekly")
CACHE = Path(__file__).resolve().parent / "results" / "rule-ablations.json"
DECISIONS = "## Decisions"


@dataclass(frozen=True)
class Variant:
    model: str
    sets: tuple[str, ...]
    rows: dict[str, dict[str, object]] = field(default_factory=dict)  # Season name -> SeasonRules changes
    # "module:NAME" -> value, set in each worker before the model is built; only constants read at call time
    # (module.NAME inside a function) are moved by this, not ones bound as defaults at import
    constants: dict[str, object] = field(default_factory=dict)

    def build(self) -> ForecastModel:
        for key, value in self.constants.items():
            module, name = key.split(":")
            setattr(importlib.import_module(module), name, value)
        cls, table = MODELS[self.model]
        t = dict(table)
        for season, changes in self.rows.items():
            t[S.Season[season]] = replace(t[S.Season[season]], **changes)  # type: ignore[arg-type]
        return cls(seasons=t)  # type: ignore[call-arg]


# "Removal" returns a row to what the model's other classes do: model-2's keep 1, model-4's keep 2, no trend
# floor (0: the dataclass default, as monthly and hourly data have), no short path (short_pool=()).
VARIANTS: dict[str, Variant] = {
    "model-1 shipped": Variant("model-1", YEARLY + QUARTERLY + MONTHLY + LONG),
    "model-1 no model-3 share (quarterly)": Variant("model-1", QUARTERLY, {"QUARTERLY": {"mstl_share": 0.0}}),
    "model-1 no Theta pair (quarterly)": Variant("model-1", QUARTERLY,
                                                 {"QUARTERLY": {"pair": "never", "pair_share": 0.0}}),
    "model-1 keep 6, not 3 (quarterly; removed)": Variant("model-1", QUARTERLY, {"QUARTERLY": {"keep": 6}}),
    "model-1 no Theta pair (monthly)": Variant("model-1", MONTHLY, {"MONTHLY": {"pair": "never", "pair_share": 0.0}}),
    "model-1 keep 3, not all (monthly)": Variant("model-1", MONTHLY, {"MONTHLY": {"keep": 3}}),
    "model-1 no 3-cycle members (long seasons)": Variant("model-1", LONG, {"LONG": {"three_cycle": False}}),
    "model-1 no trend floor (quarterly)": Variant("model-1", QUARTERLY, {"QUARTERLY": {"trend_floor_up_to": 0}}),
    "model-1 trend floor at every length (quarterly; removed)": Variant("model-1", QUARTERLY, {
        "QUARTERLY": {"trend_floor_up_to": math.inf}}),
    "model-1 no trend floor (no season)": Variant("model-1", YEARLY, {"NONE": {"trend_floor_up_to": 0}}),
    "model-1 no short path (no season)": Variant("model-1", YEARLY, {"NONE": {"short_pool": ()}}),
    "model-1 no short path (quarterly)": Variant("model-1", QUARTERLY, {"QUARTERLY": {"short_pool": ()}}),
    "model-1 no short path (monthly)": Variant("model-1", MONTHLY, {"MONTHLY": {"short_pool": ()}}),
    "model-1 short path on long seasons (removed)": Variant("model-1", LONG, {"LONG": {
        "short_pool": S.SHORT_PERIODIC_POOL}}),
    "model-2 shipped": Variant("model-2", YEARLY + QUARTERLY + MONTHLY + LONG),
    "model-2 keep 1, not all (quarterly)": Variant("model-2", QUARTERLY, {"QUARTERLY": {"keep": 1}}),
    "model-2 keep 1, not all (monthly)": Variant("model-2", MONTHLY, {"MONTHLY": {"keep": 1}}),
    "model-2 no 3-cycle member (long seasons)": Variant("model-2", LONG, {"LONG": {"three_cycle": False}}),
    "model-2 no trend floor (quarterly)": Variant("model-2", QUARTERLY, {"QUARTERLY": {"trend_floor_up_to": 0}}),
    "model-2 trend floor at every length (quarterly; removed)": Variant("model-2", QUARTERLY, {
        "QUARTERLY": {"trend_floor_up_to": math.inf}}),
    "model-2 no trend floor (no season)": Variant("model-2", YEARLY, {"NONE": {"trend_floor_up_to": 0}}),
    "model-4 shipped": Variant("model-4", YEARLY + QUARTERLY + MONTHLY),
    "model-4 keep 2, not all (monthly)": Variant("model-4", MONTHLY, {"MONTHLY": {"keep": 2}}),
    "model-4 no trend floor (quarterly)": Variant("model-4", QUARTERLY, {"QUARTERLY": {"trend_floor_up_to": 0}}),
    "model-4 trend floor at every length (quarterly; removed)": Variant("model-4", QUARTERLY, {
        "QUARTERLY": {"trend_floor_up_to": math.inf}}),
    "model-4 no trend floor (no season)": Variant("model-4", YEARLY, {"NONE": {"trend_floor_up_to": 0}}),
}

_MODEL: ForecastModel | None = None


def init(name: str) -> None:
    global _MODEL
    _MODEL = VARIANTS[name].build()


def task(args: tuple[DataSet, Series]) -> dict[float, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    ds, s = args
    assert _MODEL is not None
    per = seasonal_periods(ds.data_frequency, 1, len(s.history))
    med, lo, hi = _MODEL.fit(np.asarray(s.history, dtype=float), ds.horizon, per).predict(0.95)
    return {0.95: (med, np.minimum(lo, med), np.maximum(hi, med))}


def run(name: str, set_name: str, split: str) -> list[object]:
    ds, series = SETS[set_name], datasets.load(set_name, split=split)
    t = time.time()
    with Pool(2, initializer=init, initargs=(name,)) as pool:
        fc = pool.map(task, [(ds, s) for s in series], chunksize=4)
    sc = datasets.score(ds, series, fc)
    row = [name, set_name, split, len(series), f"{sc.smape:.3f}", f"{sc.mase:.3f}", f"{sc.msis:.3f}",
           f"{sc.coverage[0.95]:.3f}"]
    print(" | ".join(map(str, row)), f"{time.time() - t:.0f}s", flush=True)
    return row


def write(rows: list[list[object]]) -> None:
    import common as c

    # the decision table below the figures is written by hand; a rerun keeps it
    md = c.RESULTS / "rule-ablations.md"
    decisions = md.read_text().partition(DECISIONS)[2] if md.exists() else ""
    order = {name: i for i, name in enumerate(VARIANTS)}
    rows.sort(key=lambda r: (order.get(str(r[0]), len(order)), str(r[2]), str(r[1])))
    CACHE.write_text(json.dumps(rows, indent=0) + "\n")
    c.write_table("rule-ablations", "Rule ablations, models 1, 2 and 4", [
        "every series of each set a rule touches, the model built with one rule of its season table "
        "(app/compute/forecast/seasons.py) changed, in process; 95% intervals",
        "split test: the holdouts; valid: the training rows with their last horizon held out",
        "shipped: the rules as they are; a removed rule returns its class to what the model's other classes do",
        "(removed): the variant puts back a rule that was taken out, so its rows are the rule kept"],
        ["variant", "set", "split", "series", "sMAPE", "MASE", "MSIS", "cov 0.95"], rows,
        extra=DECISIONS + decisions.rstrip("\n") if decisions else "")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="*")
    ap.add_argument("--split", default="test", choices=("test", "valid"))
    ap.add_argument("--sets", help="comma-separated subset of each variant's sets")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        print("\n".join(f"{k}: {', '.join(v.sets)}" for k, v in VARIANTS.items()))
        sys.exit(0)
    rows: list[list[object]] = json.loads(CACHE.read_text()) if CACHE.exists() else []
    for name in a.variants or list(VARIANTS):
        for set_name in VARIANTS[name].sets:
            if a.sets and set_name not in a.sets.split(","):
                continue
            new = run(name, set_name, a.split)
            rows = [r for r in rows if r[:3] != new[:3]] + [new]
            write(rows)
