"""`flask --app wsgi keys ...`: the operator's commands for API keys (README describes them and what they print).

Unlike the /keys API, these act with no key of their own: they reach every account and grant anything."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

import click
from flask.cli import AppGroup
from sqlalchemy import Connection

from app.api_key import ApiKey
from app.keys import store
from app.keys.limits import TIERS
from app.keys.safe_view import iso, shown_expiry
from app.services import current_services

keys_cli = AppGroup("keys", help="Create, list, show, revoke and rotate API keys.")


def _invoked_as() -> str:
    """How the operator ran us (e.g. `.venv/bin/flask`), so a suggested command works when pasted: a bare
    `flask` may be another installation's."""
    program = sys.argv[0] if sys.argv and Path(sys.argv[0]).name == "flask" else "flask"
    return f"{program} --app wsgi"


def _fail(message: str) -> NoReturn:
    raise click.ClickException(message)


@contextmanager
def _key_store() -> Iterator[Connection]:
    """A transaction on the key store; a database that cannot answer is one clear line, not a traceback."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with current_services().database.transaction() as connection:
            yield connection
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        _fail(f"the key store cannot be used ({reason}). Is the database reachable and migrated (db upgrade)?")


def _parse_expiry(raw: str | None) -> datetime | None:
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        _fail(f"--expires {raw!r} is not an ISO 8601 date-time (e.g. 2027-01-31T00:00:00Z)")
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:  # 9999-12-31 with a negative offset is past the last instant a datetime holds
        _fail(f"--expires {raw!r} is after 9999-12-31T23:59:59Z once its UTC offset is applied")


_DURATION = re.compile(r"^(\d+)\s*([smhd]?)$")


def _parse_duration(raw: str) -> timedelta:
    match = _DURATION.match(raw.strip().lower())
    if not match:
        _fail(f"--grace {raw!r} is not a duration like 0, 30m, 24h or 7d")
    amount, unit = int(match.group(1)), match.group(2) or "s"
    return timedelta(seconds=amount * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit])


def key_summary(key: ApiKey) -> dict[str, Any]:
    """Everything safe to show about a key: never the plain key, never its hash. Its expiry as the API and the
    dashboard show it: none for a revoked key (a rotated key's grace end never comes once it is revoked)."""
    now = datetime.now(UTC)
    return {
        "id": key.id,
        "account_id": key.account_id,
        "name": key.name,
        "prefix": key.prefix,
        "permissions": list(key.permissions),
        "tier": key.tier,
        "limits": {"per_minute": key.per_minute, "per_hour": key.per_hour, "per_day": key.per_day},
        "status": key.status(now),
        "created": iso(key.created_at),
        "expires": iso(shown_expiry(key)),
        "revoked": iso(key.revoked_at),
        "usage_count": key.usage_count,
        "last_used": iso(key.last_used_at),
        "rotated_to": key.rotated_to,
        "created_by": key.created_by,
    }


def _print_key(key: ApiKey) -> None:
    summary = key_summary(key)
    limits = summary.pop("limits")
    for field, value in summary.items():
        if isinstance(value, list):
            value = ",".join(value)
        click.echo(f"{field:<12} {value if value is not None else '-'}")
    click.echo(f"{'limits':<12} {limits['per_minute']}/minute, {limits['per_hour']}/hour, {limits['per_day']}/day")


def _print_new_key(created: store.CreatedKey, *, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({**key_summary(created.key), "key": created.plain_key}))
        return
    _print_key(created.key)
    click.echo("")
    click.echo("API key (shown once; only its SHA-256 hash is stored):")
    click.echo(created.plain_key)


@keys_cli.command("create")
@click.option("--permissions", required=True, help="Comma-separated: read, write, admin, delete.")
@click.option("--name", default="", help="A label for people.")
@click.option("--account", "account_id", default=store.DEFAULT_ACCOUNT, show_default=True)
@click.option("--expires", default=None, help="ISO 8601 date-time after which the key is refused.")
@click.option(
    "--tier", type=click.Choice(sorted(TIERS)), default=None, help="Rate-limit tier (docs/contract.md, Rate limits)."
)
@click.option("--per-minute", type=click.IntRange(min=1), default=None)
@click.option("--per-hour", type=click.IntRange(min=1), default=None)
@click.option("--per-day", type=click.IntRange(min=1), default=None)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with id and key.")
def keys_create(
    permissions: str,
    name: str,
    account_id: str,
    expires: str | None,
    tier: str | None,
    per_minute: int | None,
    per_hour: int | None,
    per_day: int | None,
    as_json: bool,
) -> None:
    """Create a key and print it once."""
    try:
        with _key_store() as connection:
            created = store.create_key(
                connection,
                permissions=store.parse_permissions(permissions),
                name=name,
                account_id=account_id,
                expires_at=_parse_expiry(expires),
                tier=tier,
                per_minute=per_minute,
                per_hour=per_hour,
                per_day=per_day,
            )
    except store.KeyInputError as exc:
        _fail(str(exc))
    _print_new_key(created, as_json=as_json)


@keys_cli.command("list")
@click.option("--json", "as_json", is_flag=True)
def keys_list(as_json: bool) -> None:
    """List keys (never the keys themselves)."""
    with _key_store() as connection:
        keys = store.list_keys(connection)
    if as_json:
        click.echo(json.dumps([key_summary(k) for k in keys]))
        return
    if not keys:
        click.echo(f"No keys. Create one with: {_invoked_as()} keys create --permissions read")
        return
    click.echo(_key_table(keys))


# (title, right-aligned): usage is a number, the rest read left to right.
_LIST_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("id", False),
    ("name", False),
    ("prefix", False),
    ("permissions", False),
    ("limits m/h/d", False),
    ("status", False),
    ("created", False),
    ("expires", False),
    ("usage", True),
    ("last used", False),
    ("created by", False),
)
_NAME_WIDTH = 24  # names may be 200 characters; the table shows their start


def _key_table(keys: list[ApiKey]) -> str:
    """One line per key; each column as wide as its widest cell, so any permissions or limits still align."""
    rows = []
    for key in keys:
        s = key_summary(key)
        rows.append(
            [
                s["id"],
                s["name"][:_NAME_WIDTH] or "-",
                s["prefix"],
                ",".join(s["permissions"]),
                f"{key.per_minute}/{key.per_hour}/{key.per_day}",
                s["status"],
                s["created"] or "-",
                s["expires"] or "-",
                str(s["usage_count"]),
                s["last_used"] or "-",
                s["created_by"] or "-",
            ]
        )
    titles = [title for title, _ in _LIST_COLUMNS]
    widths = [max(len(cell) for cell in column) for column in zip(titles, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        padded = [
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, (_, right) in zip(cells, widths, _LIST_COLUMNS, strict=True)
        ]
        return " ".join(padded).rstrip()

    return "\n".join(line(cells) for cells in [titles, *rows])


@keys_cli.command("show")
@click.argument("key_id")
@click.option("--json", "as_json", is_flag=True)
def keys_show(key_id: str, as_json: bool) -> None:
    """Show one key."""
    try:
        with _key_store() as connection:
            key = store.get_key(connection, key_id=key_id)
    except store.KeyInputError as exc:
        _fail(str(exc))
    if as_json:
        click.echo(json.dumps(key_summary(key)))
    else:
        _print_key(key)


@keys_cli.command("revoke")
@click.argument("key_id")
def keys_revoke(key_id: str) -> None:
    """Revoke a key at once, and every key it created (running servers refuse them within 5 s)."""
    try:
        with _key_store() as connection:
            key = store.revoke_key(connection, key_id=key_id)
            cascade = store.revoke_created(connection, key_id=key_id)
    except store.KeyInputError as exc:
        _fail(str(exc))
    click.echo(f"Revoked {key.id} at {iso(key.revoked_at)}.")
    if cascade:
        click.echo(f"also revoked: {', '.join(cascade)} (created by it, or by keys it created)")


@keys_cli.command("rotate")
@click.argument("key_id")
@click.option("--grace", default="24h", show_default=True, help="How long the old key keeps working (0 = revoke now).")
@click.option("--json", "as_json", is_flag=True)
def keys_rotate(key_id: str, grace: str, as_json: bool) -> None:
    """Make a replacement key with the same account, permissions and limits."""
    try:
        with _key_store() as connection:
            created, old = store.rotate_key(connection, key_id=key_id, grace=_parse_duration(grace))
    except store.KeyInputError as exc:
        _fail(str(exc))
    ends = iso(old.revoked_at) if old.revoked_at else iso(old.expires_at)
    click.echo(f"Old key {old.id} stops working at {ends}.", err=True)
    _print_new_key(created, as_json=as_json)


@keys_cli.command("set-limits")
@click.argument("key_id")
@click.option("--tier", type=click.Choice(sorted(TIERS)), default=None)
@click.option("--per-minute", type=click.IntRange(min=1), default=None)
@click.option("--per-hour", type=click.IntRange(min=1), default=None)
@click.option("--per-day", type=click.IntRange(min=1), default=None)
def keys_set_limits(
    key_id: str, tier: str | None, per_minute: int | None, per_hour: int | None, per_day: int | None
) -> None:
    """Change a key's limits; running servers apply them within 5 s."""
    if tier is None and per_minute is None and per_hour is None and per_day is None:
        _fail("give --tier and/or --per-minute/--per-hour/--per-day")
    try:
        with _key_store() as connection:
            key = store.set_limits(
                connection, key_id=key_id, tier=tier, per_minute=per_minute, per_hour=per_hour, per_day=per_day
            )
    except store.KeyInputError as exc:
        _fail(str(exc))
    click.echo(f"{key.id}: {key.per_minute}/minute, {key.per_hour}/hour, {key.per_day}/day")


FULL_ACCESS = "read,write,admin,delete"


@keys_cli.command("bootstrap")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True)
def keys_bootstrap(url: str) -> None:
    """Create a first full-access key when the store is empty, and show how to call the service."""
    dashboard = f"{url.rstrip('/')}/dashboard/"
    with _key_store() as connection:
        existing = store.count_keys(connection)
        if existing > 0:
            # The first key is printed once only; someone who lost it needs the way to a new one, not a dead end.
            click.echo(f"{existing} key(s) already exist, so none was created (see: {_invoked_as()} keys list).")
            click.echo("Lost the admin key? Make a new full-access key (printed once) with:")
            click.echo(f"  {_invoked_as()} keys create --permissions {FULL_ACCESS} --name admin")
            click.echo(f"Then sign in to the dashboard at {dashboard} with it.")
            return
        created = store.create_key(
            connection, permissions=tuple(FULL_ACCESS.split(",")), name="first key"
        )
    click.echo(f"Created the first API key {created.key.id} (full access). It is shown once; keep it safe:")
    click.echo("")
    click.echo(f"  {created.plain_key}")
    click.echo("")
    click.echo(f"Dashboard: open {dashboard} and sign in with this key.")
    click.echo("")
    click.echo("Try it:")
    click.echo(f"  curl -s {url}/verify -H 'Authorization: Bearer {created.plain_key}'")
    click.echo(f"  curl -s {url}/forecast -H 'Authorization: Bearer {created.plain_key}' \\")
    click.echo("    -H 'Content-Type: application/json' -d '" + json.dumps(_example_request()) + "'")
    sys.stdout.flush()


def _example_request() -> dict[str, Any]:
    values = [10, 12, 14, 13, 15, 17, 16, 18, 20, 19, 21, 23]
    return {
        "series": [
            {
                "timestamps": [f"2026-01-{day:02d}T00:00:00" for day in range(1, len(values) + 1)],
                "values": values,
            }
        ],
        "forecast_horizon": 3,
        "data_frequency": "Daily",
        "forecast_frequency": "Daily",
    }
