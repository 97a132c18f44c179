"""ConsumeQueue (Cython) on its own: file layout, repair on reopen (entries past the limit,
holes before a rebuilt queue's start, stale bytes after a gap), min offset, file deletion."""
import os

import numpy as np
import pytest

from quorumlog._consumequeue import CQ_DTYPE, ConsumeQueue, dispatch

E = 64


def make(tmp_path, entries=E):
    cq = ConsumeQueue("t", 0, str(tmp_path / "q"), entries)
    cq.load()
    cq.recover(0)
    return cq


def reopen(tmp_path, limit, entries=E):
    cq = ConsumeQueue("t", 0, str(tmp_path / "q"), entries)
    assert cq.load()
    cq.recover(limit)
    return cq


def test_layout_and_zero_copy_view(tmp_path):
    cq = make(tmp_path)
    assert cq.empty
    for i in range(70):
        assert cq.put(i, 1000 + 10 * i, 10, i % 3)
    assert sorted(os.listdir(tmp_path / "q")) == ["%020d" % 0, "%020d" % 64]
    assert os.path.getsize(tmp_path / "q" / ("%020d" % 0)) == E * 20
    raw = open(tmp_path / "q" / ("%020d" % 64), "rb").read()
    assert np.frombuffer(raw[:20], CQ_DTYPE)[0].tolist() == (1000 + 640, 10, 64 % 3)
    v = cq.view(60, 70)
    assert len(v) == 4 and list(v["position"]) == [1600, 1610, 1620, 1630]
    assert not v.flags.writeable
    assert cq.put(5, 1, 1, 1) is False            # already there: ignored


def test_recover_drops_entries_past_limit(tmp_path):
    cq = make(tmp_path)
    for i in range(20):
        cq.put(i, 100 * i, 50, 0)
    cq.flush()
    cq = reopen(tmp_path, limit=1000)
    assert cq.next_offset == 10 and not cq.empty
    e = cq.file_for(0).entries
    assert (e[10:20]["size"] == 0).all() and (e[10:20]["position"] == 0).all()


def test_recover_falls_back_to_previous_file(tmp_path):
    cq = make(tmp_path)
    for i in range(E + 5):
        cq.put(i, 100 * i, 50, 0)
    cq = reopen(tmp_path, limit=100 * E)           # every entry of the second file is past it
    assert cq.next_offset == E


def test_recover_keeps_holes_before_a_rebuilt_start(tmp_path):
    cq = make(tmp_path)
    for i in range(7, 30):                         # rebuilt queue: starts at offset 7
        cq.put(i, 100 * i, 50, 0)
    cq = reopen(tmp_path, limit=10**9)
    assert cq.next_offset == 30
    assert cq.min_offset(0) == 7
    assert cq.min_offset(100 * 12) == 12


def test_recover_zeroes_stale_bytes_after_a_gap(tmp_path):
    cq = make(tmp_path)
    for i in range(10):
        cq.put(i, 100 * i, 50, 0)
    f = cq.file_for(0)
    f.put(20, 55, 50, 0)                           # a stale entry a crash left after a gap
    cq = reopen(tmp_path, limit=10**9)
    assert cq.next_offset == 10
    assert cq.file_for(0).entries[20]["size"] == 0


def test_delete_files_before(tmp_path):
    cq = make(tmp_path)
    for i in range(3 * E + 2):
        cq.put(i, 100 * i, 50, 0)
    assert cq.delete_files_before(100 * (E + 3)) == 1     # only the first file is all below
    assert cq.starts == [E, 2 * E, 3 * E]
    assert cq.min_offset(100 * (E + 3)) == E + 3
    assert cq.delete_files_before(10**12) == 2            # the file with the last entry stays
    assert cq.starts == [3 * E]


def test_dispatch_loop_reports_what_it_cannot_place(tmp_path):
    cq = make(tmp_path)
    topics = {42: [cq]}
    n = 5
    pos = np.arange(n, dtype=np.int64) * 100
    cols = (pos, np.full(n, 100, np.int32), np.zeros(n, np.int32), np.arange(n, dtype=np.int64),
            np.zeros(n, np.int64), np.full(n, 42, np.int64), np.ones(n, np.uint8))
    assert dispatch(topics, *cols, 0) == 0                # empty queue: the caller decides
    cq.put(0, 0, 100, 0)
    assert dispatch(topics, *cols, 1) == n                # the rest on the fast path
    assert cq.next_offset == n
    other = cols[:5] + (np.full(n, 7, np.int64), cols[6])
    assert dispatch(topics, *other, 0) == 0               # unknown topic hash
    skip = cols[:6] + (np.full(n, 2, np.uint8),)
    assert dispatch(topics, *skip, 0) == n                # non-MESSAGE records skipped
