"""The stores written by the real DLedger 0.2.7 read exactly as DLedger itself printed them
(manifest.txt), whether opened read-only or writable, and opening them changes no byte."""

from __future__ import annotations

import os

import pytest

from tests.support.stores import (
    FIXTURE_NAMES,
    FIXTURE_STORES,
    all_digests,
    describe,
    file_digests,
    fixture_path,
    parse_header,
    parse_index_record,
    read_logical,
    read_manifest,
)
from store.errors import IndexOutOfRange, StoreUsageError
from store.filestore import FileStore
from store.metafiles import read_checkpoint, read_currterm

# What the fixtures' README and files say; written out so a wrong reader cannot agree with itself.
EXPECTED_HEAD = {
    "leader": "END 599 6 BEGIN 0 COMMITTED 592",
    "follower-truncated": "END 290 3 BEGIN 0 COMMITTED 287",
}
CHECKPOINTS = {"leader": (599, 592), "follower-truncated": (290, 287)}
CURRTERMS = {"leader": (6, 5), "follower-truncated": (3, 2)}  # currterm, currterm.bak
END_POS = {"leader": 821144 + 2035, "follower-truncated": 323304 + 411}
DATA_FILES = {"leader": 13, "follower-truncated": 10}
INDEX_FILES = {"leader": 5, "follower-truncated": 5}


def test_manifests_are_what_the_readme_says():
    for name in FIXTURE_NAMES:
        lines = read_manifest(name)
        assert lines[0] == EXPECTED_HEAD[name]
        assert len(lines) == 1 + CHECKPOINTS[name][0] + 1
        assert [int(line.split()[0]) for line in lines[1:]] == list(range(CHECKPOINTS[name][0] + 1))


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_read_only_open_of_the_original_gives_the_manifest(name):
    # The originals are on a read-only tree: a read-only open must not even try to write.
    path = fixture_path(name)
    before = all_digests(path)
    with FileStore.open(path, read_only=True) as s:
        assert describe(s) == read_manifest(name)
        assert s.recovery is None
        assert s.plan.end_pos == s.write_pos == END_POS[name]
        assert (s.data.file_size, s.index.file_size) == FIXTURE_STORES[name][1:]
        assert s.plan.problems == []
    assert all_digests(path) == before


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_open_copy_gives_the_manifest_and_changes_no_data_byte(fixture_copy, name, read_only):
    node = fixture_copy(name)
    before = file_digests(node)
    assert len([p for p in before if p.startswith("data")]) == DATA_FILES[name]
    assert len([p for p in before if p.startswith("index")]) == INDEX_FILES[name]
    with FileStore.open(str(node), read_only=read_only) as s:
        assert describe(s) == read_manifest(name)
        if not read_only:
            rep = s.recovery
            assert not rep.changed
            assert (rep.begin_index, rep.end_index, rep.end_pos) == (0, CHECKPOINTS[name][0], END_POS[name])
            assert (rep.cut_bytes, rep.removed_data_files, rep.removed_index_files) == (0, [], [])
            assert (rep.index_records_rebuilt, rep.restored_file_size) == (0, [])
        assert file_digests(node) == before  # after recovery, before close
    assert file_digests(node) == before
    # A writable close rewrites the checkpoint with the same values DLedger wrote.
    with open(node / "checkpoint") as fh:
        assert fh.read() == "committedIndex=%d\nendIndex=%d\n" % CHECKPOINTS[name][::-1]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_entries_carry_dledger_027_header_fields(name):
    """Every entry: magic 1, channel 0, both CRCs 0 (DLedger 0.2.7 never computes them), and
    the index record agrees with the entry header; checked with an independent parser."""
    path = fixture_path(name)
    _node, dsize, isize = FIXTURE_STORES[name]
    rows = [line.split() for line in read_manifest(name)[1:]]
    for index, term, pos, size, _sha in rows:
        index, term, pos, size = int(index), int(term), int(pos), int(size)
        h = parse_header(read_logical(path, "data", pos, 48, dsize))
        assert h == {"magic": 1, "size": size, "index": index, "term": term, "pos": pos, "channel": 0,
                     "chain_crc": 0, "body_crc": 0, "body_size": size - 48}
        rec = parse_index_record(read_logical(path, "index", index * 32, 32, isize))
        assert rec == (1, pos, size, index, term)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_store_api_on_fixture(name):
    with FileStore.open(fixture_path(name), read_only=True) as s:
        e = s.get(1)
        assert (e.index, e.magic, e.body_crc, e.chain_crc, e.channel) == (1, 1, 0, 0, 0)
        assert s.get_bytes(1)[48:] == e.body
        assert len(s.get_raw(0, 3, 1 << 20)) == sum(s.get(i).size for i in range(3))
        with pytest.raises(IndexOutOfRange):
            s.get(s.end_index + 1)
        with pytest.raises(StoreUsageError):
            s.append(b"x", term=9)  # read-only
        with pytest.raises(StoreUsageError):
            s.truncate(5)
    if name == "leader":
        with FileStore.open(fixture_path(name), read_only=True) as s:
            assert [s.term_of(i) for i in (0, 200, 201, 401, 402, 599)] == [1, 1, 4, 4, 6, 6]
            assert [s.first_index_of_term(i) for i in (0, 200, 201, 401, 402, 599)] == [0, 0, 201, 201, 402, 402]
            assert (s.get(201).pos, s.get(402).pos) == (266148, 544417)
    else:
        with FileStore.open(fixture_path(name), read_only=True) as s:
            assert [s.term_of(i) for i in (149, 150, 249, 250, 290)] == [1, 2, 2, 3, 3]
            assert [s.first_index_of_term(i) for i in (149, 150, 249, 250, 290)] == [0, 150, 150, 250, 250]
            assert (s.get(250).pos, s.get(250).size, s.get(251).pos) == (276614, 104, 276718)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_configured_file_size_must_match_the_files(fixture_copy, name):
    node = fixture_copy(name)
    _n, dsize, isize = FIXTURE_STORES[name]
    before = all_digests(node)
    with pytest.raises(StoreUsageError):
        FileStore.open(str(node), data_file_size=dsize * 2)
    with pytest.raises(StoreUsageError):
        FileStore.open(str(node), read_only=True, index_file_size=isize * 2)
    with FileStore.open(str(node), data_file_size=dsize, index_file_size=isize, read_only=True) as s:
        assert s.end_index == CHECKPOINTS[name][0]
    assert all_digests(node) == before


# --- checkpoint and currterm ----------------------------------------------------------------

@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_metafile_readers_read_the_fixture_values(name):
    path = fixture_path(name)
    cp = read_checkpoint(path)
    assert (cp.end_index, cp.committed_index) == CHECKPOINTS[name]
    assert cp.source == os.path.join(path, "checkpoint") and cp.problem is None
    ts = read_currterm(path)
    assert (ts.term, ts.vote_for) == (CURRTERMS[name][0], None)
    assert ts.source == os.path.join(path, "currterm") and ts.problem is None


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_metafile_readers_fall_back_to_bak(fixture_copy, name):
    node = fixture_copy(name)
    os.unlink(node / "checkpoint")
    os.unlink(node / "currterm")
    cp = read_checkpoint(str(node))
    assert (cp.end_index, cp.committed_index) == CHECKPOINTS[name]
    assert cp.source == os.path.join(str(node), "checkpoint.bak")
    assert cp.problem == "checkpoint is missing"
    ts = read_currterm(str(node))
    assert (ts.term, ts.vote_for) == (CURRTERMS[name][1], None)  # the .bak holds the previous term
    assert ts.source == os.path.join(str(node), "currterm.bak")
    assert ts.problem == "currterm is missing"
    # The store takes the committed index from the .bak too.
    with FileStore.open(str(node), read_only=True) as s:
        assert s.committed_index == CHECKPOINTS[name][1]
    # With neither file: nothing known, nothing raised.
    os.unlink(node / "checkpoint.bak")
    os.unlink(node / "currterm.bak")
    cp = read_checkpoint(str(node))
    assert (cp.end_index, cp.committed_index, cp.source) == (None, None, None)
    ts = read_currterm(str(node))
    assert (ts.term, ts.vote_for, ts.source) == (0, None, None)
    with FileStore.open(str(node), read_only=True) as s:
        assert (s.end_index, s.committed_index) == (CHECKPOINTS[name][0], -1)


def test_metafile_reader_parses_java_properties_forms(tmp_path):
    (tmp_path / "checkpoint").write_text("# written by hand\n! another comment\n\ncommittedIndex : 12\n endIndex=20 \n")
    (tmp_path / "currterm").write_text("voteLeader=n2\ncurrTerm=7\n")
    cp = read_checkpoint(str(tmp_path))
    assert (cp.end_index, cp.committed_index) == (20, 12)
    ts = read_currterm(str(tmp_path))
    assert (ts.term, ts.vote_for) == (7, "n2")


def test_checkpoint_written_by_the_store_keeps_previous_as_bak(fixture_copy):
    node = fixture_copy("leader")
    with FileStore.open(str(node)) as s:
        s.append(b"one more", term=6)
        s.set_committed(600)
    with open(node / "checkpoint") as fh:
        assert fh.read() == "committedIndex=600\nendIndex=600\n"
    with open(node / "checkpoint.bak") as fh:
        assert fh.read() == "committedIndex=592\nendIndex=599\n"
    assert not os.path.exists(node / "checkpoint.tmp")
    assert (read_checkpoint(str(node)).end_index, read_checkpoint(str(node)).committed_index) == (600, 600)


def test_metafile_reader_falls_back_to_bak_when_the_main_file_is_unreadable(fixture_copy):
    node = fixture_copy("leader")
    (node / "checkpoint").write_bytes(b"committedIndex=\xff\xfe\n")  # not UTF-8
    cp = read_checkpoint(str(node))
    assert (cp.end_index, cp.committed_index) == CHECKPOINTS["leader"]
    assert cp.source == os.path.join(str(node), "checkpoint.bak")
    assert cp.problem.startswith("checkpoint is unreadable")


def test_checkpoint_with_a_non_integer(fixture_copy):
    from store.errors import StoreCorruptError

    node = fixture_copy("leader")
    (node / "checkpoint").write_text("committedIndex=abc\nendIndex=599\n")
    # the .bak holds valid values: it is used, and the problem is named
    cp = read_checkpoint(str(node))
    assert cp.source == os.path.join(str(node), "checkpoint.bak")
    assert "'abc' is not an integer" in cp.problem
    os.unlink(node / "checkpoint.bak")
    with pytest.raises(StoreCorruptError, match="not an integer"):
        read_checkpoint(str(node))
    # the committed index is only an optimisation: stores still open, with none known
    with FileStore.open(str(node), read_only=True) as s:
        assert s.committed_index == -1 and s.end_index == CHECKPOINTS["leader"][0]
        assert "not an integer" in s.checkpoint_problem
    with FileStore.open(str(node)) as s:
        assert s.committed_index == -1
        s.set_committed(10)
    assert (read_checkpoint(str(node)).committed_index, read_checkpoint(str(node)).end_index) == (10, 599)
