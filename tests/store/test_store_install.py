"""Installing a replicated store from a leader's retained log (StoreRaftLog's install side,
quorumlog.store.nativeinstall): the image, chunk validation (every bad chunk refused with a
specific error, nothing changed), the store reopened on the installed log with its derived
state rebuilt, and crash safety -- a process killed at every step of the replacement leaves
the old log or the new one, and the next open finishes the job."""
from __future__ import annotations

import os
import sys
import textwrap
import time

import pytest

import quorumlog.store as qs
from quorumlog.errors import InstallError, ReplicationError
from quorumlog.raft.errors import InstallRefusedError, NotSupportedByLogError
from quorumlog.raft.log import InstallImage
from quorumlog.store.nativeinstall import HEAD_FILE, INSTALL_DIR, READY_FILE

from store_support import run_killed_at

SEGMENT = 1 << 16
EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))
SETTINGS = dict(segment_size_bytes=SEGMENT, replicated=True, background=False,
                delete_when=EVERY_HOUR, file_reserved_hours=1e-6, disk_clean_ratio=1.0,
                disk_force_clean_ratio=1.0, disk_reject_ratio=1.0)


def leader_store(path, rounds=30):
    """A replicated store written through its raft log, committed, with a consumer offset,
    whose retention dropped its head -> (store, raft log)."""
    s = qs.open(path, **SETTINGS)
    s.create_topic("t", 2)
    rl = s.raft_log()
    last = 0
    for i in range(rounds):
        req = s.prepare_put("t", [bytes([i]) * 300 + b"-%d-%d" % (i, k) for k in range(20)],
                            queue_id=i % 2)
        last = rl.append_as_leader(1, req)
    s.apply_committed(last)
    payload = qs.offsets.encode_commit("g", [("t", 0, 7)])
    last = rl.append_control(1, 3, payload)          # META: a consumer offset commit
    s.apply_committed(last)
    assert s.committed_offset("g", "t", 0) == 7
    assert s.run_retention(int(time.time() * 1000) + 60_000) > 0
    assert s.commitlog.first_index > 1
    return s, rl


def follower_store(path, rounds=3):
    s = qs.open(path, **SETTINGS)
    rl = s.raft_log()
    for i in range(rounds):
        rl.append_as_leader(1, s.prepare_put("old", [b"old-%d" % i], queue_id=0))
    s.apply_committed(s.commitlog.last_index)
    return s, rl


def stream(leader_rl, follower_rl, image, max_bytes=20_000):
    off = 0
    follower_rl.begin_install(image, (("n1", "n2"), ("n3",)))
    while off < image.total_bytes:
        chunk, n = leader_rl.read_image(image, off, max_bytes)
        assert follower_rl.write_chunk(off, chunk) == off + n
        off += n
    return follower_rl.finish_install()


def queue_bodies(s, topic, q):
    return [bytes(m.body) for m in s.get(topic, q, s.min_offset(topic, q), 10_000)]


def test_store_installs_the_leaders_image_and_rebuilds_its_state(tmp_path):
    a, la = leader_store(tmp_path / "a")
    b, lb = follower_store(tmp_path / "b")
    im = la.install_image()
    assert im.first_index == a.commitlog.first_index and im.last_index == a.commitlog.last_index
    assert im.prev_term is None        # the native log does not keep it
    last = stream(la, lb, im)
    assert last == im.last_index
    cl = b.commitlog
    assert (cl.first_index, cl.last_index, cl.min_position) == \
        (im.first_index, im.last_index, a.commitlog.min_position)
    assert lb.first_index() == im.first_index and lb.last_index() == im.last_index
    # topics and consumer offsets came with the image; queues are rebuilt once committed
    assert b.topics() == {"t": 2}
    assert b.apply_committed(last) == last
    for q in (0, 1):
        assert (b.min_offset("t", q), b.max_offset("t", q)) == \
            (a.min_offset("t", q), a.max_offset("t", q))
        assert queue_bodies(b, "t", q) == queue_bodies(a, "t", q)
    assert b.committed_offset("g", "t", 0) == 7
    # the segment files are byte-identical from the first position to the end
    for (sa, pa), (sb, pb) in zip(a.commitlog.segments(), cl.segments(), strict=True):
        assert sa == sb
        n = min(SEGMENT, a.commitlog.end_position - sa)
        with open(pa, "rb") as fa, open(pb, "rb") as fb:
            assert fa.read(n) == fb.read(n)
    assert not os.path.exists(tmp_path / "b" / INSTALL_DIR)
    assert os.path.exists(tmp_path / "b" / HEAD_FILE)
    # replication goes on after the install; a reopen finds the same log
    req = a.prepare_put("t", [b"after"], queue_id=0)
    la.append_as_leader(2, req)
    view, count, _ = la.read(last + 1, last + 1, 1 << 20)
    assert lb.append_replicated(view) == last + 1
    b.apply_committed(last + 1)
    assert queue_bodies(b, "t", 0)[-1] == b"after"
    b.close()
    b = qs.open(tmp_path / "b", **SETTINGS)
    assert (b.commitlog.first_index, b.commitlog.last_index) == (im.first_index, last + 1)
    assert queue_bodies(b, "t", 0)[-1] == b"after"
    a.close()
    b.close()


def _staged(tmp_path):
    a, la = leader_store(tmp_path / "a")
    b, lb = follower_store(tmp_path / "b")
    im = la.install_image()
    lb.begin_install(im, (("n1",), ()))
    first, n = la.read_image(im, 0, 20_000)
    return a, la, b, lb, im, first, n


def _unchanged(b, lb, before):
    assert (b.commitlog.first_index, b.commitlog.last_index) == before
    assert queue_bodies(b, "old", 0) == [b"old-0", b"old-1", b"old-2"]


def test_bad_chunks_are_refused_with_a_specific_error_and_change_nothing(tmp_path):
    a, la, b, lb, im, first, n = _staged(tmp_path)
    before = (b.commitlog.first_index, b.commitlog.last_index)
    assert lb.write_chunk(0, first) == n
    second, n2 = la.read_image(im, n, 20_000)
    bad = bytearray(second)
    bad[200] ^= 0xFF
    cases = [
        (lambda: lb.write_chunk(0, first), "offset 0, expected"),            # a repeat
        (lambda: lb.write_chunk(n + 1, second), "expected"),                 # a gap
        (lambda: lb.write_chunk(n, bytes(bad)), "CRC|bad"),                  # damaged bytes
        (lambda: lb.write_chunk(n, first), "raft index|position"),           # wrong records
        (lambda: lb.write_chunk(n, b""), "chunk of 0 bytes"),
        (lambda: lb.write_chunk(n, "text"), "bytes-like"),
        (lambda: lb.write_chunk(n, bytes(second)[:150]), "truncated|total_size"),
    ]
    for call, match in cases:
        with pytest.raises(InstallError, match=match):
            call()
        assert isinstance(InstallError("x"), ReplicationError)   # the core answers GAP
    assert lb.write_chunk(n, second) == n + n2                  # the good one still fits
    _unchanged(b, lb, before)
    # finishing early: refused, the staging dropped, the old log still there
    with pytest.raises(InstallError, match="incomplete"):
        lb.finish_install()
    assert not os.path.exists(tmp_path / "b" / INSTALL_DIR)
    _unchanged(b, lb, before)
    a.close()
    b.close()


def test_a_chunk_past_the_image_is_refused(tmp_path):
    a, la, b, lb, im, first, n = _staged(tmp_path)
    small = InstallImage(im.first_index, None, im.first_index, im.last_term, n, im.meta, ())
    lb.begin_install(small, (("n1",), ()))
    with pytest.raises(InstallError, match="past the image"):
        lb.write_chunk(0, first)            # several records, the image holds one
    a.close()
    b.close()


@pytest.mark.parametrize("edit,match", [
    (lambda im: im._replace(meta=b"not json"), "not JSON"),
    (lambda im: im._replace(meta=im.meta.replace(b'"segment_size":65536',
                                                 b'"segment_size":131072')), "segment size"),
    (lambda im: im._replace(total_bytes=1 << 45), "max_install_bytes"),
    (lambda im: im._replace(last_index=im.first_index - 1), "is empty"),
    (lambda im: im._replace(meta=b"x" * (2 << 20)), "description of"),
])
def test_images_this_log_cannot_install_are_refused_before_anything_changes(tmp_path, edit,
                                                                              match):
    a, la, b, lb, im, first, n = _staged(tmp_path)
    lb.write_chunk(0, first)
    with pytest.raises(InstallRefusedError, match=match) as e:
        lb.begin_install(edit(im), (("n1",), ()))
    assert isinstance(e.value, NotSupportedByLogError)    # the core answers UNSUPPORTED
    assert lb.write_chunk(n, la.read_image(im, n, 20_000)[0]) > n  # the install goes on
    a.close()
    b.close()


def test_an_image_whose_checksum_differs_is_refused_at_the_end(tmp_path):
    a, la, b, lb, im, first, n = _staged(tmp_path)
    before = (b.commitlog.first_index, b.commitlog.last_index)
    import json
    d = json.loads(im.meta)
    d["crc32c"] ^= 1
    forged = im._replace(meta=json.dumps(d).encode())
    with pytest.raises(InstallError, match="CRC32C"):
        stream(la, lb, forged)
    assert not os.path.exists(tmp_path / "b" / INSTALL_DIR)
    _unchanged(b, lb, before)
    a.close()
    b.close()


def test_the_leader_starts_over_when_retention_moves_its_head(tmp_path):
    a, la = leader_store(tmp_path / "a")
    im = la.install_image()
    for i in range(30):
        la.append_as_leader(1, a.prepare_put("t", [b"y" * 300] * 20, queue_id=0))
    a.apply_committed(a.commitlog.last_index)
    assert a.run_retention(int(time.time() * 1000) + 60_000) > 0
    with pytest.raises(ReplicationError, match="no longer holds"):
        la.read_image(im, 0, 20_000)
    # a new image describes the new head; its checksum extends the cached one correctly
    im2 = la.install_image()
    assert im2.first_index > im.first_index
    a.close()


# -- crash safety -----------------------------------------------------------------------------
CRASH_SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_store_install import leader_store, follower_store, stream
    a, la = leader_store({a!r})
    b, lb = follower_store({b!r})
    im = la.install_image()
    with open({a!r} + ".image", "w") as fh:
        fh.write("%d %d" % (im.first_index, im.last_index))
    stream(la, lb, im)
    print("no crash")
""")
BEFORE_READY = ("chunk-staged", "before-ready")
AFTER_READY = ("derived-removed", "before-move-index", "moved-index", "before-move-checkpoint",
               "moved-checkpoint", "before-move-commitlog", "moved-commitlog", "meta-written",
               "ready-removed")


@pytest.mark.parametrize("point", BEFORE_READY + AFTER_READY)
def test_a_crash_at_any_step_leaves_the_old_log_or_the_new_one(tmp_path, point):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    run_killed_at(CRASH_SCRIPT.format(tests=os.path.dirname(__file__), a=a, b=b), point)
    with open(a + ".image") as fh:
        first, last = map(int, fh.read().split())
    s = qs.open(b, **SETTINGS)
    try:
        cl = s.commitlog
        if point in BEFORE_READY:        # the old log, intact; the staging is gone
            assert (cl.first_index, cl.last_index) == (1, 3)
            s.apply_committed(3)         # (a replicated store learns its commit from Raft)
            assert queue_bodies(s, "old", 0) == [b"old-0", b"old-1", b"old-2"]
            assert not os.path.exists(os.path.join(b, HEAD_FILE))
        else:                            # the new log, finished by this open
            assert (cl.first_index, cl.last_index) == (first, last)
            assert s.topics() == {"t": 2}
            s.apply_committed(last)
            assert len(queue_bodies(s, "t", 0)) > 0 and "old" not in s.topics()
            assert s.committed_offset("g", "t", 0) == 7
            assert os.path.exists(os.path.join(b, HEAD_FILE))
        assert not os.path.exists(os.path.join(b, INSTALL_DIR))
        cl.verify()
    finally:
        s.close()


def test_a_finished_install_left_by_a_crash_is_completed_before_a_new_one_starts(tmp_path):
    # READY present (the replacement not done): a new install is refused until a reopen
    a, la, b, lb, im, first, n = _staged(tmp_path)
    os.makedirs(tmp_path / "b" / INSTALL_DIR, exist_ok=True)
    with open(tmp_path / "b" / INSTALL_DIR / READY_FILE, "w") as fh:
        fh.write("{}")
    from quorumlog.errors import StorageError
    with pytest.raises(StorageError) as e:
        lb.begin_install(im, (("n1",), ()))
    assert "has not replaced the log yet" in e.value.args[0]   # (OSError's str shows the path)
    a.close()
    b.close()


def test_a_leader_whose_store_state_is_too_large_to_ship_offers_no_image(tmp_path,
                                                                         monkeypatch):
    # the description travels with every chunk: over the limit the leader reports the
    # follower behind retention instead of sending what the follower would refuse
    from quorumlog.store.nativeinstall import MAX_INSTALL_META_BYTES
    a, la = leader_store(tmp_path / "a")
    import quorumlog.store.message_store as ms
    monkeypatch.setattr(ms, "install_meta",
                        lambda topics, offsets: {"topics": {"x": "y" * MAX_INSTALL_META_BYTES}})
    with pytest.raises(NotSupportedByLogError, match="state is .* bytes"):
        la.install_image()
    a.close()
