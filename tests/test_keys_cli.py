"""The admin command line exactly as operators type it (D6.8, D2.8), against real databases."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support import cli

KEY = re.compile(r"\bak_[0-9a-f]{64}\b")


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    environment = {"DATABASE_URL": database_url, "DATA_DIR": str(tmp_path)}
    cli("db", "upgrade", env=environment)
    return environment


def create(env: dict[str, str], *args: str) -> dict:
    return json.loads(cli("keys", "create", *args, "--json", env=env).stdout)


def test_create_prints_the_key_once_and_stores_only_its_hash(env: dict[str, str], database_url: str) -> None:
    text = cli("keys", "create", "--permissions", "read,write", "--name", "backend", env=env).stdout
    plain = KEY.findall(text)
    assert len(plain) == 1
    listed = cli("keys", "list", "--json", env=env).stdout
    assert plain[0] not in listed
    assert hashlib.sha256(plain[0].encode()).hexdigest() not in listed
    [row] = json.loads(listed)
    assert row["name"] == "backend"
    assert row["permissions"] == ["read", "write"]
    assert row["limits"] == {"per_minute": 100, "per_hour": 1000, "per_day": 50000}
    assert row["prefix"] == plain[0][:11]
    assert row["usage_count"] == 0 and row["last_used"] is None and row["revoked"] is None


def test_create_json_has_id_and_key(env: dict[str, str]) -> None:
    created = create(env, "--permissions", "read")
    assert KEY.fullmatch(created["key"])
    assert created["id"].startswith("key_")
    assert created["limits"] == {"per_minute": 50, "per_hour": 500, "per_day": 10000}


@pytest.mark.parametrize(
    ("permissions", "limits"),
    [
        ("read,write,admin,delete", [500, 5000, 250000]),
        ("read,admin", [200, 2000, 100000]),
        ("write", [100, 1000, 50000]),
        ("delete", [50, 500, 10000]),
    ],
)
def test_limits_follow_the_permission_level(env: dict[str, str], permissions: str, limits: list[int]) -> None:
    created = create(env, "--permissions", permissions)
    assert list(created["limits"].values()) == limits


def test_tier_and_custom_numbers_take_precedence(env: dict[str, str]) -> None:
    free = create(env, "--permissions", "read,write,admin,delete", "--tier", "free")
    assert list(free["limits"].values()) == [10, 100, 1000]
    custom = create(env, "--permissions", "read", "--tier", "premium", "--per-minute", "7")
    assert list(custom["limits"].values()) == [7, 5000, 250000]


def test_bad_input_gets_clear_errors_and_changes_nothing(env: dict[str, str]) -> None:
    unknown = cli("keys", "create", "--permissions", "read,fly", env=env, check=False)
    assert unknown.returncode != 0 and "unknown permission(s) fly" in unknown.stderr
    past = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    expired = cli("keys", "create", "--permissions", "read", "--expires", past, env=env, check=False)
    assert expired.returncode != 0 and "not in the future" in expired.stderr
    garbage = cli("keys", "create", "--permissions", "read", "--expires", "soon", env=env, check=False)
    assert garbage.returncode != 0 and "ISO 8601" in garbage.stderr
    missing = cli("keys", "revoke", "key_nope", env=env, check=False)
    assert missing.returncode != 0 and "no key with id" in missing.stderr
    assert json.loads(cli("keys", "list", "--json", env=env).stdout) == []


def test_show_revoke_and_list_status(env: dict[str, str]) -> None:
    created = create(env, "--permissions", "read")
    shown = cli("keys", "show", created["id"], env=env).stdout
    assert created["id"] in shown and created["key"] not in shown
    cli("keys", "revoke", created["id"], env=env)
    row = json.loads(cli("keys", "show", created["id"], "--json", env=env).stdout)
    assert row["status"] == "revoked" and row["revoked"] is not None


def test_rotate_keeps_account_permissions_and_limits(env: dict[str, str]) -> None:
    old = create(env, "--permissions", "read,admin", "--per-day", "1234", "--account", "acme")
    rotated = json.loads(cli("keys", "rotate", old["id"], "--json", env=env).stdout)
    assert rotated["key"] != old["key"]
    assert rotated["permissions"] == old["permissions"]
    assert rotated["limits"] == old["limits"]
    assert rotated["account_id"] == "acme"
    old_row = json.loads(cli("keys", "show", old["id"], "--json", env=env).stdout)
    assert old_row["status"] == "active" and old_row["rotated_to"] == rotated["id"]
    expires = datetime.fromisoformat(old_row["expires"].replace("Z", "+00:00"))
    assert timedelta(hours=23, minutes=59) < expires - datetime.now(UTC) <= timedelta(hours=24)


def test_rotate_with_zero_grace_revokes_at_once(env: dict[str, str]) -> None:
    old = create(env, "--permissions", "read")
    cli("keys", "rotate", old["id"], "--grace", "0", "--json", env=env)
    assert json.loads(cli("keys", "show", old["id"], "--json", env=env).stdout)["status"] == "revoked"


def test_set_limits(env: dict[str, str]) -> None:
    key = create(env, "--permissions", "read")
    cli("keys", "set-limits", key["id"], "--per-minute", "5", env=env)
    assert json.loads(cli("keys", "show", key["id"], "--json", env=env).stdout)["limits"]["per_minute"] == 5
    cli("keys", "set-limits", key["id"], "--tier", "standard", env=env)
    row = json.loads(cli("keys", "show", key["id"], "--json", env=env).stdout)
    assert row["limits"] == {"per_minute": 100, "per_hour": 1000, "per_day": 50000} and row["tier"] == "standard"
    nothing = cli("keys", "set-limits", key["id"], env=env, check=False)
    assert nothing.returncode != 0


def test_bootstrap_creates_a_first_key_only_on_an_empty_store(env: dict[str, str]) -> None:
    first = cli("keys", "bootstrap", env=env).stdout
    [plain] = set(KEY.findall(first))
    assert f"curl -s http://127.0.0.1:8000/verify -H 'Authorization: Bearer {plain}'" in first
    again = cli("keys", "bootstrap", env=env).stdout
    assert not KEY.findall(again) and "already exist" in again
