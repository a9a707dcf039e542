"""The anomaly detectors and change-point finder, run in worker processes only."""
