"""What monitors answer with: the JSON of a monitor, its series, points and alerts (views.py), what those answers
read (reads.py), the Prometheus exposition of the latest verdicts (exposition.py: GET /monitors/metrics), and a
monitor's forecast (forecasting.py)."""
