"""Prometheus-backed monitors: the reader that claims due monitors and judges what their queries return
(reader.py), Prometheus' query_range API as it uses it (promql.py), and the poller that runs its rounds on the
job engine with the monitors' other periodic tasks (poller.py)."""
