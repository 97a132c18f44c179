"""quorumlog.open() as plyvel / lmdb open a database: create_if_missing, a foreign directory or
a regular file refused and left alone, read_only=True (no lock, nothing written, a live store
read), a failed open leaving the directory as it found it, the stored segment size adopted on
reopen, and the `small` profile's disk footprint."""
import os

import pytest

import quorumlog
from quorumlog import errors
from quorumlog.store import message_store

SMALL = dict(segment_size_bytes=1 << 16, consume_queue_file_entries=64, background=False,
             environ={})


def _allocated(path):
    total = 0
    for root, dirs, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


def test_a_directory_of_unrelated_files_is_refused_and_untouched(tmp_path, dir_tree):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "photos").mkdir()
    before = dir_tree(tmp_path)
    with pytest.raises(errors.NotAStoreError, match="holds other files"):
        quorumlog.open(tmp_path, **SMALL)
    assert dir_tree(tmp_path) == before


def test_a_regular_file_is_not_a_store(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"data")
    with pytest.raises(errors.NotAStoreError, match="not a directory"):
        quorumlog.open(f, **SMALL)
    assert f.read_bytes() == b"data"


def test_create_if_missing(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(errors.NotAStoreError, match="create_if_missing"):
        quorumlog.open(missing, create_if_missing=False, **SMALL)
    assert not missing.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(errors.NotAStoreError):
        quorumlog.open(empty, create_if_missing=False, **SMALL)
    assert os.listdir(empty) == []
    with quorumlog.open(empty, **SMALL) as s:        # default: created
        s.put("t", b"x")
    with quorumlog.open(empty, create_if_missing=False, **SMALL) as s:   # exists now
        assert s.max_offset("t", 0) + s.max_offset("t", 1) + s.max_offset("t", 2) + \
            s.max_offset("t", 3) == 1


def test_a_failed_open_leaves_the_directory_as_it_found_it(tmp_path, monkeypatch, dir_tree):
    # a garbage checkpoint in an existing store: nothing created (no abort, no LOCK)
    path = tmp_path / "s"
    with quorumlog.open(path, **SMALL) as s:
        s.put("t", b"x")
    os.unlink(path / "LOCK")
    cp = path / "checkpoint"
    cp.write_bytes(b"\x00garbage" * 16)
    before = dir_tree(path)
    with pytest.raises(errors.CorruptLogError, match="checkpoint"):
        quorumlog.open(path, **SMALL)
    assert dir_tree(path) == before

    # a disk that fills up while the store is being created: the log's files, LOCK and
    # abort go again, in a new directory and in an empty one
    def full(self):
        raise errors.DiskFullError(28, "no space to preallocate a consume queue")

    monkeypatch.setattr(message_store.TopicRegistry, "load", full)
    new = tmp_path / "new"
    with pytest.raises(errors.DiskFullError):
        quorumlog.open(new, **SMALL)
    assert not new.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(errors.DiskFullError):
        quorumlog.open(empty, **SMALL)
    assert os.listdir(empty) == []


def test_read_only_reads_a_live_store_and_writes_nothing(tmp_path, dir_tree):
    path = tmp_path / "s"
    w = quorumlog.open(path, **SMALL)
    w.create_topic("t", queues=2)
    w.put_batch("t", [b"m%d" % i for i in range(50)], queue_id=1, keys=[("k",)] * 50)
    w.flush()
    w.put("t", b"after-flush", queue_id=1)     # dispatched by the owner, not checkpointed
    before = dir_tree(path, mtimes=False)
    with quorumlog.open(path, read_only=True, environ={}) as r:   # LOCK held by `w`
        assert r.read_only
        assert r.topics() == {"t": 2}
        assert r.max_offset("t", 1) == 51
        assert [m.body for m in r.get("t", 1, 48, 10)] == [b"m48", b"m49", b"after-flush"]
        for write in (lambda: r.put("t", b"x"), lambda: r.put_batch("t", [b"x"]),
                      lambda: r.create_topic("u"), lambda: r.flush(),
                      lambda: r.run_retention(), lambda: r.deliver_due()):
            with pytest.raises(errors.ReadOnlyError):
                write()
        with pytest.raises(errors.ReadOnlyError):
            r.commitlog.append("t", b"x", term=1)
    assert dir_tree(path, mtimes=False) == before
    w.close()
    before = dir_tree(path)            # a closed store: not even an mtime changes
    with quorumlog.open(path, read_only=True, environ={}) as r:
        assert len(r.get("t", 1, 0, 100)) == 51
    assert dir_tree(path) == before
    for bad in (tmp_path / "nope", tmp_path):
        with pytest.raises(errors.NotAStoreError):
            quorumlog.open(bad, read_only=True, environ={})
    assert not (tmp_path / "nope").exists()


def test_reopen_adopts_the_stored_segment_size(tmp_path):
    path = tmp_path / "s"
    with quorumlog.open(path, **SMALL) as s:
        s.put("t", b"x", queue_id=0)
    # no segment_size_bytes: the store's own (1 GiB would be the default for a new store)
    with quorumlog.open(path, background=False, environ={}) as s:
        assert s.commitlog.segment_size_bytes == 1 << 16
        assert s.config.segment_size_bytes == 1 << 16
        assert s.get("t", 0, 0)[0].body == b"x"
    with pytest.raises(errors.ConfigError, match="segment_size_bytes"):
        quorumlog.open(path, segment_size_bytes=1 << 20, background=False, environ={})
    # ... and so does the native log on its own
    from quorumlog.commitlog import CommitLog
    with CommitLog(path) as lg:
        assert lg.segment_size_bytes == 1 << 16 and lg.last_index == 1


def test_small_profile_preallocates_little(tmp_path):
    with quorumlog.open(tmp_path / "small", profile="small", background=False,
                        environ={}) as s:
        assert s.config.segment_size_bytes == 4 << 20
        s.put("t", b"x")
    assert _allocated(tmp_path / "small") < 8 << 20
    # the environment picks a profile too; explicit settings beat it
    cfg = quorumlog.load_config(environ={"QUORUMLOG_PROFILE": "small"},
                                consume_queue_file_entries=1000)
    assert cfg.segment_size_bytes == 4 << 20 and cfg.consume_queue_file_entries == 1000
    # the default profile is the big one: 1 GiB segments, 2**20 raft-index entries (24 MiB)
    d = quorumlog.load_config(environ={})
    assert (d.segment_size_bytes, d.index_file_entries) == (1 << 30, 1 << 20)
    with pytest.raises(errors.ConfigError, match="profile"):
        quorumlog.load_config(environ={}, profile="tiny")
