"""gunicorn's own log lines, with key-shaped strings redacted as the app's are.

gunicorn quotes what a client sent ("Invalid request from ip=...: Invalid HTTP request line: ..."), so a key
pasted into a URL could reach the log through its lines; the app's JsonFormatter never sees them.
"""

from __future__ import annotations

import logging
from typing import Any

from gunicorn.glogging import Logger

from app.web.observability import KEY_SHAPED, redact_keys


class RedactKeys(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if KEY_SHAPED.search(message):
            record.msg, record.args = redact_keys(message), ()
        if record.exc_info and not record.exc_text:  # the handler's formatter uses this text as it is
            record.exc_text = redact_keys(logging.Formatter().formatException(record.exc_info))
        return True


class KeyRedactingLogger(Logger):
    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            log.addFilter(RedactKeys())
