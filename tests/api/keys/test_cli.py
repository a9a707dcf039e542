"""The admin command line (`flask --app wsgi db ...` and `keys ...`) against real databases.

The commands run in-process through Flask's CLI runner (the same click commands, parsing and exit codes an
operator gets); one smoke test runs the real `.venv/bin/flask` executable end to end.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import Result
from flask import Flask
from sqlalchemy import delete

from app import create_app
from app.keys.records import api_keys_table
from tests.support import VENV_BIN, cli, settings_for

KEY = re.compile(r"\bak_[0-9a-f]{64}\b")


@dataclass(frozen=True)
class Outcome:
    """What an operator sees: exit status, standard output, standard error."""

    returncode: int
    stdout: str
    stderr: str


class Cli:
    def __init__(self, app: Flask) -> None:
        self.app = app

    def __call__(self, *args: str, check: bool = True) -> Outcome:
        result: Result = self.app.test_cli_runner().invoke(args=list(args))
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        outcome = Outcome(result.exit_code, result.stdout, result.stderr)
        if check and outcome.returncode != 0:
            command = " ".join(args)
            raise AssertionError(f"flask {command} failed ({outcome.returncode}):\n{outcome.stdout}\n{outcome.stderr}")
        return outcome


@pytest.fixture(scope="module")
def cli_app(module_database_url: str) -> Iterator[Flask]:
    app = create_app(settings_for(module_database_url), start_workers=False)
    upgraded = Cli(app)("db", "upgrade")
    assert "Database schema is at head." in upgraded.stderr
    yield app
    app.extensions["forecast_service"].close()


@pytest.fixture
def run(cli_app: Flask) -> Cli:
    """The CLI on an empty key store (the database and its schema are shared by the module)."""
    with cli_app.extensions["forecast_service"].database.transaction() as connection:
        connection.execute(delete(api_keys_table))
    return Cli(cli_app)


# Tests of what the commands decide and print themselves, which no database changes, run on SQLite only.
SQLITE_ONLY = pytest.mark.parametrize("module_database_url", ["sqlite"], indirect=True)


def create(run: Cli, *args: str) -> dict:
    return json.loads(run("keys", "create", *args, "--json").stdout)


def test_create_prints_the_key_once_and_stores_only_its_hash(run: Cli) -> None:
    text = run("keys", "create", "--permissions", "read,write", "--name", "backend").stdout
    plain = KEY.findall(text)
    assert len(plain) == 1
    listed = run("keys", "list", "--json").stdout
    assert plain[0] not in listed
    assert hashlib.sha256(plain[0].encode()).hexdigest() not in listed
    [row] = json.loads(listed)
    assert row["name"] == "backend"
    assert row["permissions"] == ["read", "write"]
    assert row["limits"] == {"per_minute": 100, "per_hour": 1000, "per_day": 50000}
    assert row["prefix"] == plain[0][:11]
    assert row["usage_count"] == 0 and row["last_used"] is None and row["revoked"] is None


@SQLITE_ONLY
def test_create_json_has_id_and_key(run: Cli) -> None:
    created = create(run, "--permissions", "read")
    assert KEY.fullmatch(created["key"])
    assert created["id"].startswith("key_")
    assert created["limits"] == {"per_minute": 50, "per_hour": 500, "per_day": 10000}


@SQLITE_ONLY
@pytest.mark.parametrize(
    ("permissions", "limits"),
    [
        ("read,write,admin,delete", [500, 5000, 250000]),
        ("read,admin", [200, 2000, 100000]),
        ("write", [100, 1000, 50000]),
        ("delete", [50, 500, 10000]),
    ],
)
def test_limits_follow_the_permission_level(run: Cli, permissions: str, limits: list[int]) -> None:
    created = create(run, "--permissions", permissions)
    assert list(created["limits"].values()) == limits


@SQLITE_ONLY
def test_tier_and_custom_numbers_take_precedence(run: Cli) -> None:
    free = create(run, "--permissions", "read,write,admin,delete", "--tier", "free")
    assert list(free["limits"].values()) == [10, 100, 1000]
    custom = create(run, "--permissions", "read", "--tier", "premium", "--per-minute", "7")
    assert list(custom["limits"].values()) == [7, 5000, 250000]


@SQLITE_ONLY
def test_bad_input_gets_clear_errors_and_changes_nothing(run: Cli) -> None:
    unknown = run("keys", "create", "--permissions", "read,fly", check=False)
    assert unknown.returncode != 0 and "unknown permission(s) fly" in unknown.stderr
    past = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    expired = run("keys", "create", "--permissions", "read", "--expires", past, check=False)
    assert expired.returncode != 0 and "not in the future" in expired.stderr
    garbage = run("keys", "create", "--permissions", "read", "--expires", "soon", check=False)
    assert garbage.returncode != 0 and "ISO 8601" in garbage.stderr
    missing = run("keys", "revoke", "key_nope", check=False)
    assert missing.returncode != 0 and "no key with id" in missing.stderr
    assert json.loads(run("keys", "list", "--json").stdout) == []


def test_show_revoke_and_list_status(run: Cli) -> None:
    created = create(run, "--permissions", "read")
    shown = run("keys", "show", created["id"]).stdout
    assert created["id"] in shown and created["key"] not in shown
    run("keys", "revoke", created["id"])
    row = json.loads(run("keys", "show", created["id"], "--json").stdout)
    assert row["status"] == "revoked" and row["revoked"] is not None


@SQLITE_ONLY
def test_list_columns_align_whatever_the_permissions(run: Cli) -> None:
    assert "No keys." in run("keys", "list").stdout
    create(run, "--permissions", "read,write,admin,delete", "--name", "a rather long name for a key")
    create(run, "--permissions", "read", "--name", "x", "--per-minute", "1234567", "--per-day", "123456789")
    revoked = create(run, "--permissions", "read,admin", "--expires", "2099-01-01T00:00:00Z")
    run("keys", "revoke", revoked["id"])
    header, *rows = run("keys", "list").stdout.splitlines()
    assert len(rows) == 3
    titles = ["id", "name", "prefix", "permissions", "limits m/h/d", "status", "created", "expires", "usage",
              "last used"]
    starts = [header.index(title) for title in titles]
    assert starts == sorted(starts)
    assert any("read,write,admin,delete" in row for row in rows)
    for row in rows:
        # Every column boundary of the header is one in each row too: a blank, then the column's first character
        # (the right-aligned usage column ends where its title ends instead).
        for title, start in zip(titles, starts, strict=True):
            if title == "usage":
                end = start + len(title)
                assert row[end - 1] != " " and row[end] == " ", (title, header, row)
            else:
                assert row[start - 1 : start] in ("", " ") and row[start] != " ", (title, header, row)
        assert len(row.split()) >= len(titles) - 1  # no two cells ran into each other


def test_rotate_keeps_account_permissions_and_limits(run: Cli) -> None:
    old = create(run, "--permissions", "read,admin", "--per-day", "1234", "--account", "acme")
    rotated = json.loads(run("keys", "rotate", old["id"], "--json").stdout)
    assert rotated["key"] != old["key"]
    assert rotated["permissions"] == old["permissions"]
    assert rotated["limits"] == old["limits"]
    assert rotated["account_id"] == "acme"
    old_row = json.loads(run("keys", "show", old["id"], "--json").stdout)
    assert old_row["status"] == "active" and old_row["rotated_to"] == rotated["id"]
    expires = datetime.fromisoformat(old_row["expires"].replace("Z", "+00:00"))
    assert timedelta(hours=23, minutes=59) < expires - datetime.now(UTC) <= timedelta(hours=24)


def test_rotate_with_zero_grace_revokes_at_once(run: Cli) -> None:
    old = create(run, "--permissions", "read")
    run("keys", "rotate", old["id"], "--grace", "0", "--json")
    assert json.loads(run("keys", "show", old["id"], "--json").stdout)["status"] == "revoked"


@SQLITE_ONLY
def test_a_rotated_then_revoked_key_shows_no_expiry(run: Cli) -> None:
    # As the API and the dashboard show it: once revoked, the grace end of its rotation never comes.
    old = create(run, "--permissions", "read")
    run("keys", "rotate", old["id"], "--grace", "24h", "--json")
    assert json.loads(run("keys", "show", old["id"], "--json").stdout)["expires"] is not None  # its grace end
    run("keys", "revoke", old["id"])
    row = json.loads(run("keys", "show", old["id"], "--json").stdout)
    assert row["status"] == "revoked" and row["revoked"] is not None and row["expires"] is None
    assert re.search(r"^expires +-$", run("keys", "show", old["id"]).stdout, re.MULTILINE)
    listed = next(k for k in json.loads(run("keys", "list", "--json").stdout) if k["id"] == old["id"])
    assert listed["expires"] is None
    header, *rows = run("keys", "list").stdout.splitlines()
    row_text = next(r for r in rows if r.startswith(old["id"]))
    assert row_text[header.index("expires"):].split()[0] == "-"


def test_set_limits(run: Cli) -> None:
    key = create(run, "--permissions", "read")
    run("keys", "set-limits", key["id"], "--per-minute", "5")
    assert json.loads(run("keys", "show", key["id"], "--json").stdout)["limits"]["per_minute"] == 5
    run("keys", "set-limits", key["id"], "--tier", "standard")
    row = json.loads(run("keys", "show", key["id"], "--json").stdout)
    assert row["limits"] == {"per_minute": 100, "per_hour": 1000, "per_day": 50000} and row["tier"] == "standard"
    nothing = run("keys", "set-limits", key["id"], check=False)
    assert nothing.returncode != 0


def test_bootstrap_creates_a_first_key_only_on_an_empty_store(run: Cli) -> None:
    first = run("keys", "bootstrap").stdout
    [plain] = set(KEY.findall(first))
    assert f"curl -s http://127.0.0.1:8000/verify -H 'Authorization: Bearer {plain}'" in first
    again = run("keys", "bootstrap").stdout
    assert not KEY.findall(again) and "already exist" in again


def test_db_current_history_and_downgrade(run: Cli) -> None:
    history = run("db", "history").stdout
    assert "0001" in history and "(head)" in history
    assert "(head)" in run("db", "current").stdout
    create(run, "--permissions", "read")
    try:
        run("db", "downgrade", "base")
        assert "(head)" not in run("db", "current").stdout
        refused = run("keys", "list", check=False)
        assert refused.returncode != 0  # no table: the store is gone, not silently empty
    finally:
        run("db", "upgrade")
    assert "(head)" in run("db", "current").stdout
    assert json.loads(run("keys", "list", "--json").stdout) == []


@pytest.mark.slow
def test_the_real_flask_executable(tmp_path: Path) -> None:
    """The commands exactly as README shows them, in a fresh process reading the environment."""
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'keys.sqlite3'}", "DATA_DIR": str(tmp_path)}
    cli("db", "upgrade", env=env)
    # The hint names the executable the operator ran, so it works when pasted (a bare `flask` may be another's).
    assert f"{VENV_BIN / 'flask'} --app wsgi keys create" in cli("keys", "list", env=env).stdout
    created = json.loads(cli("keys", "create", "--permissions", "read,write", "--json", env=env).stdout)
    assert KEY.fullmatch(created["key"])
    listed = cli("keys", "list", env=env).stdout
    assert created["id"] in listed and "read,write" in listed and created["key"] not in listed
