"""Gunicorn reads this file from the working directory, so `gunicorn wsgi:app` gets the documented defaults.
Settings and hooks only; what they need is app/serving's (docs/operating.md, "Serving")."""

import sys

# gunicorn re-reads this file on SIGHUP and forks the new workers from this process: the app modules imported at
# the last reading are forgotten first, so new workers run the code now on disk, as they would without them.
if __name__ == "__config__":
    for _name in [name for name in sys.modules if name == "app" or name.startswith("app.")]:
        del sys.modules[_name]

from app.serving import config as serving  # noqa: E402  ("config" is a gunicorn setting)
from app.serving.hooks import child_exit, on_starting, post_worker_init, worker_exit  # noqa: E402, F401
from app.serving.logs import KeyRedactingLogger  # noqa: E402
from app.serving.process import prepare_master  # noqa: E402
from app.serving.worker import ServingWorker  # noqa: E402
from app.settings import Settings  # noqa: E402

prepare_master()  # before the fork: workers inherit it

bind = serving.bind_addresses()
workers = serving.web_processes()
threads = serving.threads_per_process()
worker_class = ServingWorker
timeout = serving.worker_timeout(Settings.from_env())
graceful_timeout = timeout
keepalive = 5
# gunicorn answers a header field over limit_request_field_size (default 8190 bytes) itself (in the envelope, by
# ServingWorker). Let fields up to 16 KiB (e.g. a 10 KiB Authorization header) reach the app, which answers
# 401/400 in the envelope; nginx in front allows the same (large_client_header_buffers).
limit_request_field_size = 16384
accesslog = None
errorlog = "-"
logger_class = KeyRedactingLogger
# Forwarding headers are believed in one place only: the app's ProxyFix, by TRUSTED_PROXIES hops. gunicorn's own
# defaults would mark a request from loopback secure on its X-Forwarded-Proto before the app is consulted, so any
# local process could pass REQUIRE_HTTPS with TRUSTED_PROXIES=0.
forwarded_allow_ips = ""
secure_scheme_headers: dict[str, str] = {}
forwarder_headers = ""
