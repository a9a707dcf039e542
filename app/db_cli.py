"""`flask --app wsgi db ...`: the database schema's migrations (docs/migrations.md describes the commands)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from flask.cli import AppGroup

from app.services import current_services

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"

db_cli = AppGroup("db", help="Database schema migrations.")


def alembic_config() -> Any:
    from alembic.config import Config

    # stdout is looked up now, not when alembic was imported, so output goes where click sends it.
    config = Config(stdout=sys.stdout)
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["database_url"] = current_services().settings.database_url_for_sqlalchemy
    return config


def _say_which_database() -> None:
    settings = current_services().settings
    if settings.sqlite_path is not None:
        click.echo(f"Using SQLite database at {settings.sqlite_path}", err=True)


@db_cli.command("upgrade")
@click.argument("revision", default="head")
def db_upgrade(revision: str) -> None:
    """Apply migrations up to REVISION (default: head)."""
    from alembic import command

    _say_which_database()
    command.upgrade(alembic_config(), revision)
    click.echo(f"Database schema is at {revision}.", err=True)


@db_cli.command("downgrade")
@click.argument("revision", default="-1")
def db_downgrade(revision: str) -> None:
    """Undo migrations down to REVISION (default: -1, the last one; "base" removes every table)."""
    from alembic import command

    _say_which_database()
    command.downgrade(alembic_config(), revision)
    click.echo(f"Database schema is at {revision}.", err=True)


@db_cli.command("current")
@click.option("--verbose", "-v", is_flag=True, help="Show each revision's details.")
def db_current(verbose: bool) -> None:
    """Show the revision the database is at ("(head)" when no migration is pending; nothing when empty)."""
    from alembic import command

    _say_which_database()
    command.current(alembic_config(), verbose=verbose)


@db_cli.command("history")
@click.option("--verbose", "-v", is_flag=True, help="Show each revision's details.")
def db_history(verbose: bool) -> None:
    """List the migrations, newest first."""
    from alembic import command

    command.history(alembic_config(), verbose=verbose)
