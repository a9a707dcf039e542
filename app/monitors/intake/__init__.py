"""Points in: the one append every point takes (ingest.py: judged, stored with their events, answered), and the
ways in for many monitors at once: bulk rows (bulk.py) and Prometheus remote write (remote_write.py, its
protobuf messages in prompb/, the selectors that route its series in selectors.py and the routes a process
keeps in route_cache.py), with their endpoints (routes.py)."""
