"""The `store` command group through the real CLI (typer's CliRunner)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil

import pytest

from store.filestore import FileStore
from store.format import HEADER_SIZE
from store.sample import write_sample_store
from tests.support.commands import invoke
from tests.support.stores import FIXTURES, copy_fixture


def manifest(name="leader"):
    lines = open(os.path.join(FIXTURES, name, "manifest.txt")).read().split("\n")
    rows = [l.split() for l in lines[1:] if l.strip()]
    return lines[0].split(), [(int(i), int(t), int(p), int(s), h) for i, t, p, s, h in rows]


def tree_digest(path):
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for n in sorted(files):
            h.update(n.encode())
            h.update(open(os.path.join(root, n), "rb").read())
    return h.hexdigest()


@pytest.fixture
def sample(tmp_path):
    node = tmp_path / "base" / "dledger-n0"
    write_sample_store(str(node), entries=300, terms=3, data_file_size=16384, index_file_size=1024)
    return node


def test_inspect_data_json_matches_manifest(tmp_path):
    node = copy_fixture(tmp_path)
    r = invoke("store", "inspect-data", node, "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    _, expected = manifest()
    assert [(x["index"], x["term"], x["pos"], x["size"]) for x in rows] == [e[:4] for e in expected]
    assert {x["crc"] for x in rows} == {"none"}
    assert all(x["magic"] == 1 and x["kind"] == "entry" for x in rows)


def test_inspect_data_selectors_and_bodies(tmp_path):
    node = copy_fixture(tmp_path)
    _, expected = manifest()
    r = invoke("store", "inspect-data", node, "--index", 5, "--body", "hex", "-f", "json")
    (row,) = json.loads(r.stdout)
    assert (row["index"], row["pos"], row["size"]) == expected[5][:3][:1] + expected[5][2:4]
    assert hashlib.sha256(bytes.fromhex(row["body"])).hexdigest() == expected[5][4]
    r = invoke("store", "inspect-data", node, "--pos", expected[17][2], "-f", "json")
    assert [x["index"] for x in json.loads(r.stdout)] == [17]
    r = invoke("store", "inspect-data", node, "--from-index", 590, "--to-index", 599, "-f", "jsonl")
    assert [json.loads(l)["index"] for l in r.stdout.splitlines()] == list(range(590, 600))
    r = invoke("store", "inspect-data", node, "--from-index", 40, "--to-index", 41, "--body", "base64", "-f", "csv")
    got = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [g["index"] for g in got] == ["40", "41"] and "body" in got[0]


def test_inspect_data_all_records_shows_blank_and_files(tmp_path):
    node = copy_fixture(tmp_path)
    r = invoke("store", "inspect-data", node, "--all-records", "-f", "json")
    rows = json.loads(r.stdout)
    kinds = [x["kind"] for x in rows]
    assert kinds.count("file") == 13
    assert kinds.count("blank") == 12  # every full file ends with BLANK padding
    blank = next(x for x in rows if x["kind"] == "blank")
    assert blank["magic"] == -1 and blank["pos"] + blank["size"] == 65536
    assert kinds[-1] == "end"


def test_inspect_index(tmp_path):
    node = copy_fixture(tmp_path)
    _, expected = manifest()
    r = invoke("store", "inspect-index", node, "--from-index", 10, "--to-index", 12, "-f", "json")
    rows = json.loads(r.stdout)
    assert [(x["slot"], x["index"], x["pos"], x["size"], x["term"]) for x in rows] == [
        (i, i, expected[i][2], expected[i][3], expected[i][1]) for i in (10, 11, 12)]
    r = invoke("store", "inspect-index", node, "-f", "json")
    assert len(json.loads(r.stdout)) == 600


def test_verify_clean_and_damaged(sample):
    r = invoke("store", "verify", sample, "-f", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["summary"]["verdict"] == "ok" and out["summary"]["entries"] == 300
    assert out["summary"]["crc_checked"] == 300 and out["problems"] == []
    with FileStore.open(str(sample), read_only=True) as s:
        pos, _ = s.locate(125)
        fsize = s.data.file_size
    path = sample / "data" / f"{pos - pos % fsize:020d}"
    with open(path, "r+b") as fh:
        fh.seek(pos % fsize + HEADER_SIZE)
        b = fh.read(1)
        fh.seek(pos % fsize + HEADER_SIZE)
        fh.write(bytes([b[0] ^ 1]))
    r = invoke("store", "verify", sample, "-f", "json")
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert out["summary"]["verdict"] == "damaged"
    (p,) = out["problems"]
    assert (p["code"], p["index"], p["file"], p["offset"]) == ("bad-body-crc", 125, f"data/{path.name}", pos % fsize)


def test_checkpoint_agrees_then_flags(tmp_path):
    node = copy_fixture(tmp_path)
    r = invoke("store", "checkpoint", node, "-f", "json")
    assert r.exit_code == 0, r.output
    rows = {(x["source"], x["key"]): x for x in json.loads(r.stdout)}
    assert rows[("checkpoint", "committedIndex")]["value"] == 592
    assert rows[("checkpoint", "endIndex")]["value"] == 599
    assert rows[("currterm", "currTerm")]["value"] == 6
    (node / "checkpoint").write_text("committedIndex=700\nendIndex=700\n")
    r = invoke("store", "checkpoint", node, "-f", "json")
    assert r.exit_code == 1
    bad = [x for x in json.loads(r.stdout) if x["status"] != "ok"]
    assert {x["key"] for x in bad} == {"endIndex", "committedIndex"}


def test_diff_identical_and_diverged(tmp_path, sample):
    other = tmp_path / "b" / "dledger-n1"
    shutil.copytree(sample, other)
    r = invoke("store", "diff", sample, other, "-f", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["identical"] is True
    with FileStore.open(str(other)) as s:
        s.truncate(250, force=True)
        s.append_leader([b"other-%d" % i for i in range(10)], term=3)
    r = invoke("store", "diff", sample, other, "-f", "json")
    assert r.exit_code == 1
    d = json.loads(r.stdout)
    assert (d["last_common_index"], d["first_diff_index"]) == (249, 250)
    assert d["a_term"] == 3 and d["b_term"] == 3 and d["field"] in ("size", "body_crc", "body")


def test_truncate_refuses_committed_and_changes_nothing(sample):
    before = tree_digest(sample)
    r = invoke("store", "truncate", sample, "--from-index", 100, "--yes")
    assert r.exit_code == 1
    assert "committed" in r.stderr and r.stderr.startswith("Error: ")
    assert tree_digest(sample) == before
    r = invoke("store", "truncate", sample, "--from-index", 296, input="n\n")
    assert r.exit_code == 1 and tree_digest(sample) == before


def test_truncate_cuts_keeps_backup_and_recovers_clean(sample):
    with FileStore.open(str(sample), read_only=True) as s:
        assert s.committed_index == 292
        cut = b"".join(s.get_bytes(i) for i in range(295, 300))
    r = invoke("store", "truncate", sample, "--from-index", 295, "--yes", "-f", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert (out["entries_cut"], out["end_index"], out["committed_index"]) == (5, 294, 292)
    assert open(out["backup"], "rb").read() == cut
    assert invoke("store", "verify", sample).exit_code == 0
    with FileStore.open(str(sample)) as s:
        assert s.end_index == 294 and not s.recovery.changed


@pytest.mark.parametrize("args", [
    ["store", "verify", "/nonexistent/dir"],
    ["store", "inspect-data", "/nonexistent/dir"],
    ["store", "checkpoint", "/nonexistent/dir"],
])
def test_missing_directory_is_one_error_line(args):
    r = invoke(*args)
    assert r.exit_code == 1
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: ") and "no such directory" in r.stderr


def test_not_a_store(tmp_path):
    (tmp_path / "file.txt").write_text("hello")
    r = invoke("store", "verify", tmp_path / "file.txt")
    assert r.exit_code == 1 and r.stderr.startswith("Error: ") and "not a directory" in r.stderr
    r = invoke("store", "inspect-data", tmp_path)
    assert r.exit_code == 1 and "not a node directory" in r.stderr


def test_base_dir_with_self_id(tmp_path, sample):
    base = sample.parent
    r = invoke("store", "verify", base, "-f", "json")
    assert r.exit_code == 0
    shutil.copytree(sample, base / "dledger-n1")
    r = invoke("store", "verify", base)
    assert r.exit_code == 1 and "several node directories" in r.stderr
    r = invoke("store", "verify", base, "--self-id", "n1", "-f", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["summary"]["node_dir"].endswith("dledger-n1")


@pytest.mark.parametrize("args", [
    ["store", "verify", ".", "--format", "xml"],
    ["store", "inspect-data", ".", "--body", "rot13"],
    ["store", "inspect-data", ".", "--index", "-3"],
    ["store", "truncate", "."],
    ["store", "verify", ".", "--data-file-size", "lots"],
])
def test_bad_options_exit_2(args):
    r = invoke(*args)
    assert r.exit_code == 2, r.output


def test_checkpoint_warnings_exit_0_mismatches_exit_1(sample):
    from store.metafiles import write_checkpoint

    node = str(sample)
    write_checkpoint(node, 250, 240)  # written before the last appends: stale, not wrong
    r = invoke("store", "checkpoint", node, "--format", "json")
    assert r.exit_code == 0, r.output
    rows = {(x["source"], x["key"]): x for x in json.loads(r.stdout)}
    assert rows[("checkpoint", "endIndex")]["status"] == "warning"
    assert rows[("checkpoint", "committedIndex")]["status"] == "ok"
    write_checkpoint(node, 299, 400)  # committed entries the data does not have
    r = invoke("store", "checkpoint", node, "--format", "json")
    assert r.exit_code == 1
    rows = {(x["source"], x["key"]): x for x in json.loads(r.stdout)}
    assert rows[("checkpoint", "committedIndex")]["status"] == "mismatch"
    os.unlink(os.path.join(node, "checkpoint"))
    os.unlink(os.path.join(node, "checkpoint.bak"))
    r = invoke("store", "checkpoint", node, "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["status"] == "warning"


def test_diff_empty_logs_and_self_ids(tmp_path, sample):
    base = tmp_path / "two"
    for n in ("n1", "n2"):
        FileStore.open(str(base / f"dledger-{n}"), data_file_size=16384, index_file_size=1024).close()
    r = invoke("store", "diff", base, base, "--self-id-a", "n1", "--self-id-b", "n2", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["identical"] is True and out["field"] is None and out["first_diff_index"] is None
    r = invoke("store", "diff", base, sample, "--self-id-a", "n1", "--format", "json")
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert (out["first_diff_index"], out["field"]) == (0, "missing-on-a")
    r = invoke("store", "diff", sample, sample, "--data-file-size", "4096")
    assert r.exit_code == 1 and r.stderr.startswith("Error: ") and "16384" in r.stderr


def store_digest(node):
    """data/, index/ and the checkpoint: what a cut would change (the lock file aside)."""
    return tree_digest(node / "data"), tree_digest(node / "index"), (node / "checkpoint").read_bytes()


def test_truncate_unconfirmed_at_end_of_input_cuts_nothing(sample):
    before = store_digest(sample)
    r = invoke("store", "truncate", sample, "--from-index", 299, input="")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines()[-1] == "Error: not confirmed; nothing was cut (use --yes to skip the question)"
    assert "(1 entry, " in r.stderr  # one entry, not "1 entries"
    assert store_digest(sample) == before
    assert not [n for n in os.listdir(sample) if n.startswith("truncated-")]


def test_truncate_of_a_running_node_is_refused_before_anything_is_written(sample):
    with FileStore.open(str(sample)) as live:
        before = store_digest(sample)
        r = invoke("store", "truncate", sample, "--from-index", 299, "--yes")
        assert store_digest(sample) == before
        assert live.end_index == 299
    assert r.exit_code == 1 and "in use by another process" in r.stderr
    assert not [n for n in os.listdir(sample) if n.startswith("truncated-")]


def test_body_is_a_choice():
    r = invoke("store", "inspect-data", ".", "--body", "rot13")
    assert r.exit_code == 2 and "rot13" in r.stderr and "base64" in r.stderr
