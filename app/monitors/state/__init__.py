"""What a process keeps for monitors: its runtime (runtime.py: the caches, the per-series locks, the alert sender,
the judge slots), the detector state it holds per series with those locks (cache.py), and that state as saved in
the database for another process or a restart (snapshots.py)."""
