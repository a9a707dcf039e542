"""What a task needs (the database), made once in each worker process: a forked process must not use the
connections of the process it was forked from."""

from __future__ import annotations

import os

from app.db import Database
from app.settings import Settings


class WorkerResources:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._database: Database | None = None
        self._pid: int | None = None

    @property
    def database(self) -> Database:
        if self._database is None or self._pid != os.getpid():
            self._database = Database(self.settings)
            self._pid = os.getpid()
        return self._database
