"""Judging: a series' verdicts (judge.py), from the detector state this process keeps with the per-series locks
(cache.py) or the one saved in the database (snapshots.py)."""
