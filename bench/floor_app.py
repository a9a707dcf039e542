"""The floor under every web-process figure: a bare Flask app with one JSON route, no auth, no limits, no
logging, served by the project's own gunicorn.conf.py (same worker class, threads and keep-alive).

bench/web_cpu.py measures GET /verify here beside the service's own, in the same batches, so the table shows
how much of a request's CPU is Flask and gunicorn themselves and how much is the service's work.
"""

from __future__ import annotations

from flask import Flask, Response, jsonify

app = Flask(__name__)


@app.get("/readyz")
def readyz() -> Response:
    return jsonify({"status": "ready"})


@app.get("/verify")
def verify() -> Response:
    # The same size of answer as the service's /verify (a key's id, permissions and limits).
    return jsonify({"valid": True, "key_id": "key_0123456789abcdef", "permissions": ["read", "write"],
                    "rate_limit": {"per_minute": 60, "per_hour": 1000, "per_day": 10000}})
