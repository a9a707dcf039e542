"""Anomaly detectors. The web process imports only ``jobs``; the numeric code runs in the worker pool."""
