"""Worker side: the process pool and what runs in its processes (forecast models, anomaly detectors).

The web process imports only `pool` and the `work` modules, which load nothing numeric at module level."""
