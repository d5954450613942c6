"""Sample stores for the tour and the tests: deterministic bodies over several terms."""

from __future__ import annotations

import random

from .filestore import FileStore
from .metafiles import write_currterm


def sample_bodies(count: int, *, seed: int = 7, max_size: int = 3000) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        size = 0 if i % 10 == 3 else rng.randrange(1, max_size)
        out.append(rng.randbytes(size))
    return out


def write_sample_store(node_dir: str, *, entries: int = 600, terms: int = 6, data_file_size: int = 64 * 1024,
                       index_file_size: int = 4096, seed: int = 7, committed_lag: int = 7,
                       with_crc: bool = True) -> FileStore:
    """Write ``entries`` entries spread evenly over terms 1..``terms``; returns the closed store."""
    bodies = sample_bodies(entries, seed=seed)
    store = FileStore.open(node_dir, data_file_size=data_file_size, index_file_size=index_file_size,
                           with_crc=with_crc)
    try:
        per_term = max(1, -(-entries // terms))
        for t in range(terms):
            chunk = bodies[t * per_term : (t + 1) * per_term]
            if chunk:
                store.append_leader(chunk, term=t + 1)
        store.set_committed(store.end_index - committed_lag)
        write_currterm(node_dir, max(terms, store.end_term), None)
    finally:
        store.close()
    return store
