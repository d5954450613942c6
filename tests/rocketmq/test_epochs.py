"""store/rocketmq/epochs.py: a controller-mode broker's epoch file as RocketMQ 5.3.3 reads it
(common/.../CheckpointFile, store/.../ha/autoswitch/EpochFileCache), and the handshake rule
over two replicas' epochs. The consistent-point cases are EpochFileCacheTest's (rocketmq-all-
5.3.3, store/src/test/.../autoswitch/EpochFileCacheTest.java), restated as facts; the
Java tests (tests/java/) compare the rules with RocketMQ's own store on real replicas."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.rocketmq.epochs import (LONG_MAX, EpochEntry, EpochFileError, Span, as_master, consistent_point,
                                   epoch_file_text, handshake, parse_epoch_file, read_epochs, read_identity, spans)

E = EpochEntry
BASE = [E(1, 100), E(2, 300), E(3, 500)]  # EpochFileCacheTest.setup


def test_ends_follow_the_next_start_and_the_last_is_open():
    assert spans(BASE, None) == [Span(1, 100, 300), Span(2, 300, 500), Span(3, 500, LONG_MAX)]
    assert spans(BASE, 700)[-1] == Span(3, 500, 700)
    assert spans(BASE, 400)[-1] == Span(3, 500, LONG_MAX)  # (setLastEpochEntryEndOffset: only at or past the start)


@pytest.mark.parametrize("local_max, other, other_max, point", [
    (None, [E(1, 100), E(2, 300), E(3, 450)], None, 450),  # sample 1
    (700, [E(1, 100), E(2, 300), E(3, 500)], 600, 600),  # sample 2
    (None, [E(1, 200), E(2, 500)], None, -1),  # sample 3
])
def test_the_consistent_point_of_epoch_file_cache_test(local_max, other, other_max, point):
    assert consistent_point(spans(BASE, local_max), spans(other, other_max)) == point


def test_the_consistent_point_seen_from_the_longer_history():  # sample 4
    longer = [E(1, 100), E(2, 300), E(3, 500), E(4, 800)]
    assert consistent_point(spans(longer, None), spans(BASE, 700)) == 700


def test_a_handshake_without_local_epochs_truncates_nothing():
    assert handshake([], 5000, [E(1, 0)], 9000) is None
    assert handshake([E(1, 0)], 5000, [E(1, 0), E(2, 9000)], 9000) == 5000  # behind: kept whole
    assert handshake([E(1, 0), E(2, 6000)], 7000, [E(1, 0), E(3, 5000)], 9000) == 5000  # a tail in an old epoch
    assert handshake([E(2, 0)], 5000, [E(1, 0)], 9000) == -1


def test_a_new_master_appends_its_epoch_at_its_max_offset():
    assert as_master([E(1, 0)], 2, 9000) == [E(1, 0), E(2, 9000)]
    assert as_master([E(1, 0)], 1, 9000) == [E(1, 9000)]  # (the same epoch again: dropped, then appended anew)
    assert as_master([E(1, 0), E(3, 50)], 2, 9000) is None  # (below the last epoch: refused)
    assert as_master([E(1, 9000)], 2, 9000) == [E(1, 9000)]  # (appendEntry refuses a start not past the last)


def test_the_file_round_trips_as_checkpoint_file_writes_it():
    text = epoch_file_text(BASE)
    assert text.splitlines()[:1] == ["3"] and text.endswith("1-100\n2-300\n3-500\n")
    assert parse_epoch_file(text) == BASE
    assert parse_epoch_file(text.replace("\n", "\r\n")) == BASE


@pytest.mark.parametrize("text, fatal, said", [
    ("2\n0\n1-100\n", False, "says 2 entries, holds 1"),
    ("1\n12345\n1-100\n", False, "CRC32 of its entries"),
    ("x\n0\n1-100\n", True, "entry count 'x'"),
    ("1\n0\n1-1x\n", True, "start offset '1x'"),
    ("1\n", True, "shorter than its two header lines"),
    ("1\n0\n99999999999-1\n", True, "epoch '99999999999'"),
])
def test_a_broken_file_says_why(text, fatal, said):
    with pytest.raises(EpochFileError) as got:
        parse_epoch_file(text)
    assert got.value.fatal is fatal and said in str(got.value)


def test_lines_of_another_shape_are_skipped_but_counted_in_the_crc():
    body = "1-100\nnote\n\n2-300\n"
    import zlib
    crc = zlib.crc32(body.encode()) & 0x7FFFFFFF
    assert parse_epoch_file(f"2\n{crc}\n{body}") == [E(1, 100), E(2, 300)]
    with pytest.raises(EpochFileError, match="CRC32"):  # (the blank line is part of what the CRC covers)
        parse_epoch_file(f"2\n{zlib.crc32(b'1-100' + chr(10).encode() + b'note' + chr(10).encode() + b'2-300' + chr(10).encode()) & 0x7FFFFFFF}\n{body}")


def test_the_bak_is_read_when_the_main_file_is_missing_empty_or_broken(tmp_path):
    root = str(tmp_path)
    main, bak = os.path.join(root, "epochFileCheckpoint"), os.path.join(root, "epochFileCheckpoint.bak")
    assert read_epochs(root).source is None  # (neither: a new replica)
    with open(bak, "w") as fh:
        fh.write(epoch_file_text([E(1, 0)]))
    got = read_epochs(root)
    assert (got.entries, got.source) == ([E(1, 0)], bak) and "no such file" in got.problems[0]
    for text in ("0\n0\n", "2\n0\n1-0\n", "1\n7\n1-0\n"):
        with open(main, "w") as fh:
            fh.write(text)
        got = read_epochs(root)
        assert got.source == bak, text
    with open(main, "w") as fh:
        fh.write(epoch_file_text(BASE))
    assert read_epochs(root).source == main
    with open(main, "w") as fh:
        fh.write("x\n0\n")
    with pytest.raises(EpochFileError) as bad:  # (a NumberFormatException: RocketMQ does not fall back)
        read_epochs(root)
    assert bad.value.fatal and "cannot load its epochs" in str(bad.value)


def test_a_fifo_is_not_opened(tmp_path):
    os.mkfifo(tmp_path / "epochFileCheckpoint")
    got = read_epochs(str(tmp_path))
    assert got.source is None and "FIFO" in got.problems[0], got.problems


def test_identity_files(tmp_path):
    (tmp_path / "brokerIdentity").write_text("DefaultCluster#broker-a#2")
    (tmp_path / "brokerIdentity-temp").write_text("DefaultCluster#broker-a#3#code-1")
    ident, temp = read_identity(str(tmp_path))
    assert (ident.cluster, ident.broker, ident.broker_id, ident.problem) == ("DefaultCluster", "broker-a", 2, "")
    assert (temp.broker_id, temp.register_check_code) == (3, "code-1")
    (tmp_path / "brokerIdentity").write_text("broker-a")
    assert read_identity(str(tmp_path))[0].problem.startswith("'broker-a' is not cluster#broker#id")


@st.composite
def entries(draw):
    """Epochs as RocketMQ writes them: epochs and start offsets both increasing."""
    steps = draw(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 1 << 20)), max_size=8))
    out, epoch, start = [], 0, draw(st.integers(0, 1 << 20))
    for de, ds in steps:
        epoch, start = epoch + de, start + ds
        out.append(EpochEntry(epoch, start))
    return out


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_entries_or_one_error(text):
    try:
        got = parse_epoch_file(text)
    except EpochFileError:
        return
    assert all(isinstance(e.epoch, int) and isinstance(e.start_offset, int) for e in got)


@settings(max_examples=300, deadline=None)
@given(entries(), st.integers(0, 1 << 26), entries(), st.integers(0, 1 << 26))
def test_the_consistent_point_is_within_both_logs(a, amax, b, bmax):
    """Past the last start, each log ends at its max offset: the point is never past the
    shorter of the two logs, and never before the common epoch's start."""
    p = handshake(a, amax, b, bmax)
    if p is None:
        assert not a
    elif p >= 0:
        sa, sb = spans(a, amax), spans(b, bmax)
        common = max(x.epoch for x in sa if any(y.epoch == x.epoch and y.start == x.start for y in sb))
        start = next(x.start for x in sa if x.epoch == common)
        assert start <= p or p == min(amax, bmax)
        if a[-1].start_offset <= amax and b[-1].start_offset <= bmax:
            assert p <= max(amax, bmax)
