"""Azure AI Anomaly Detector (univariate v1.1) compatible routes, for clients written against that service."""
