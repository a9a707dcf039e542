"""What monitors answer with, as payloads: the JSON of a monitor, its series, points and alerts (views.py), what
those payloads read (reads.py), the Prometheus exposition of the latest verdicts (exposition.py: GET
/monitors/metrics), and a monitor's forecast (forecasting.py)."""
