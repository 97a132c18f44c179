"""Retention and membership: segments holding CONFIG records (add_member / remove_member) are
deleted by retention like any others, but the configuration they set must survive them --
a restarted replica learns its voters from log_head.json plus the CONFIG records still in
the log (node/driver.py config_history). Before this, the next start believed the initial
voters again (a wrong quorum). Also a process killed between the head's write and the
deletion: the next open completes the deletion and the history is the same."""
from __future__ import annotations

import os
import sys
import textwrap
import time

import pytest

import quorumlog.store as qs
from quorumlog.commitlog import CommitLog
from quorumlog.node.driver import config_history
from quorumlog.raft.log import EntryKind, encode_config
from quorumlog.store.nativeinstall import HEAD_FILE, read_head

from store_support import run_killed_at

SEGMENT = 1 << 16
EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))
SETTINGS = dict(segment_size_bytes=SEGMENT, replicated=True, background=False,
                delete_when=EVERY_HOUR, file_reserved_hours=1e-6, disk_clean_ratio=1.0,
                disk_force_clean_ratio=1.0, disk_reject_ratio=1.0)
INITIAL = ("a", "b", "c")
# add d as a learner, promote it, remove a: each in its own segment, then one more
CONFIGS = [(("a", "b", "c"), ("d",)), (("a", "b", "c", "d"), ()), (("b", "c", "d"), ())]


def _messages(s, rl, n=4):
    last = 0
    for i in range(n):
        last = rl.append_as_leader(1, s.prepare_put("t", [b"m" * 900] * 20, queue_id=0))
    return last


def build(path) -> list:
    """A replicated store with the three membership changes spread over several segments
    -> config_history of it before any retention."""
    s = qs.open(path, **SETTINGS)
    try:
        s.create_topic("t", 1)
        rl = s.raft_log()
        for cfg in CONFIGS:
            _messages(s, rl)
            rl.append_control(1, EntryKind.CONFIG, encode_config(*cfg))
        last = _messages(s, rl, 8)
        s.apply_committed(last)
        assert len(s.commitlog.segments()) > 4
        return config_history(s.commitlog, INITIAL)
    finally:
        s.close()


def history_after(path):
    s = qs.open(path, **SETTINGS)
    try:
        cl = s.commitlog
        return cl.first_index, config_history(cl, INITIAL)
    finally:
        s.close()


def same_from(first, before, after):
    """The configuration in force at every index >= first - 1 is the same in both."""
    def at(hist, i):
        return [h[1:] for h in hist if h[0] <= i][-1]
    idxs = {first - 1} | {h[0] for h in before + after if h[0] >= first - 1}
    return all(at(before, i) == at(after, i) for i in sorted(idxs))


def test_retention_keeps_the_configuration_its_deleted_config_records_set(tmp_path):
    path = str(tmp_path / "s")
    before = build(path)
    assert [h[1:] for h in before[1:]] == CONFIGS
    s = qs.open(path, **SETTINGS)
    try:
        assert s.run_retention(int(time.time() * 1000) + 60_000) > 0
        first = s.commitlog.first_index
        assert first > before[-1][0]           # every CONFIG record went
    finally:
        s.close()
    first2, after = history_after(path)        # a restart
    assert first2 == first
    assert after[-1][1:] == CONFIGS[-1]        # the voters are b, c, d (on main: a, b, c)
    assert same_from(first, before, after)
    head = read_head(path)            # written when the last CONFIG record went; later
    assert before[-1][0] < head["first_index"] <= first    # deletions had none to keep
    assert head["prev_term"] == 1


def test_retention_that_deletes_no_config_record_writes_no_head(tmp_path):
    path = str(tmp_path / "s")
    s = qs.open(path, **SETTINGS)
    try:
        s.create_topic("t", 1)
        rl = s.raft_log()
        _messages(s, rl, 12)
        idx = rl.append_control(1, EntryKind.CONFIG, encode_config(*CONFIGS[0]))
        s.apply_committed(idx)               # the CONFIG record is in the active segment
        assert s.run_retention(int(time.time() * 1000) + 60_000) > 0
        assert s.commitlog.first_index <= idx
    finally:
        s.close()
    assert not os.path.exists(os.path.join(path, HEAD_FILE))
    _, after = history_after(path)
    assert [h[1:] for h in after] == [(INITIAL,), CONFIGS[0]]


CRASH_SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    import quorumlog.store as qs
    from test_store_retention_config import SETTINGS
    s = qs.open({path!r}, **SETTINGS)
    s.run_retention(int(time.time() * 1000) + 60_000)
    print("no crash")
""")


@pytest.mark.parametrize("point", ["retention-head-written"])
def test_a_crash_between_the_head_and_the_deletion_keeps_the_history(tmp_path, point):
    path = str(tmp_path / "s")
    before = build(path)
    run_killed_at(CRASH_SCRIPT.format(tests=os.path.dirname(__file__), path=path), point)
    head = read_head(path)
    assert head is not None
    cl = CommitLog(path)                        # the log alone: its CONFIG records below the
    try:                                        # head are still there, and not listed
        assert cl.first_index < head["first_index"]
        raw = config_history(cl, INITIAL)
    finally:
        cl.close()
    assert same_from(head["first_index"], before, raw) and raw == sorted(raw)
    first, after = history_after(path)          # the open completes the deletion
    assert first == head["first_index"] > 1
    assert same_from(first, before, after)
    assert after == sorted(after)               # no CONFIG record below the head listed
