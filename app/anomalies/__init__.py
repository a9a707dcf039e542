"""POST /anomalies and POST /anomalies/last: causal anomaly detection on one series."""
