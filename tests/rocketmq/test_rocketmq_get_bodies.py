"""``get --decode rocketmq`` bodies in a table (issue 44.19): a message body that is not
text is ``<binary, N bytes>`` unless ``--body`` asks for it; ``--delimiter`` without
``--format raw`` is a usage error, not silently ignored. A real one-node group on
127.0.0.1 for the first; the second is refused before anything is asked of a node."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from tests.support.commands import cli
from tests.support.group import append_bodies
from tests.support.rmq_encode import encode_message

BINARY = bytes(range(256)) * 3


@pytest.fixture(scope="module")
def shared_group(module_group):
    """A one-member group holding four messages: its base directory and the first one's index."""
    base = module_group(1)
    bodies = [encode_message(topic="Bin", body=BINARY), encode_message(topic="Text", body="héllo".encode()),
              encode_message(topic="Nul", body=b"ab\x00cd"), encode_message(topic="Z", body=BINARY,
                                                                           compress="zstd")]
    return base, append_bodies(base, bodies).entries[0][0]


def test_a_table_shows_binary_bodies_as_their_size(shared_group):
    base, first = shared_group
    r = cli("get", "--base-dir", base, "-i", str(first), "-c", "4", "--decode", "rocketmq")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()[2:]
    assert len(lines) == 4
    assert "<binary, 768 bytes>" in lines[0] and "\\x" not in r.stdout and "\ufffd" not in r.stdout
    assert "héllo" in lines[1] and "<binary, 5 bytes>" in lines[2]
    assert "<binary, 768 bytes>" in lines[3] and "zstd-compressed" in lines[3]  # (the size uncompressed)


@pytest.mark.parametrize("how, want", [("utf8", BINARY.decode("utf-8", "replace")), ("hex", BINARY.hex())])
def test_body_asks_for_the_bytes(shared_group, how, want):
    base, first = shared_group
    r = cli("get", "--base-dir", base, "-i", str(first), "--decode", "rocketmq", "--body", how)
    assert r.returncode == 0, r.stderr
    assert "<binary" not in r.stdout
    r = cli("get", "--base-dir", base, "-i", str(first), "--decode", "rocketmq", "--body", how, "-f", "jsonl")
    assert json.loads(r.stdout)["body"] == want
    r = cli("get", "--base-dir", base, "-i", str(first), "--decode", "rocketmq", "-f", "jsonl")  # (json: as before)
    assert json.loads(r.stdout)["body"] == BINARY.decode("utf-8", "replace")


@pytest.mark.parametrize("fmt", ["table", "jsonl", "csv", "json"])
@pytest.mark.parametrize("delim", ["nul", "length", "newline"])
def test_delimiter_without_raw_is_a_usage_error(fmt, delim):
    r = CliRunner().invoke(app, ["get", "--peers", "n0-127.0.0.1:1", "-i", "0", "--delimiter", delim, "-f", fmt])
    assert r.exit_code == 2, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "--delimiter" in errors[0] and "-f raw" in errors[0], r.output


def test_max_body_without_what_it_bounds_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(app, ["get", "--peers", "n0-127.0.0.1:1", "-i", "0", "--max-body", "8MiB"])
    assert r.exit_code == 2 and "--max-body" in r.output and "--decode rocketmq" in r.output, r.output
    r = CliRunner().invoke(app, ["mq", "messages", str(tmp_path), "--max-body", "8MiB"])
    assert r.exit_code == 2 and "--max-body" in r.output and "--body" in r.output, r.output
