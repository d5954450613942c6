"""Regression tests for bugs the fault harness (tests/support/faults.py) found, one scripted
scenario or simulation seed each, named after what went wrong."""

from __future__ import annotations

import os

from store.filestore import FileStore
from store.format import file_name


def test_a_node_whose_only_data_file_was_cut_short_starts_again(tmp_path):
    """Fault run mixed/5 nodes/seed 2: a torn write cut the node's only data file to 6
    bytes (inside entry 0) and the node refused to start ever after ("files were written
    with size 6, not the configured 1048576"): a lone short file was taken for evidence of
    another file size. It is a file cut short, which recovery grows back."""
    node = str(tmp_path / "dledger-n0")
    sizes = {"data_file_size": 64 << 10, "index_file_size": 4096}
    with FileStore.open(node, **sizes) as s:
        s.append_leader([b"a" * 100, b"b" * 100, b"c" * 100], term=1)
        third = s.get(2)
    data0 = os.path.join(node, "data", file_name(0))
    os.truncate(data0, third.pos + 20)  # inside the third entry
    with FileStore.open(node, read_only=True, **sizes) as s:
        assert s.end_index == 1
    with FileStore.open(node, **sizes) as s:
        assert (s.end_index, [e.body[:1] for e in s.entries()]) == (1, [b"a", b"b"])
        assert s.recovery.restored_file_size == [file_name(0)]
        assert s.append(b"d", 2).index == 2
    assert os.path.getsize(data0) == 64 << 10
    os.truncate(data0, 6)  # inside entry 0: nothing is left
    with FileStore.open(node, **sizes) as s:
        assert s.end_index == -1 and s.append(b"again", 3).index == 0
