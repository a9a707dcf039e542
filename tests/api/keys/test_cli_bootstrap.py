"""What `make run` prints a newcomer (`flask --app wsgi keys bootstrap`): the dashboard's address with the first
key, and on a second run, when the first key may be lost, the exact command that makes a new admin key."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT, VENV_BIN, cli, cli_in_process

KEY = re.compile(r"\bak_[0-9a-f]{64}\b")


def shown(text: str) -> str:
    """Output as a failure may print it: never a plain key."""
    return KEY.sub("ak_<redacted>", text)


def test_bootstrap_prints_the_dashboard_and_then_the_way_to_a_new_admin_key(database_url: str, tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url, "DATA_DIR": str(tmp_path)}
    cli_in_process("db", "upgrade", env=env)
    first = cli_in_process("keys", "bootstrap", "--url", "http://127.0.0.1:8123", env=env).stdout
    assert len(set(KEY.findall(first))) == 1
    printed = shown(first)  # asserted on, so a failure report shows this and not the key
    assert "Dashboard: open http://127.0.0.1:8123/dashboard/ and sign in with this key." in printed

    again = shown(cli_in_process("keys", "bootstrap", "--url", "http://127.0.0.1:8123", env=env).stdout)
    assert not KEY.search(again)
    assert "1 key(s) already exist, so none was created" in again
    assert "Lost the admin key? Make a new full-access key (printed once) with:" in again
    [command] = [line.strip() for line in again.splitlines() if " keys create " in line]
    assert command.endswith("--app wsgi keys create --permissions read,write,admin,delete --name admin"), again
    assert "http://127.0.0.1:8123/dashboard/" in again

    # The command works as printed, and its key may sign in to the dashboard (it holds admin).
    created = json.loads(cli_in_process(*shlex.split(command)[3:], "--json", env=env).stdout)
    assert created.pop("permissions") == ["read", "write", "admin", "delete"]
    assert KEY.fullmatch(created.pop("key")) is not None


@pytest.mark.slow
def test_the_printed_command_is_the_executable_that_was_run(tmp_path: Path) -> None:
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'keys.sqlite3'}", "DATA_DIR": str(tmp_path)}
    cli("db", "upgrade", env=env)
    cli("keys", "bootstrap", env=env)
    again = shown(cli("keys", "bootstrap", env=env).stdout)
    [command] = [line.strip() for line in again.splitlines() if " keys create " in line]
    assert command == f"{VENV_BIN / 'flask'} --app wsgi keys create --permissions read,write,admin,delete --name admin"
    pasted = subprocess.run([*shlex.split(command), "--json"], cwd=ROOT, env={**os.environ, **env},
                            capture_output=True, text=True, timeout=60)
    assert pasted.returncode == 0, shown(pasted.stderr)
    assert "admin" in json.loads(pasted.stdout)["permissions"]


def test_an_expiry_past_the_last_instant_is_a_clear_error(tmp_path: Path) -> None:
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'keys.sqlite3'}", "DATA_DIR": str(tmp_path)}
    cli_in_process("db", "upgrade", env=env)
    refused = cli_in_process("keys", "create", "--permissions", "read", "--expires", "9999-12-31T23:30:00-01:00",
                             env=env, check=False)
    assert refused.returncode == 1
    assert "is after 9999-12-31T23:59:59Z once its UTC offset is applied" in refused.stderr
    assert "Traceback" not in refused.stderr
