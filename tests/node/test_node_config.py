"""``node start --config FILE`` (dledgerctl/nodeconf.py): the settings of a member in a TOML
file, DLEDGERCTL_<OPTION> variables and the command line over it, ``--print-config``, and
the one-line errors for a file that does not fit."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import pytest

from tests.support.commands import cli

PEERS = "n0-127.0.0.1:30911;n1-127.0.0.1:30912;n2-127.0.0.1:30913"


def write(tmp_path, text: str) -> str:
    path = tmp_path / "n0.toml"
    path.write_text(text)
    return str(path)


def printed(*args, env: dict | None = None) -> dict:
    r = subprocess.run([sys.executable, "-m", "dledgerctl", "node", "start", *args, "--print-config"],
                       capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr
    return tomllib.loads(r.stdout)


def test_the_file_gives_the_settings_and_the_environment_and_command_line_win(tmp_path):
    path = write(tmp_path, f'id = "n0"\npeers = "{PEERS}"\nheartbeat-interval = 200\nmax-pending = 7\n'
                           'read-lease = true\npeer-address = ["n1=127.0.0.1:30999"]\ndata-file-size = "1MiB"\n'
                           'delete-when = "03;04"\n')
    got = printed("--config", path)
    assert got["id"] == "n0" and got["peers"] == PEERS and got["heartbeat-interval"] == 200
    assert got["read-lease"] is True and got["peer-address"] == ["n1=127.0.0.1:30999"]
    assert got["data-file-size"] == 1 << 20 and got["delete-when"] == "03;04"
    assert got["max-heartbeat-leak"] == 3 and "config" not in got  # (defaults shown; the file's own name not)
    over = printed("--config", path, "--max-pending", "9", env={"DLEDGERCTL_HEARTBEAT_INTERVAL": "300",
                                                                "DLEDGERCTL_MAX_PENDING": "8"})
    assert over["heartbeat-interval"] == 300 and over["max-pending"] == 9  # (command line > environment > file)
    again = tmp_path / "again.toml"
    again.write_text(subprocess.run([sys.executable, "-m", "dledgerctl", "node", "start", "--config", path,
                                     "--print-config"], capture_output=True, text=True, timeout=60).stdout)
    assert printed("--config", str(again)) == got  # (what it prints is a config file)


def test_every_option_reads_its_environment_variable_without_a_file():
    got = printed(env={"DLEDGERCTL_ID": "n1", "DLEDGERCTL_PEERS": PEERS, "DLEDGERCTL_NEVER_LEAD": "true",
                       "DLEDGERCTL_DISK_FULL_RATIO": "0.95"})
    assert got["id"] == "n1" and got["never-lead"] is True and got["disk-full-ratio"] == 0.95


@pytest.mark.parametrize("text,says", [
    ("heartbeat-intervall = 5\n", "unknown key 'heartbeat-intervall' (did you mean 'heartbeat-interval'?)"),
    ("heartbeat-interval = -5\n", "heartbeat-interval:"),
    ("never-lead = \"yes\"\n", "never-lead: true or false"),
    ("data-file-size = \"12 parsecs\"\n", "data-file-size: '12 parsecs' is not a size"),
    ("peers = [\"a\", \"b\"]\n", "peers: one value, not a list"),
    ("[tls]\ncert = \"x\"\n", "unknown key 'tls'"),
    ("id = \n", "not TOML"),
])
def test_a_file_that_does_not_fit_is_a_usage_error_naming_the_key(tmp_path, text, says):
    path = write(tmp_path, text)
    store = tmp_path / "store"
    r = cli("node", "start", "--config", path, "--id", "n0", "--peers", PEERS, "--store-base-dir", str(store))
    assert r.returncode == 2, (r.stdout, r.stderr)
    line = r.stderr.strip()
    assert "\n" not in line and line.startswith("Error: --config ") and path in line and says in line, line
    assert not store.exists()  # (refused before anything was made)


def test_a_missing_file_is_named(tmp_path):
    r = cli("node", "start", "--config", str(tmp_path / "nope.toml"))
    line = r.stderr.strip()
    assert r.returncode == 2 and "\n" not in line and "cannot read" in line and "nope.toml" in line, line
