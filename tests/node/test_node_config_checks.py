"""One check of a member's settings for ``node start`` and ``node start --print-config``, in
the options' names, and config files that are not what they should be (issues 44/9, 45/11).

``--print-config`` used to approve settings ``node start`` then refused (``flush =
"sometimes"``, an id not in peers, ``tls-cert`` alone, a vote interval min above max), and the
refusals named internal fields (``max_vote_interval_ms``). A config file could crash the
command (non-UTF-8 text, a float, nan or date for a size, arrays nested 3,000 deep), pass
``--print-config`` and then crash (``data-file-size = -5``), or be misread (``heartbeat-interval
= true`` as 1). Each is now one ``Error: ...`` line, exit 2, the same for both, and nothing
is left behind."""

from __future__ import annotations

import os

import pytest

from tests.support.commands import cli

PEERS = "n0-127.0.0.1:30911;n1-127.0.0.1:30912;n2-127.0.0.1:30913"


def both(tmp_path, *args):
    """``node start ARGS`` and ``node start ARGS --print-config``: their results."""
    store = tmp_path / "store"
    start = cli("node", "start", "--store-base-dir", str(store), *args, timeout=60)
    printed = cli("node", "start", "--store-base-dir", str(store), *args, "--print-config", timeout=60)
    assert not store.exists()  # (refused before anything was made)
    return start, printed


def one_line(r, code: int = 2) -> str:
    """The one ``Error:`` line (click's usage errors add a Usage: line before it)."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = [x for x in r.stderr.splitlines() if x.startswith("Error: ")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.parametrize("args,says", [
    (("--id", "n0", "--peers", PEERS, "--flush", "sometimes"), "--flush must be 'async' or 'sync', not 'sometimes'"),
    (("--id", "n7", "--peers", PEERS), "--id 'n7' is not one of --peers (n0, n1, n2)"),
    (("--id", "n0", "--peers", PEERS, "--tls-cert", "member.pem"), "missing --tls-key, --tls-ca"),
    (("--id", "n0", "--peers", PEERS, "--min-vote-interval", "900", "--max-vote-interval", "400"),
     "--max-vote-interval 400 is below --min-vote-interval 900"),
    (("--id", "n0", "--peers", PEERS, "--data-file-size", str(1 << 63)),
     "--data-file-size must be at least 56 and at most 2147483647"),
    (("--id", "n0", "--peers", PEERS, "--index-file-size", "100"), "--index-file-size 100 is not a multiple of 32"),
    (("--id", "n0", "--peers", PEERS, "--idle-timeout", "nan"), "--idle-timeout"),
    (("--id", "n0", "--peers", PEERS, "--heartbeat-interval", str(1 << 40)), "--heartbeat-interval must be"),
    (("--id", "n0", "--peers", PEERS, "--preferred-leader", "n9"), "--preferred-leader 'n9' is not one of --peers"),
    (("--id", "n0", "--peers", PEERS, "--dledger-peers", "n0"), "--dledger-peers: 'n0' is not one of the other"),
    (("--id", "n0", "--peers", PEERS, "--delete-when", "\u0660\u0664"), "--delete-when"),  # (Arabic-Indic "04")
    (("--id", "n0", "--peers", PEERS, "--data-file-size", "\u0663MiB"), "is not a size"),
])
def test_print_config_refuses_what_start_refuses_in_the_options_names(tmp_path, args, says):
    start, printed = both(tmp_path, *args)
    line = one_line(start)
    assert says in line, line
    assert one_line(printed) == line
    assert "_ms" not in line and "max_vote" not in line and "self id" not in line, line


def test_a_start_that_print_config_approves_is_taken_and_the_file_and_line_parse_sizes_alike(tmp_path):
    path = tmp_path / "n0.toml"
    path.write_text(f'id = "n0"\npeers = "{PEERS}"\ndata-file-size = 1048576\nindex-file-size = "64KiB"\n'
                    'group = 7\n')
    r = cli("node", "start", "--config", str(path), "--print-config")
    assert r.returncode == 0, r.stderr
    assert "data-file-size = 1048576" in r.stdout and "index-file-size = 65536" in r.stdout
    assert 'group = "7"' in r.stdout  # (a bare number is text where the option takes text)
    line = cli("node", "start", "--id", "n0", "--peers", PEERS, "--data-file-size", "1MiB", "--print-config").stdout
    assert "data-file-size = 1048576" in line


NESTED = "peer-address = " + "[" * 3000 + "]" * 3000 + "\n"


@pytest.mark.parametrize("content,says", [
    (b'id = "n\xff0"\n', "not UTF-8 text (byte 0xff at offset 7)"),
    (b"data-file-size = 1.5\n", "data-file-size: a size ('64KiB', or a whole number of bytes), not 1.5"),
    (b"data-file-size = nan\n", "data-file-size: a size"),
    (b"data-file-size = 1979-05-27T07:32:00Z\n", "data-file-size: a size ('64KiB', or a whole number of bytes), "
                                                 "not a date or time (1979-05-27T07:32:00+00:00)"),
    (b"data-file-size = -5\n", "data-file-size: size must be positive, not -5"),
    (b"drop-behind = -1\n", "drop-behind: size must be 0 or more, not -1"),
    (b"heartbeat-interval = true\n", "heartbeat-interval: a whole number, not true"),
    (b"heartbeat-interval = 2.5\n", "heartbeat-interval: a whole number, not 2.5"),
    (b"idle-timeout = inf\n", "idle-timeout: a finite number, not inf"),
    (b"disk-full-ratio = false\n", "disk-full-ratio: a finite number, not false"),
    (b"group = 1979-05-27\n", "group: text, not a date or time (1979-05-27)"),
    (b"peer-address = [1.5]\n", "peer-address: text, not 1.5"),
    (NESTED.encode(), "arrays or tables nest too deep"),
])
def test_a_config_file_that_does_not_fit_is_one_line_exit_2_for_start_and_print_config(tmp_path, content, says):
    path = tmp_path / "n0.toml"
    path.write_bytes(content)
    start, printed = both(tmp_path, "--config", str(path), "--id", "n0", "--peers", PEERS)
    line = one_line(start)
    assert line.startswith(f"Error: --config {path}: ") and says in line, line
    assert one_line(printed) == line


def test_a_huge_config_file_is_refused_unread(tmp_path):
    path = tmp_path / "n0.toml"
    with open(path, "wb") as fh:
        fh.write(b"# " + b"x" * (4 << 20) + b"\n")
    line = one_line(cli("node", "start", "--config", str(path), "--print-config"))
    assert "larger than 1024 KiB" in line and str(path) in line
    assert os.path.getsize(path) > 4 << 20
