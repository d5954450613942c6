"""Hypothesis over ``node start --config FILE`` (issue 45, "the fuzzers extended to config files").

Generated TOML files: node start's own keys with values of every TOML type (whole numbers huge
and negative, floats with nan and inf, booleans, text with non-ASCII digits such as '²' and
'٣', dates and times, arrays, inline and nested tables, arrays nested deep), unknown keys,
non-UTF-8 bytes and files cut short. The property, for ``--print-config`` and for a start:

- the outcome is exit 0 with a printed config, or exit 2 with exactly one ``Error:`` line that
  names the config file or an option; never a traceback, never another exit code;
- what ``--print-config`` approves, a start takes too (one validation for both, issue 44
  item 9): the start reaches the point where the node is built (``Node`` is replaced by a
  stand-in that records its config and stops there, so nothing listens or is written), and
  the printed settings read back as a config file print the same settings.

In-process through typer's CliRunner: a few milliseconds an example."""

from __future__ import annotations

import datetime
import json
import os
import tempfile

import pytest
import typer
import typer.main
from hypothesis import HealthCheck, event, example, given, settings, strategies as st
from typer.testing import CliRunner

from cluster.node import process
from dledgerctl import nodeconf
from dledgerctl.app import app
from dledgerctl.node_cmd import node_app

runner = CliRunner()
PEERS = "n0-127.0.0.1:30911;n1-127.0.0.1:30912;n2-127.0.0.1:30913"
NOT_SETTINGS = {"install-completion", "show-completion", "store-base-dir", "config", "print-config"}
# state-machine names a module to import when the node is built (a stand-in here), so it is
# drawn from a few values, not from any text.
STATE_MACHINES = ["kv", "no.such.module:Class", "kv:", ":", "", "²", "tests:Nope"]
KINDS = {k: nodeconf.kind(p) for k, p in nodeconf.settings(typer.main.get_command(node_app)).items()
         if k not in NOT_SETTINGS}
KEYS = sorted(KINDS)

digits = st.sampled_from(list("0123456789²³¹٣٠٤۵०߂" + "-+._ :;,=kKMGiB"))
texts = st.one_of(
    st.text(max_size=20),
    st.text(digits, max_size=12),
    st.sampled_from(["async", "sync", "n0", "n1", "n7", PEERS, "64KiB", "1MiB", "1GiB", "0", "-5", "04", "٠٤",
                     "03;04", "auto", "asyncio", "uvloop", "n1=127.0.0.1:30999", "n9=::1:1", "127.0.0.1:0",
                     "nan", "inf", "1e400", "\u0663MiB", "n0,n1", "n0-127.0.0.1:30911"]),
)
whole = st.one_of(st.integers(-10, 5000), st.integers(), st.sampled_from([0, 1, -1, 56, 2 ** 31 - 1, 2 ** 31,
                                                                          2 ** 63 - 1, 2 ** 63, -(2 ** 63), 2 ** 64]))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.5, 1.0, 0.7, 0.85, 1e308]))
when = st.one_of(st.datetimes(), st.datetimes(timezones=st.just(datetime.timezone.utc)), st.dates(), st.times())
scalars = st.one_of(whole, floats, st.booleans(), texts, when)


def toml_value(v) -> str:
    """``v`` written as a TOML value (inline arrays and tables)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(v), repr(v))
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # (JSON's escapes are TOML's; a DEL is TOML's error)
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=4), inner, max_size=2)),
                      max_leaves=6)


@st.composite
def key_value(draw) -> str:
    choice = draw(st.integers(0, 9))
    if choice == 0:  # an unknown key
        key = draw(st.text(min_size=1, max_size=12).filter(lambda k: k not in KINDS))
        return f"{json.dumps(key, ensure_ascii=False)} = {toml_value(draw(scalars))}\n"
    key = draw(st.sampled_from(KEYS))
    if key == "state-machine":
        return f"{key} = {json.dumps(draw(st.sampled_from(STATE_MACHINES)))}\n"
    if choice == 1:  # a table, by header or by dotted key
        sub = draw(st.dictionaries(st.sampled_from(["a", "b", "1"]), scalars, min_size=1, max_size=2))
        if draw(st.booleans()):
            return f"[{key}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in sub.items())
        return "".join(f"{key}.{k} = {toml_value(v)}\n" for k, v in sub.items())
    if choice == 2:  # nested deep
        depth = draw(st.sampled_from([2, 40, 600, 3000]))
        return f"{key} = " + "[" * depth + "]" * depth + "\n"
    if choice <= 5:  # a value of the key's own kind (most then get through the file's checks)
        kind = KINDS[key]
        own = {"flag": st.booleans(), "int": whole, "float": st.one_of(floats, whole), "size": st.one_of(whole, texts),
               "text": texts}[kind]
        if key == "peer-address" and draw(st.booleans()):
            own = st.lists(texts, max_size=3)
        return f"{key} = {toml_value(draw(own))}\n"
    return f"{key} = {toml_value(draw(values))}\n"


@st.composite
def config_files(draw) -> bytes:
    lines = []
    if draw(st.integers(0, 3)):  # (most files name a member, so more of them get past the first checks)
        lines += [f'id = "{draw(st.sampled_from(["n0", "n1", "n2"]))}"\n', f'peers = "{PEERS}"\n']
    lines += draw(st.lists(key_value(), max_size=6))
    data = "".join(draw(st.permutations(lines))).encode()
    hurt = draw(st.integers(0, 7))
    if hurt == 0 and data:  # cut short
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif hurt == 1:  # bytes that are not UTF-8 somewhere
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80", b"\xf4\x90\x80\x80"])) \
            + data[at:]
    elif hurt == 2:  # a byte replaced by anything
        if data:
            at = draw(st.integers(0, len(data) - 1))
            data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    return data


class Built(Exception):
    """The stand-in Node's: the start got as far as building the node."""


@pytest.fixture(scope="module")
def built():
    """``process.Node`` replaced for this module: records each config it is given, then stops the start."""
    seen = []

    def stand_in(cfg):
        seen.append(cfg)
        raise typer.Exit(0)

    real = process.Node
    process.Node = stand_in
    yield seen
    process.Node = real


def check_outcome(r, path: str) -> str | None:
    """Exit 0 with settings printed (None), or exit 2 with one Error: line naming the file or an option (the line)."""
    assert r.exception is None or isinstance(r.exception, SystemExit), (r.exception, r.stderr)
    out = r.stdout + r.stderr
    assert "Traceback" not in out, out
    if r.exit_code == 0:
        assert "Error" not in r.stderr, r.stderr
        return None
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    errors = [x for x in r.stderr.splitlines() if x.startswith("Error: ")]
    assert len(errors) == 1 and errors[0] == r.stderr.splitlines()[-1], r.stderr
    assert f"--config {path}: " in errors[0] or "--" in errors[0] or "'-" in errors[0], errors[0]
    return errors[0]


def body(printed: str) -> str:
    """Printed settings without their first line (which says where they came from)."""
    first, _, rest = printed.partition("\n")
    assert first.startswith("# dledgerctl node start settings, from "), printed
    return rest


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(data=config_files(), on_line=st.booleans())
@example(data=b'id = "n\xff0"\n', on_line=True)
@example(data=b"data-file-size = -5\n", on_line=True)
@example(data=b"heartbeat-interval = true\n", on_line=True)
@example(data=b"data-file-size = 1979-05-27T07:32:00Z\n", on_line=True)
@example(data=("peer-address = " + "[" * 3000 + "]" * 3000 + "\n").encode(), on_line=True)
@example(data=f'id = "n0"\npeers = "{PEERS}"\ndelete-when = "٠٤"\n'.encode(), on_line=False)
@example(data=f'id = "n0"\npeers = "{PEERS}"\ndata-file-size = "\u0663MiB"\n'.encode(), on_line=False)
@example(data=f'id = "n0"\npeers = "{PEERS}"\nsnapshot-keep-entries = {2 ** 64}\n'.encode(), on_line=False)
def test_a_config_file_starts_as_print_config_says_or_is_one_error_line(built, data, on_line):
    with tempfile.TemporaryDirectory(prefix="cfgfuzz-") as tmp:
        path = os.path.join(tmp, "n0.toml")
        with open(path, "wb") as fh:
            fh.write(data)
        store = os.path.join(tmp, "store")
        args = ["node", "start", "--store-base-dir", store, "--config", path]
        if on_line:  # (the command line wins over the file: a file with neither still starts)
            args += ["--id", "n0", "--peers", PEERS]
        printed = runner.invoke(app, [*args, "--print-config"])
        line = check_outcome(printed, path)
        del built[:]
        start = runner.invoke(app, args)
        assert check_outcome(start, path) == line  # (the same refusal, or none)
        assert not os.path.exists(store)  # (refused, or stopped at the stand-in: nothing left behind)
        event("refused" if line else "printed and started")
        if line is not None:
            assert not built
            return
        assert len(built) == 1, (printed.stdout, start.stderr)
        # the printed settings are a config file that prints them again, and starts the same node
        again = os.path.join(tmp, "again.toml")
        with open(again, "w", encoding="utf-8") as fh:
            fh.write(printed.stdout)
        reprinted = runner.invoke(app, ["node", "start", "--config", again, "--print-config"])
        assert check_outcome(reprinted, again) is None
        assert body(reprinted.stdout) == body(printed.stdout)
        del built[:]
        restart = runner.invoke(app, ["node", "start", "--config", again])
        assert check_outcome(restart, again) is None and len(built) == 1
