"""What a newcomer's mistakes show, command by command: the exit code, one ``Error:`` line
naming the real cause, and nothing left behind (no process, no record, no lock file, no
empty store directory).

Every leaf command of the app has a row in ``MATRIX`` (a test fails for a new command
without one). Rows that need no running group use typer's CliRunner; the others share one
real 3-node cluster on 127.0.0.1 (``group``), or start their own.
"""

from __future__ import annotations

import functools
import json
import os
import socket

import pytest
import typer.main

from dledgerctl.app import app
from tests.support.commands import cli as _command
from tests.support.commands import invoke as run
from tests.support.group import recorded
from tests.support.ports import free_port_base
from tests.support.rmq_store import write_broker_store
from tests.support.stores import file_crcs
from store.filestore import FileStore

cli = functools.partial(_command, timeout=90)  # (a longer deadline than other rooms')


def one_error(stderr: str, *words: str) -> str:
    """The one ``Error:`` line of ``stderr`` (exactly one), which holds every one of ``words``."""
    lines = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def tree(path) -> set[str]:
    """Every file and directory under ``path`` (relative), to compare before and after."""
    out = set()
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            out.add(os.path.relpath(os.path.join(dirpath, name), path))
    return out


def processes_naming(text: str) -> list[int]:
    """Pids of running processes whose command line holds ``text`` (a base directory)."""
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if text.encode() in fh.read():
                        pids.append(int(pid))
            except OSError:
                pass
    return pids


# -- the matrix: every command, and the cases of it below --------------------------------------
MATRIX = {
    "append": ["test_append_lines_needs_a_file", "test_bad_peers_lists"],
    "get": ["test_get_follow_renders_empty_and_control_bodies", "test_bad_peers_lists"],
    "completion": ["test_completion_of_an_unknown_shell"],
    "store inspect-data": ["test_inspect_past_the_log_says_where_it_is", "test_store_commands_on_a_missing_dir"],
    "store inspect-index": ["test_inspect_past_the_log_says_where_it_is", "test_store_commands_on_a_missing_dir"],
    "store verify": ["test_verify_csv_has_a_header_and_a_verdict", "test_store_commands_on_a_missing_dir"],
    "store checkpoint": ["test_store_commands_on_a_missing_dir"],
    "store snapshot": ["test_store_commands_on_a_missing_dir"],
    "store diff": ["test_store_commands_on_a_missing_dir"],
    "store truncate": ["test_refused_repairs_leave_no_lock_file"],
    "store purge": ["test_refused_repairs_leave_no_lock_file"],
    "store elect": ["test_store_commands_on_a_missing_dir"],
    "store backup": ["test_store_commands_on_a_missing_dir", "test_backup_commands_bad_input"],
    "store backup-verify": ["test_backup_commands_bad_input"],
    "store restore": ["test_backup_commands_bad_input"],
    "store force-new-group": ["test_force_new_group_bad_input"],
    "node start": ["test_node_start_checks_members_and_ratios", "test_node_start_on_a_taken_port_leaves_nothing"],
    "cluster status": ["test_status_of_another_group_is_not_up", "test_status_tells_a_stranger_from_a_member",
                       "test_bad_peers_lists"],
    "cluster up": ["test_cluster_up_on_a_taken_port_leaves_nothing", "test_cluster_up_empty_group",
                   "test_cluster_up_names_the_option_that_differs", "test_cluster_up_whose_members_exit_is_undone"],
    "cluster start": ["test_cluster_commands_without_a_record"],
    "cluster stop": ["test_cluster_commands_without_a_record"],
    "cluster down": ["test_cluster_commands_without_a_record"],
    "cluster backup": ["test_cluster_backup_bad_input"],
    "peer watermarks": ["test_bad_peers_lists"],
    "peer compare": ["test_peer_commands_name_members"],
    "peer truncate": ["test_peer_truncate_past_the_end_fails"],
    "peer transfer-leader": ["test_peer_commands_name_members"],
    "peer add": ["test_refused_peer_add_leaves_the_record_alone"],
    "peer remove": ["test_remove_right_after_a_stop_is_refused"],
    "peer replace": ["test_refused_peer_add_leaves_the_record_alone"],
    "spark audit": ["test_spark_commands_on_a_missing_path"],
    "spark diverge": ["test_spark_commands_on_a_missing_path"],
    "spark stats": ["test_spark_commands_on_a_missing_path"],
    "spark export": ["test_spark_commands_on_a_missing_path"],
    "spark mq-topics": ["test_spark_commands_on_a_missing_path"],
    "spark mq-find": ["test_spark_commands_on_a_missing_path"],
    "spark mq-export": ["test_spark_commands_on_a_missing_path"],
    "spark mq-align": ["test_spark_commands_on_a_missing_path", "test_spark_mq_align_refuses_before_spark"],
    "certs init": ["test_certs_init_checks_the_group"],
    "certs add": ["test_certs_add_needs_a_ca"],
    "mq migrate": ["test_mq_migrate_from_a_missing_dir"],
    "mq consumers": ["test_mq_consumers_without_offsets"],
    "mq epochs": ["test_mq_replica_commands_on_what_is_no_replica"],
    "mq digest": ["test_mq_replica_commands_on_what_is_no_replica"],
    "mq align": ["test_mq_replica_commands_on_what_is_no_replica"],
    "mq rebuild": ["test_mq_rebuild_of_a_missing_dir", "test_mq_rebuild_of_a_log_that_holds_no_messages"],
    "mq salvage": ["test_mq_salvage_bad_input"],
    "certs revoke": ["test_certs_revoke_needs_what_to_revoke"],
    "kv put": ["test_kv_put_without_a_state_machine_is_refused"],
    "kv get": ["test_bad_peers_lists"],
    "mq messages": ["test_mq_commands_on_a_missing_dir"],
    "mq topics": ["test_mq_commands_on_a_missing_dir"],
    "mq check": ["test_mq_commands_on_a_missing_dir"],
    "controller events": ["test_controller_commands_on_a_missing_dir"],
    "controller state": ["test_controller_commands_on_a_missing_dir"],
    "controller check": ["test_controller_commands_on_a_missing_dir"],
    "controller elect-plan": ["test_controller_elect_plan_bad_input"],
    "controller watch": ["test_controller_watch_bad_input"],
}


def test_mq_salvage_bad_input(tmp_path):
    """A missing kept file, a torn one, a log that is no node directory, an --out that exists:
    one Error line each, and no --out file left behind."""
    from store.filestore import FileStore

    node = str(tmp_path / "dledger-n0")
    with FileStore.open(node) as s:
        s.append_leader([b"x"], 1)
        good = s.get_bytes(0)
    torn = tmp_path / "truncated-0-0-20260101T000000.000Z.entries"
    torn.write_bytes(good[:-3])
    out = str(tmp_path / "out.jsonl")
    for args, words in ([[str(tmp_path / "nope"), "--against", node], ["nope"]],
                        [[str(torn), "--against", node, "--out", out], ["offset 0"]],
                        [[str(torn), "--against", str(tmp_path / "none")], ["none"]],
                        [[node, "--against", node], ["no kept file"]]):
        r = run("mq", "salvage", *args)
        assert r.exit_code == 1, r.output
        one_error(r.stderr, *words)
    assert not os.path.exists(out) and not os.path.exists(out + ".part")
    torn.write_bytes(good)
    # no --against: the running group, and none answers where the peers say
    r = run("mq", "salvage", str(torn), "--peers", f"n0-127.0.0.1:{free_port_base(1)}", "--timeout", "1",
            "--out", out)
    assert r.exit_code == 1
    one_error(r.stderr, "n0")
    assert not os.path.exists(out) and not os.path.exists(out + ".part")
    r = run("mq", "salvage", str(torn), "--against", node, "--peers", "n0-127.0.0.1:1")
    assert r.exit_code == 2 and "not both" in r.output
    open(out, "w").close()
    r = run("mq", "salvage", str(torn), "--against", node, "--out", out)
    assert r.exit_code == 1
    one_error(r.stderr, "already exists")


def _leaf_commands(cmd, path=()):
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from _leaf_commands(sub, (*path, name))
    else:
        yield " ".join(path)


def test_every_command_has_a_row():
    commands = set(_leaf_commands(typer.main.get_command(app).load_all()))
    assert commands - set(MATRIX) == set(), "commands without a row in MATRIX"
    assert set(MATRIX) - commands == set(), "rows of commands that are gone"
    cases = {c for cs in MATRIX.values() for c in cs}
    assert cases <= set(globals()), f"rows naming no test: {cases - set(globals())}"


# -- parse-time checks (CliRunner) -------------------------------------------------------------
@pytest.mark.parametrize("args", [["append", "-d", "x"], ["get", "-i", "0"], ["cluster", "status"],
                                  ["peer", "watermarks"], ["kv", "get", "k"]])
@pytest.mark.parametrize("peers, why", [("n0-127.0.0.1:1, n1-127.0.0.1:2", "separated by ';'"),
                                        ("n0-127.0.0.1:1;n1-127.0.0.1:1", "the same address"),
                                        ("n0-127.0.0.1", "is not ID-HOST:PORT")])
def test_bad_peers_lists(args, peers, why):
    r = run(*args, "--peers", peers)
    assert r.exit_code == 2
    one_error(r.stderr, "--peers", why)


def test_append_lines_needs_a_file():
    r = run("append", "--lines", "-d", "x", "--peers", "n0-127.0.0.1:1")
    assert r.exit_code == 2
    one_error(r.stderr, "--lines")


def test_completion_of_an_unknown_shell():
    r = run("completion", "tcsh")
    assert r.exit_code == 2
    one_error(r.stderr, "tcsh")


@pytest.mark.parametrize("extra, why", [
    (["--peers", "a-127.0.0.1:7001;b-127.0.0.1:7001"], "the same address"),
    (["--peers", "a-127.0.0.1:7001, b-127.0.0.1:7002"], "separated by ';'"),
    (["--peers", "a-127.0.0.1:7001;b-127.0.0.1:7002", "--disk-ratio-force", "0.5"], "must rise"),
    (["--peers", "a-127.0.0.1:7001;b-127.0.0.1:7002", "--group", ""], "must not be empty"),
])
def test_node_start_checks_members_and_ratios(tmp_path, extra, why):
    r = run("node", "start", "--id", "a", "--store-base-dir", str(tmp_path / "s"), *extra)
    assert r.exit_code == 2
    one_error(r.stderr, why)
    assert not (tmp_path / "s").exists()


def test_certs_init_checks_the_group(tmp_path):
    r = run("certs", "init", str(tmp_path / "tls"), "--members", "n0", "--group", "a b")
    assert r.exit_code == 2
    one_error(r.stderr, "--group", "spaces")
    assert not (tmp_path / "tls").exists()


def test_certs_add_needs_a_ca(tmp_path):
    r = run("certs", "add", str(tmp_path / "tls"), "--operators", "ops")
    assert r.exit_code == 1
    one_error(r.stderr, "no CA", "certs init")
    assert not (tmp_path / "tls").exists()


def test_certs_revoke_needs_what_to_revoke(tmp_path):
    d = str(tmp_path / "tls")
    assert run("certs", "init", d, "--members", "n0").exit_code == 0
    before = {p: open(os.path.join(d, p), "rb").read() for p in os.listdir(d)}
    for args, code, why in (([], 2, "--serial or --identity"), (["--serial", "zz"], 2, "not a serial number"),
                            (["--identity", "dledger://default/operator/nobody"], 1, "no certificate")):
        r = run("certs", "revoke", d, *args)
        assert r.exit_code == code, r.output
        one_error(r.stderr, why)
    r = run("certs", "revoke", str(tmp_path / "nope"), "--serial", "1F")
    assert r.exit_code == 1
    one_error(r.stderr, "nope")
    assert {p: open(os.path.join(d, p), "rb").read() for p in os.listdir(d)} == before


def test_cluster_up_empty_group(tmp_path):
    r = run("cluster", "up", "--base-dir", str(tmp_path / "c"), "--group", "")
    assert r.exit_code == 2
    one_error(r.stderr, "--group", "must not be empty")
    assert not (tmp_path / "c").exists()


def test_cluster_commands_without_a_record(tmp_path):
    for args in (["start", "n0"], ["stop", "n0"], ["down"]):
        r = run("cluster", *args, "--base-dir", str(tmp_path))
        assert r.exit_code == 1, (args, r.output)
        one_error(r.stderr, "no cluster record")
    assert tree(tmp_path) == set()


@pytest.mark.parametrize("sub", ["inspect-data", "inspect-index", "verify", "checkpoint", "snapshot", "elect",
                                 "backup"])
def test_store_commands_on_a_missing_dir(tmp_path, sub):
    r = run("store", sub, str(tmp_path / "nope"), *(["--out", str(tmp_path / "b")] if sub == "backup" else []))
    assert r.exit_code in (1, 2)
    one_error(r.stderr, "nope")
    assert not (tmp_path / "nope").exists()
    if sub == "inspect-data":
        r = run("store", "diff", str(tmp_path / "nope"), str(tmp_path / "nope2"))
        assert r.exit_code in (1, 2)
        one_error(r.stderr, "nope")


def _backed_up(tmp_path) -> tuple[str, str]:
    """A stopped member's store of 30 committed entries, and a backup of it."""
    node = str(tmp_path / "src" / "dledger-n0")
    with FileStore.open(node) as s:
        s.append_leader([b"e%d" % i for i in range(30)], 1)
        s.set_committed(29)
    backup = str(tmp_path / "b.dlbk")
    r = run("store", "backup", node, "--out", backup)
    assert r.exit_code == 0, r.output
    return node, backup


def test_backup_commands_bad_input(tmp_path):
    """A backup onto an existing file, a file of another format, a flipped byte (verify and
    restore both name its chunk), a restore onto a non-empty directory, into the old group's
    name, for an --id not in --peers: one Error line each, and nothing made."""
    node, backup = _backed_up(tmp_path)
    r = run("store", "backup", node, "--out", backup)
    assert r.exit_code == 1
    one_error(r.stderr, "exists already")
    other = tmp_path / "other.tar"
    other.write_bytes(b"ustar" + bytes(600))
    r = run("store", "backup-verify", str(other))
    assert r.exit_code == 1
    one_error(r.stderr, "not a dledgerctl backup")
    bad = bytearray(open(backup, "rb").read())
    bad[100] ^= 0x01
    flipped = tmp_path / "flipped.dlbk"
    flipped.write_bytes(bad)
    r = run("store", "backup-verify", str(flipped))
    assert r.exit_code == 1
    one_error(r.stderr, "chunk 0", "sha256")
    peers = "a-127.0.0.1:1;b-127.0.0.1:2"
    new = tmp_path / "new"
    for file, extra, code, words in ([str(flipped), [], 1, ["chunk 0", "nothing restored"]],
                                     [str(other), [], 1, ["not a dledgerctl backup"]],
                                     [backup, ["--group", "default"], 2, ["name of its own"]],
                                     [backup, ["--id", "c"], 2, ["not one of the peers"]]):
        args = ["--id", "a", *extra] if "--id" not in extra else extra
        r = run("store", "restore", file, *args, "--peers", peers, "--store-base-dir", str(new))
        assert r.exit_code == code, (file, extra, r.output)
        one_error(r.stderr, *words)
        assert not new.exists() or tree(new) == set()
    (new / "dledger-a").mkdir(parents=True)
    (new / "dledger-a" / "keep").write_bytes(b"")
    r = run("store", "restore", backup, "--id", "a", "--peers", peers, "--store-base-dir", str(new))
    assert r.exit_code == 1
    one_error(r.stderr, "not empty")
    assert tree(new) == {"dledger-a", "dledger-a/keep"}
    assert not any(name.endswith(".partial") for name in os.listdir(tmp_path))


def test_force_new_group_bad_input(tmp_path):
    """Several survivors (pointed at store elect), a running store (its lock), --peers of
    more than the survivor, another member's id: one Error line each, the store unchanged."""
    from store.layout import NodeLayout
    from store.lock import lock_node_dir, unlock_node_dir

    node, _backup = _backed_up(tmp_path)
    before = file_crcs(node)
    me = "n0-127.0.0.1:20911"
    for args, code, words in ([[node, node], 2, ["2 stores given", "store elect"]],
                              [[node, "--peers", "n0-127.0.0.1:1;n1-127.0.0.1:2"], 2, ["names 2 members"]],
                              [[node, "--peers", "n1-127.0.0.1:1"], 2, ["n0's store"]],
                              [[str(tmp_path / "nope")], 1, ["nope"]]):
        r = run("store", "force-new-group", *args, *(["--peers", me] if "--peers" not in args else []), "--yes")
        assert r.exit_code == code, (args, r.output)
        one_error(r.stderr, *words)
    layout = NodeLayout(node)
    fd = lock_node_dir(layout)
    try:
        r = run("store", "force-new-group", node, "--peers", me, "--yes")
        assert r.exit_code == 1
        one_error(r.stderr, "in use", "stop it first")
    finally:
        unlock_node_dir(layout, fd)
    assert file_crcs(node) == before
    r = run("store", "force-new-group", node, "--peers", me)
    assert r.exit_code == 0 and "Nothing changed" in r.stderr, r.output
    assert file_crcs(node) == before


@pytest.mark.parametrize("sub", ["messages", "topics", "check"])
def test_mq_commands_on_a_missing_dir(tmp_path, sub):
    r = run("mq", sub, str(tmp_path / "nope"))
    assert r.exit_code in (1, 2)
    one_error(r.stderr, "nope")


@pytest.mark.parametrize("sub", ["events", "state", "check"])
def test_controller_commands_on_a_missing_dir(tmp_path, sub):
    r = run("controller", sub, str(tmp_path / "nope"), *(["--broker-store", f"b={tmp_path}"] if sub == "check" else []))
    assert r.exit_code == 1
    one_error(r.stderr, "nope")
    assert not (tmp_path / "nope").exists()


def test_controller_elect_plan_bad_input(tmp_path):
    """A missing path, a log that is no controller's (a broker's store), a --store that is no
    store root: one Error line each, exit 1, nothing written."""
    from tests.support.controller_encode import apply_broker_id, elect_master, write_controller_log

    ctl = write_controller_log(str(tmp_path / "ctl"), [(1, apply_broker_id("c", "b", "h:1", 1, "k")),
                                                       (1, elect_master("b", 1))])
    broker = tmp_path / "broker"
    write_broker_store(str(broker), [{"topic": "T", "body": b"x"}])
    empty = tmp_path / "empty"
    empty.mkdir()
    before = tree(tmp_path)
    for args, words in (([str(tmp_path / "nope"), "--store", f"1={empty}"], ["nope"]),
                        ([ctl, "--store", f"1={tmp_path / 'gone'}"], ["gone"]),
                        ([str(broker), "--store", f"1={empty}"], ["broker"]),
                        ([ctl, "--store", f"1={empty}"], ["empty"]),
                        ([ctl, str(broker)], ["broker"])):
        r = run("controller", "elect-plan", *args)
        assert r.exit_code == 1, (args, r.output, r.stderr)
        one_error(r.stderr, *words)
        assert "Traceback" not in r.stderr
    assert tree(tmp_path) == before


def test_controller_watch_bad_input():
    """Addresses and durations that are none (exit 2), a controller that is not there and a
    port that answers no RocketMQ (exit 1): one Error line each, naming it."""
    for args, words in ((["-a", "nohost"], ["--controller", "nohost"]),
                        (["-a", "127.0.0.1:70000"], ["--controller"]),
                        (["-a", "127.0.0.1:1", "--bound", "soon"], ["--bound", "soon"]),
                        (["-a", "127.0.0.1:1", "--interval", "0"], ["--interval"]),
                        (["-a", "127.0.0.1:1", "--once", "--for", "1m"], ["--for"])):
        r = run("controller", "watch", *args)
        assert r.exit_code == 2, (args, r.output, r.stderr)
        one_error(r.stderr, *words)
    (port,) = [free_port_base(1)]
    r = run("controller", "watch", "-a", f"127.0.0.1:{port}", "--once", "--timeout", "1")
    assert r.exit_code == 1
    one_error(r.stderr, f"127.0.0.1:{port}", "no controller leader")
    with socket.socket() as srv:  # (answers every connection with an HTTP error: no RocketMQ frame)
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        srv.settimeout(5)
        import threading

        def answer():
            for _ in range(3):
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return
                with conn:
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
        t = threading.Thread(target=answer, daemon=True)
        t.start()
        r = run("controller", "watch", "-a", f"127.0.0.1:{srv.getsockname()[1]}", "--once", "--timeout", "2")
        assert r.exit_code == 1, (r.output, r.stderr)
        one_error(r.stderr, f"127.0.0.1:{srv.getsockname()[1]}")
        assert "Traceback" not in r.stderr


@pytest.mark.parametrize("sub", ["audit", "diverge", "stats", "export", "mq-topics", "mq-find", "mq-export",
                                 "mq-align"])
def test_spark_commands_on_a_missing_path(tmp_path, sub):
    extra = {"export": ["--to", str(tmp_path / "out")], "mq-export": ["--to", str(tmp_path / "out")],
             "mq-find": ["--key", "k"]}.get(sub, [])
    jvm_before = _spark_jvm()
    r = run("spark", sub, str(tmp_path / "nope"), *extra)
    assert r.exit_code in (1, 2), r.output
    one_error(r.stderr, "nope")
    assert tree(tmp_path) == set()
    if not jvm_before:  # (refused before Spark starts its JVM: spark_cmd._spark)
        assert not _spark_jvm()


def test_spark_mq_align_refuses_before_spark(tmp_path):
    """A replica no identity groups, a file that is no digest, a replica in two groups, a master
    RocketMQ would refuse: one line each, nothing written, no JVM started."""
    write_broker_store(str(tmp_path / "src"), [{"topic": "T", "body": b"x"}])
    ms = tmp_path / "ms"
    assert run("mq", "migrate", str(tmp_path / "src"), str(ms)).exit_code == 0
    (ms / "epochFileCheckpoint").write_text("1\n0\n5-0\n")
    (tmp_path / "junk.json").write_text("[]")
    before, jvm_before = tree(tmp_path), _spark_jvm()
    for args, words in (([str(ms)], ["no brokerIdentity", "--group"]),
                        ([str(tmp_path / "junk.json")], ["junk.json", "not a store root nor a digest"]),
                        (["--group", f"a={ms}", "--group", f"b={ms}"], ["groups a and b"]),
                        (["--group", f"a={ms}", "--master-epoch", "1"], ["would not become master at epoch 1"])):
        r = run("spark", "mq-align", *args)
        assert r.exit_code == 1, (args, r.output)
        one_error(r.stderr, *words)
        assert "Traceback" not in r.stderr
    for args in ([], ["--group", "a"], ["--group", "a="]):
        assert run("spark", "mq-align", *args).exit_code == 2
    assert tree(tmp_path) == before
    if not jvm_before:
        assert not _spark_jvm()


def _spark_jvm() -> bool:
    """Whether this process started Spark's JVM (it stays up after the session stops)."""
    import sys

    pyspark = sys.modules.get("pyspark")
    return pyspark is not None and pyspark.SparkContext._gateway is not None


# -- store files ----------------------------------------------------------------------------------
def _store(tmp_path, count=40):
    from tests.support.stores import write_project_store

    node = tmp_path / "dledger-n0"
    write_project_store(str(node), count=count)
    return node


def test_refused_repairs_leave_no_lock_file(tmp_path):
    node = _store(tmp_path)
    before = tree(node)
    r = run("store", "truncate", str(node), "--from-index", "99999", "--yes")
    assert r.exit_code == 1
    one_error(r.stderr, "nothing to cut")
    r = run("store", "purge", str(node), "--before-index", "10", "--dry-run")
    assert r.exit_code in (0, 1), r.output
    assert tree(node) == before and "lock" not in before  # (no lock file, nothing else)


def test_verify_csv_has_a_header_and_a_verdict(tmp_path):
    node = _store(tmp_path)
    r = run("store", "verify", str(node), "-f", "csv")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == "severity,code,file,offset,index,message"
    assert lines[-1].startswith("summary,ok,")


def test_inspect_past_the_log_says_where_it_is(tmp_path):
    node = _store(tmp_path, count=40)
    for sub in ("inspect-data", "inspect-index"):
        r = run("store", sub, str(node), "-i", "5000", "-f", "csv")
        assert r.exit_code == 0, r.output
        assert r.stdout.splitlines()[0].startswith("file,") or "index" in r.stdout.splitlines()[0]
        assert len(r.stdout.splitlines()) == 1  # the header alone
        assert "this log holds entries 0 to 39" in r.stderr


# -- processes -------------------------------------------------------------------------------------
def _hold(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def test_node_start_on_a_taken_port_leaves_nothing(tmp_path):
    port = free_port_base(1)
    with _hold(port):
        r = cli("node", "start", "--id", "a", "--peers", f"a-127.0.0.1:{port}", "--store-base-dir",
                str(tmp_path / "s"))
    assert r.returncode == 1
    one_error(r.stderr, f"127.0.0.1:{port}", "Address already in use")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("taken", [0, 1])
def test_cluster_up_on_a_taken_port_leaves_nothing(tmp_path, taken):
    port = free_port_base(3)
    base = str(tmp_path / "c")
    with _hold(port + taken):
        r = cli("cluster", "up", "--base-dir", base, "--port-base", str(port), "--wait", "20")
    assert r.returncode == 1
    one_error(r.stderr, f"127.0.0.1:{port + taken} (n{taken})", "Address already in use")
    assert not os.path.exists(base)
    assert processes_naming(base) == []


def test_cluster_up_whose_members_exit_is_undone(tmp_path):
    base = str(tmp_path / "c")
    r = cli("cluster", "up", "--base-dir", base, "--port-base", str(free_port_base(3)), "--wait", "20",
            "--state-machine", "nosuchmodule:Machine")
    assert r.returncode == 1
    one_error(r.stderr, "exited at start", "cannot load state machine")
    assert not os.path.exists(base)
    assert processes_naming(base) == []


@pytest.fixture(scope="module")
def shared(module_group):
    """One 3-member cluster (no state machine) for the rows that only read or are refused:
    its base directory (stopped after the module's last test)."""
    return module_group(3)


def test_cluster_up_names_the_option_that_differs(shared):
    r = cli("cluster", "up", "--base-dir", shared, "--nodes", "3", "--heartbeat-interval", "300")
    assert r.returncode == 2
    line = one_error(r.stderr, "--heartbeat-interval (recorded default, given 300)")
    assert "--port-base" not in line and "--nodes" not in line  # (as recorded, or not given)


def test_status_tells_a_stranger_from_a_member(shared, tmp_path):
    """A record whose members are gone, at addresses where other processes (another
    cluster's members) answer: not shown as up."""
    rec = recorded(shared)
    for n in rec["nodes"]:
        n["pid"] = 999999999  # (no such process)
    other = tmp_path / "other"
    other.mkdir()
    (other / "cluster.json").write_text(json.dumps(rec))
    r = cli("cluster", "status", "--base-dir", str(other), "--format", "json")
    assert r.returncode == 1
    rows = json.loads(r.stdout)
    assert {x["state"] for x in rows} == {"stranger"}
    assert all("not running" in x["error"] for x in rows), rows


def test_status_of_another_group_is_not_up(shared):
    r = cli("cluster", "status", "--base-dir", shared, "--group", "nosuchgroup", "--format", "json")
    assert r.returncode == 1
    rows = json.loads(r.stdout)
    assert {x["state"] for x in rows} == {"refused"} and all("UNKNOWN_GROUP" in x["error"] for x in rows)


def _end_index(base: str) -> int:
    rows = json.loads(cli("cluster", "status", "--base-dir", base, "--format", "json").stdout)
    return max(x["end_index"] for x in rows if x["state"] == "up")


def test_cluster_backup_bad_input(shared, tmp_path):
    """No cluster to ask, another group's name, an --out that exists: one Error line each, and
    no backup file (nor its .partial) left behind; the existing file is left as it was."""
    out = tmp_path / "b.dlbk"
    r = run("cluster", "backup", "--out", str(out), "--base-dir", str(tmp_path / "none"))
    assert r.exit_code == 2
    one_error(r.stderr, "no cluster recorded")
    r = cli("cluster", "backup", "--out", str(out), "--base-dir", shared, "--group", "nosuchgroup", "--timeout", "2")
    assert r.returncode == 1
    one_error(r.stderr, "nosuchgroup")
    assert tree(tmp_path) == set()
    out.write_bytes(b"keep")
    r = cli("cluster", "backup", "--out", str(out), "--base-dir", shared)
    assert r.returncode == 1
    one_error(r.stderr, "exists already")
    assert out.read_bytes() == b"keep" and tree(tmp_path) == {"b.dlbk"}


def test_get_follow_renders_empty_and_control_bodies(shared):
    first = _end_index(shared) + 1
    assert cli("append", "--base-dir", shared, "-d", "", "-d", "a\x1b[31mred\tb").returncode == 0
    for extra in ([], ["--body", "none"]):
        for i, c in ((0, 1), (first, 2)):  # (index 0: the leader's empty no-op entry)
            r = cli("get", "--base-dir", shared, "--follow", "-i", str(i), "-c", str(c), *extra, timeout=30)
            assert r.returncode == 0, r.stderr
            lines = r.stdout.splitlines()
            assert len(lines) == 2 + c and "\x1b" not in r.stdout, r.stdout
            header = lines[0].split()
            assert header[:2] == ["index", "term"]
            widths = [len(w) for w in lines[1].split("  ")]
            assert len(widths) == len(header)  # one dash run per column: the columns line up
            if not extra and i == first:
                assert lines[-1].endswith("a\\x1b[31mred\\tb"), lines[-1]


def test_kv_put_without_a_state_machine_is_refused(shared):
    end = json.loads(cli("cluster", "status", "--base-dir", shared, "--format", "json").stdout)[0]["end_index"]
    r = cli("kv", "put", "--base-dir", shared, "k", "v")
    assert r.returncode == 1
    one_error(r.stderr, "no state machine")
    after = json.loads(cli("cluster", "status", "--base-dir", shared, "--format", "json").stdout)[0]["end_index"]
    assert after == end  # nothing was appended


def test_peer_truncate_past_the_end_fails(shared):
    rows = json.loads(cli("cluster", "status", "--base-dir", shared, "--format", "json").stdout)
    follower = next(x["id"] for x in rows if x["role"] == "follower")
    r = cli("peer", "truncate", "--base-dir", shared, "--peer", follower, "--from-index", "99999", "--yes")
    assert r.returncode == 1
    one_error(r.stderr, "nothing to cut", follower)


def test_peer_commands_name_members(shared):
    for args in (["compare", "--peer", "n9"], ["transfer-leader", "--to", "n9"]):
        r = cli("peer", *args, "--base-dir", shared)
        assert r.returncode in (1, 2)
        one_error(r.stderr, "n9")


def test_refused_peer_add_leaves_the_record_alone(shared):
    before = recorded(shared)
    taken = before["nodes"][1]["address"]
    files = tree(shared)
    r = cli("peer", "add", "--base-dir", shared, "--id", "n7", "--address", taken)
    assert r.returncode == 1
    one_error(r.stderr, taken, "n1")
    r = cli("peer", "replace", "--base-dir", shared, "--id", "n2", "--with", f"n7={taken}")
    assert r.returncode == 1
    one_error(r.stderr, taken, "n1")
    assert recorded(shared) == before
    # (the running members write their logs and their checkpoints come and go: a new member's
    # directory would show, the members' own stores are left out)
    members = {f for f in files if f.startswith("dledger-") and os.sep not in f}
    assert {f for f in tree(shared) - files if not f.startswith("logs/") and f.split(os.sep)[0] not in members} == set()
    assert cli("cluster", "status", "--base-dir", shared).returncode == 0


def test_remove_right_after_a_stop_is_refused(group):
    base = group(3)
    rows = json.loads(cli("cluster", "status", "--base-dir", base, "--format", "json").stdout)
    leader = next(x["id"] for x in rows if x["role"] == "leader")
    a, b = [x["id"] for x in rows if x["id"] != leader]
    assert cli("cluster", "stop", "--base-dir", base, a).returncode == 0
    r = cli("peer", "remove", "--base-dir", base, "--id", b, "--timeout", "2")
    assert r.returncode == 1
    one_error(r.stderr, "no majority")
    marks = json.loads(cli("peer", "watermarks", "--base-dir", base, "--format", "json").stdout)
    assert {x["peer"] for x in marks} == {leader, a, b}  # (b is still a member)


def test_mq_replica_commands_on_what_is_no_replica(tmp_path):
    """mq epochs, digest and align read controller-mode (or master-slave) store roots: a missing
    path, a DLedger-mode root and a digest file that is none are one line each, nothing written."""
    root = tmp_path / "store"
    write_broker_store(str(root), [{"topic": "T", "body": b"x"}])
    before = sorted(os.listdir(root))
    for cmd, twice in ((["mq", "epochs"], 1), (["mq", "digest"], 1), (["mq", "align"], 2)):
        r = run(*cmd, *[str(tmp_path / "nope")] * twice)
        assert r.exit_code == 1
        one_error(r.stderr, "nope")
        r = run(*cmd, *[str(root)] * twice)
        assert r.exit_code == 1 and r.stdout == ""
        one_error(r.stderr, "it reads a controller-mode")
    (tmp_path / "d.json").write_text('{"format": "dledgerctl-commitlog-digest/1"}')
    r = run("mq", "align", str(tmp_path / "d.json"), str(tmp_path / "d.json"))
    assert r.exit_code == 1
    one_error(r.stderr, "d.json", "field missing")
    r = run("mq", "digest", str(root), "--upto", "-1")
    assert r.exit_code == 2
    assert sorted(os.listdir(root)) == before


def test_mq_consumers_without_offsets(tmp_path):
    r = run("mq", "consumers", str(tmp_path / "nope"))
    assert r.exit_code == 1
    one_error(r.stderr, "nope")
    root = tmp_path / "store"
    write_broker_store(str(root), [{"topic": "T", "body": b"x"}])
    r = run("mq", "consumers", str(root))
    assert r.exit_code == 1 and r.stdout == ""
    one_error(r.stderr, "consumerOffset.json", "nor consumerOffset.json.bak")
    os.makedirs(root / "config")
    (root / "config" / "consumerOffset.json").write_bytes(b"\xff\xfe{")
    r = run("mq", "consumers", str(root))
    assert r.exit_code == 1
    one_error(r.stderr, "consumerOffset.json", "not UTF-8")
    assert sorted(os.listdir(root / "config")) == ["consumerOffset.json"]


def test_mq_rebuild_of_a_missing_dir(tmp_path):
    r = run("mq", "rebuild", str(tmp_path / "nope"))
    assert r.exit_code == 1
    one_error(r.stderr, "nope")
    assert sorted(os.listdir(tmp_path)) == []


def test_mq_rebuild_of_a_log_that_holds_no_messages(tmp_path):
    """A node's log of plain entries (not RocketMQ messages): refused, nothing written beside
    it; a directory with no broker's files beside the log is refused before it is read."""
    node = tmp_path / "dledger-n0"
    s = FileStore.open(str(node))
    s.append_leader([b"not a message"], 1)
    s.set_committed(s.end_index)
    s.close()
    before = file_crcs(tmp_path)
    r = run("mq", "rebuild", str(tmp_path))
    assert r.exit_code == 1
    one_error(r.stderr, "does not look like a broker's store root")
    os.makedirs(tmp_path / "config")
    before = file_crcs(tmp_path)
    r = run("mq", "rebuild", str(tmp_path))
    assert r.exit_code == 1
    one_error(r.stderr, "not-a-message", "the store was not changed")
    assert file_crcs(tmp_path) == before and sorted(os.listdir(tmp_path)) == ["config", "dledger-n0"]


def test_mq_migrate_from_a_missing_dir(tmp_path):
    r = run("mq", "migrate", str(tmp_path / "nope"), str(tmp_path / "dest"))
    assert r.exit_code == 1
    one_error(r.stderr, "nope")
    assert sorted(os.listdir(tmp_path)) == []
