"""Batches: many series forecast (or judged for anomalies) in one job, run by the job engine's workers."""
