"""The account dashboard (server-rendered pages under /dashboard) and its session identity for the API."""

from __future__ import annotations

from flask import Flask

from app.services import Services


def init_dashboard(app: Flask, services: Services) -> None:
    from app.dashboard import sessions, views

    app.register_blueprint(views.bp)
    sessions.register_identity_source(app, services.database, services.keys)
