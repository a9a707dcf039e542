"""The forecast models, run in worker processes only."""
