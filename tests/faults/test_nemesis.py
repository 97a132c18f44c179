"""The nemeses' file-level operations on real (stopped) logs: a power loss by the checkpoint
and by dirty pages, a flipped bit in a committed record (caught by CRC, undone), a wiped log
that keeps its hard state, a full disk on a small mounted volume; and the proxied cluster's
per-node view of its peers."""
from __future__ import annotations

import errno
import mmap
import os
import random

import pytest

from quorumlog.commitlog import CommitLog
from quorumlog.errors import CorruptLogError, InvalidArgumentError
from quorumlog.testing import nemesis as nem
from quorumlog.testing.faultproxy import FaultProxy
from quorumlog.testing.faults import DiskVolume, ProxiedCluster, RunConfig, build_plan

SEG = 1 << 16


def make_log(path, n_flushed=300, n_tail=300, body=200):
    """A log with n_flushed committed, flushed and checkpointed records, then n_tail more
    that are neither flushed nor checkpointed, dropped as kill -9 would -> (flushed last
    index, last index)."""
    cl = CommitLog(str(path), segment_size_bytes=SEG, index_file_entries=4096,
                   flush="async", flush_interval_ms=600_000, checkpoint_interval_ms=600_000)
    try:
        for i in range(n_flushed):
            cl.append("t", bytes([i % 251]) * body, term=1, queue_offset=i)
        cl.commit(cl.last_index)
        cl.flush()
        cl.checkpoint()
        flushed = cl.last_index
        for i in range(n_tail):
            cl.append("t", bytes([(i + 7) % 251]) * body, term=1, queue_offset=n_flushed + i)
        last = cl.last_index
    finally:
        cl.crash_for_testing()
    return flushed, last


def reopen(path):
    return CommitLog(str(path), segment_size_bytes=SEG, index_file_entries=4096)


def test_power_loss_by_checkpoint_cuts_the_log_at_the_flushed_position(tmp_path):
    flushed, last = make_log(tmp_path)
    assert last > flushed
    cp = nem.read_checkpoint(tmp_path)
    out = nem.lose_unflushed_tail(tmp_path, "checkpoint")
    assert out["flushed_index"] == flushed == cp.flushed_index
    assert out["log_bytes_zeroed"] > 0 and out["index_entries_zeroed"] == last - flushed
    cl = reopen(tmp_path)
    try:
        assert cl.last_index == flushed
        assert cl.end_position == cp.flushed_position
        cl.verify()
    finally:
        cl.close()
    # nothing after the flushed position is left in any segment
    for name in os.listdir(tmp_path / "commitlog"):
        start = int(name)
        data = (tmp_path / "commitlog" / name).read_bytes()
        assert not any(data[max(cp.flushed_position - start, 0):])


def test_dirty_page_detection_sees_an_unflushed_write(tmp_path):
    if nem.dirty_page_model_available() is not None:
        pytest.fail(f"dirty pages not visible: {nem.dirty_page_model_available()}")
    p = tmp_path / "f"
    with open(p, "wb") as fh:
        fh.truncate(16 * nem.PAGE_BYTES)
    fd = os.open(p, os.O_RDWR)
    try:
        mm = mmap.mmap(fd, 16 * nem.PAGE_BYTES)
        mm[0:10] = b"a" * 10
        mm.flush()
        mm[5 * nem.PAGE_BYTES:5 * nem.PAGE_BYTES + 10] = b"b" * 10
        mm.close()
        # written a moment ago and never flushed: still dirty in the page cache
        assert nem.dirty_pages(p) == [5]
        os.fsync(fd)
        assert nem.dirty_pages(p) == []
    finally:
        os.close(fd)


def test_power_loss_by_dirty_pages_keeps_every_flushed_record(tmp_path):
    flushed, last = make_log(tmp_path)
    cp = nem.read_checkpoint(tmp_path)
    out = nem.lose_unflushed_tail(tmp_path, "dirty-pages")
    assert out["model"] == "dirty-pages"
    cl = reopen(tmp_path)
    try:
        # whatever the kernel wrote back on its own survives; nothing flushed is lost
        assert flushed <= cl.last_index <= last
        assert cl.end_position >= cp.flushed_position
        cl.verify()
        if out["log_bytes_zeroed"]:
            assert cl.last_index < last
    finally:
        cl.close()


def test_flipped_bit_is_caught_by_crc_and_undone(tmp_path):
    flushed, _last = make_log(tmp_path, n_tail=0)
    where = nem.flip_committed_bit(tmp_path, random.Random(5))
    assert 1 <= where["index"] <= flushed
    cl = reopen(tmp_path)
    try:
        with pytest.raises(CorruptLogError) as ei:
            cl.verify()
        # the error names the damaged segment and the record holding the flipped byte
        assert os.path.basename(str(ei.value.path)) == os.path.basename(where["file"])
        seg_start = int(os.path.basename(where["file"]))
        assert ei.value.offset == where["record_position"] - seg_start
    finally:
        cl.close()
    nem.undo_flip(where)
    cl = reopen(tmp_path)
    try:
        cl.verify()
        assert cl.last_index == flushed
    finally:
        cl.close()


def test_flip_needs_a_committed_record(tmp_path):
    cl = CommitLog(str(tmp_path), segment_size_bytes=SEG, index_file_entries=4096)
    cl.append("t", b"x", term=1)
    cl.checkpoint()
    cl.close()
    with pytest.raises(InvalidArgumentError):
        nem.flip_committed_bit(tmp_path, random.Random(1))


def test_wipe_keeps_the_hard_state_only(tmp_path):
    make_log(tmp_path, n_tail=10)
    (tmp_path / "raft-state").write_bytes(b"hard state")
    (tmp_path / "topics.json").write_text("{}")
    gone = nem.wipe_log(tmp_path)
    assert {"commitlog", "index", "checkpoint", "topics.json"} <= set(gone)
    assert sorted(os.listdir(tmp_path)) == ["LOCK", "raft-state"] or \
        sorted(os.listdir(tmp_path)) == ["raft-state"]
    assert (tmp_path / "raft-state").read_bytes() == b"hard state"


def test_fill_disk_on_a_small_volume_gives_enospc_until_the_ballast_goes(tmp_path):
    vol = DiskVolume(str(tmp_path / "vol"), 16)
    if not vol.mount():
        pytest.skip(f"cannot mount a small file system here: {vol.reason}")
    try:
        ballast, got = nem.fill_disk(vol.path)
        assert got > 8 << 20
        fd = os.open(os.path.join(vol.path, "x"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            with pytest.raises(OSError) as ei:
                os.posix_fallocate(fd, 0, 1 << 20)
            assert ei.value.errno == errno.ENOSPC
            os.unlink(ballast)
            os.posix_fallocate(fd, 0, 1 << 20)
        finally:
            os.close(fd)
    finally:
        vol.unmount()
    assert not os.path.ismount(vol.path)


def test_proxied_cluster_gives_each_replica_its_own_view_of_the_peers(tmp_path):
    with FaultProxy(seed=1) as fp:
        c = ProxiedCluster(tmp_path / "c", 3, fp)
        c.peers = {n: f"127.0.0.1:{7000 + i}" for i, n in enumerate(c.ids)}
        c.clients = {n: f"127.0.0.1:{8000 + i}" for i, n in enumerate(c.ids)}
        cmd = c.command("n2")
        peers = dict(p.split("=") for p in cmd[cmd.index("--peers") + 1].split(","))
        assert peers["n2"] == "127.0.0.1:7001"
        assert peers["n1"] == c.via[("n2", "n1")] != c.peers["n1"]
        assert peers["n3"] == c.via[("n2", "n3")]
        assert len(c.via) == 6 and len(set(c.via.values())) == 6


def test_plan_is_a_function_of_the_seed():
    cfg = RunConfig(seed=9, kills=5, partitions=2, power_cuts=1, bit_flips=1)
    a = build_plan(cfg, random.Random(9))
    assert a == build_plan(cfg, random.Random(9))
    assert sorted(a) == sorted(["kill-leader"] * 5 + ["partition"] * 2 + ["bit-flip"]
                               + [x for x in a if x.startswith("power-cut")])
    with pytest.raises(InvalidArgumentError):
        RunConfig(seed=1, nodes=2).validate()
