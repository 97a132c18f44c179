"""Catch-up past retention (seed 002 §2.5, the snapshot of this design): a follower behind the
leader's first retained entry -- or a brand-new empty member -- receives the leader's retained
log in bounded chunks (InstallSegment), replaces its log atomically, and replicates on."""
import os

import pytest

from quorumlog.errors import ReplicationError
from quorumlog.raft import RaftConfig, Role
from quorumlog.raft.errors import NotSupportedByLogError
from quorumlog.raft.messages import InstallSegment
from quorumlog.raft.memlog import MemLog
from quorumlog.testing.cluster import ManualCluster


def drop_head(cl, node, upto):
    """Retention on `node`: drop committed entries below `upto`."""
    c = cl.core(node)
    assert upto <= c.commit_index
    cl.logs[node].drop_before(upto, (c.voters, ()))


def busy_cluster(ids=("n1", "n2", "n3"), spare=(), **cfg):
    cl = ManualCluster(ids, config=RaftConfig(**cfg), spare=spare)
    cl.elect("n1")
    cl.settle(cl.now + 100)
    return cl


def lagging(rounds, upto, **cfg):
    """n3 misses `rounds` proposals of 5 entries while down; then n1 drops its head below
    `upto`. n3 is still down."""
    cl = busy_cluster(**cfg)
    cl.crash("n3")
    write(cl, rounds)
    drop_head(cl, "n1", upto)
    return cl


def write(cl, rounds):
    for _ in range(rounds):
        cl.propose("n1", 5)
        cl.settle(cl.now + 20)


def test_follower_behind_the_leaders_retention_is_installed_and_catches_up():
    # Failed before: the leader reported BehindRetention and never sent n3 anything again.
    cl = lagging(10, 30)
    cl.logs["n1"].meta = b"topics of n1"
    cl.restart("n3")
    cl.take_output()
    cl.settle(cl.now + 1000)
    out = cl.take_output()
    l1, l3 = cl.logs["n1"], cl.logs["n3"]
    assert l3.first_index() == 30 and l3.last_index() == l1.last_index()
    assert [l3.entry(i) for i in range(30, l3.last_index() + 1)] == \
           [l1.entry(i) for i in range(30, l1.last_index() + 1)]
    assert l3.term_at(29) == l1.term_at(29)
    assert cl.core("n3").commit_index == cl.core("n1").commit_index
    assert any(line.startswith("n1 BehindRetention(peer=n3") for line in out)
    installed = [line for line in out if "LogInstalled" in line]
    assert len(installed) == 1 and installed[0].startswith("n3 LogInstalled(first_index=30, ")
    assert "meta=b'topics of n1'" in installed[0]
    # and it replicates normally afterwards
    first, last = cl.propose("n1", 2)
    cl.settle(cl.now + 100)
    assert l3.last_index() == last and l3.term_at(last) == l1.term_at(last)


def test_new_empty_member_joins_past_retention():
    cl = busy_cluster(spare=("n4",))
    write(cl, 6)
    for i in ("n1", "n2", "n3"):
        drop_head(cl, i, 20)
    c = cl.core("n1")
    c.add_member("n4")
    cl.settle(cl.now + 1000)
    assert c.voters == ("n1", "n2", "n3", "n4") and c.learner is None
    l4 = cl.logs["n4"]
    assert l4.first_index() == 20 and l4.last_index() == cl.logs["n1"].last_index()
    assert cl.core("n4").voters == ("n1", "n2", "n3", "n4")


def test_install_chunks_respect_the_byte_budget_and_the_window():
    cl = lagging(8, 20, max_batch_bytes=400, max_inflight_batches=2)
    cl.restart("n3")
    cl.take_output()
    for _ in range(300):
        cl.tick(cl.now + 10)
        while cl.queue:
            cl.deliver(1)
            pr = cl.core("n1").progress["n3"]
            assert len(pr.inflight) <= 2
        if cl.logs["n3"].first_index() == 20:
            break
    chunks = [line.split("offset=")[1] for line in cl.take_output() if " INSTALL t" in line]
    sizes = [int(c.split("+")[1].split("/")[0]) for c in chunks]
    total = int(chunks[0].split("/")[1].split()[0])
    assert cl.logs["n3"].first_index() == 20
    assert len(chunks) >= 5 and max(sizes) <= 400 and sum(sizes) == total


def test_lost_chunks_are_resent():
    cl = lagging(6, 20, max_batch_bytes=400)
    cl.restart("n3")
    dropped = 0
    for _ in range(300):
        cl.tick(cl.now + 10)
        while cl.queue:
            m = cl.queue[0]
            if dropped < 3 and isinstance(m, InstallSegment) and m.offset > 0:
                cl.queue.pop(0)
                dropped += 1
            else:
                cl.deliver(1)
    assert dropped == 3
    assert cl.logs["n3"].first_index() == 20
    assert cl.logs["n3"].last_index() == cl.logs["n1"].last_index()


def test_crash_in_the_middle_of_an_install_keeps_the_old_log():
    cl = busy_cluster(max_batch_bytes=400, max_inflight_batches=1)
    write(cl, 2)
    cl.crash("n3")
    before = cl.logs["n3"].last_index()
    write(cl, 6)
    drop_head(cl, "n1", 25)
    cl.restart("n3")
    n = 0
    while n < 2:  # two chunks staged, then the crash
        cl.tick(cl.now + 10)
        n += cl.deliver(match=lambda m: isinstance(m, InstallSegment) and m.dst == "n3")
    cl.crash("n3")
    assert cl.logs["n3"].first_index() == 1 and cl.logs["n3"].last_index() == before
    cl.restart("n3")
    cl.settle(cl.now + 1000)
    assert cl.logs["n3"].first_index() == 25
    assert cl.logs["n3"].last_index() == cl.logs["n1"].last_index()


def test_leader_that_does_not_keep_the_head_term_still_installs():
    # the native log forgets the term before its first retained entry: the image says so
    # and the follower treats that entry as matching (it is committed)
    cl = busy_cluster()
    cl.crash("n3")
    write(cl, 5)
    cl.logs["n1"].keep_head_term = False
    drop_head(cl, "n1", 15)
    with pytest.raises(Exception):
        cl.logs["n1"].term_at(14)
    cl.restart("n3")
    cl.settle(cl.now + 1000)
    assert cl.logs["n3"].first_index() == 15
    first, last = cl.propose("n1", 3)
    cl.settle(cl.now + 100)
    assert cl.logs["n3"].last_index() == last and cl.core("n3").commit_index == last


def test_memlog_install_validates_offsets_and_completeness():
    src = MemLog()
    for t in (1, 1, 2, 2, 2):
        src.append_as_leader(t, [b"x" * 50])
    src.flush()
    src.drop_before(3, (("a",), ()))
    im = src.install_image()
    assert (im.first_index, im.prev_term, im.last_index, im.last_term) == (3, 1, 5, 2)
    dst = MemLog()
    dst.append_as_leader(1, [b"old"])
    dst.begin_install(im, (("a",), ()))
    chunk, n = src.read_image(im, 0, 100)
    with pytest.raises(ReplicationError):
        dst.write_chunk(5, chunk)  # not where the staged data ends
    assert dst.write_chunk(0, chunk) == n
    with pytest.raises(ReplicationError):
        dst.finish_install()  # incomplete: the old log stays
    assert dst.last_index() == 1 and dst.entry(1)[2] == b"old"
    off = n
    while off < im.total_bytes:
        chunk, n = src.read_image(im, off, 100)
        off = dst.write_chunk(off, chunk)
    assert dst.finish_install() == 5
    assert dst.first_index() == 3 and dst.term_at(2) == 1 and dst.last_term() == 2
    assert dst.config_history(("z",)) == [(2, ("a",), ())]
    dst.crash()  # the install is durable
    assert dst.first_index() == 3 and dst.last_index() == 5
    src.drop_before(4, (("a",), ()))
    with pytest.raises(ReplicationError):
        src.read_image(im, 0, 100)  # retention moved the head: the image is gone


def test_native_log_refuses_install_calls_it_cannot_serve(tmp_path):
    # (The native log installs now -- tests/raft/test_native_install.py; this test asserted
    # NotSupportedByLogError for every call before.) An empty log has no image to offer; the
    # other calls without an image or an install in progress are refused, naming why.
    from quorumlog.commitlog import CommitLog
    from quorumlog.errors import InstallError
    from quorumlog.raft.errors import InstallRefusedError
    from quorumlog.store.nativelog import NativeRaftLog
    cl = CommitLog(str(tmp_path / "log"), segment_size_bytes=1 << 16)
    try:
        lg = NativeRaftLog(cl)
        for call, exc, match in (
                (lambda: lg.install_image(), NotSupportedByLogError, "the log is empty"),
                (lambda: lg.read_image(None, 0, 1), InstallError, "not NoneType"),
                (lambda: lg.begin_install(None, ((), ())), InstallRefusedError, "not NoneType"),
                (lambda: lg.write_chunk(0, b"x"), InstallError, "no install in progress"),
                (lambda: lg.finish_install(), InstallError, "no install in progress")):
            with pytest.raises(exc, match=match):
                call()
        assert cl.last_index == 0 and sorted(os.listdir(tmp_path / "log")) == \
            ["LOCK", "abort", "checkpoint", "commitlog", "index"]      # nothing staged
    finally:
        cl.close()


def test_follower_whose_log_cannot_install_stays_behind_and_is_reported():
    class NoInstall(MemLog):
        def begin_install(self, image, head_config):
            raise NotSupportedByLogError("no")

    cl = lagging(5, 15)
    cl.logs["n3"] = NoInstall()
    cl.restart("n3")
    cl.take_output()
    cl.settle(cl.now + 1000)
    out = cl.take_output()
    assert any("INSTALL_RESP" in line and "UNSUPPORTED" in line for line in out)
    assert cl.logs["n3"].last_index() == 0 and cl.core("n1").role == Role.LEADER


def test_a_late_append_answer_does_not_empty_an_installs_window():
    # the install window counts bytes; a late AppendResponse (an index) used to pop it, and
    # with the chunks lost nothing was ever re-sent (simulation seed 12999: never converged)
    # (one 104-byte entry per chunk, one chunk in flight: its end offset, 104, is below the
    # index a late answer reports)
    cl = lagging(25, 100, max_batch_bytes=150, max_inflight_batches=1)
    from quorumlog.raft.messages import AppendResponse, Code
    cl.restart("n3")
    c = cl.core("n1")
    for _ in range(50):
        cl.tick(cl.now + 10)
        if c.progress["n3"].state.name == "INSTALL":
            break
        cl.deliver()
    pr = c.progress["n3"]
    assert pr.state.name == "INSTALL" and pr.inflight
    lost = cl.drop(lambda m: isinstance(m, InstallSegment))
    assert lost
    c.step(AppendResponse(c.term, "n3", "n1", Code.SUCCESS, 110, 110, 110, 0, 0, 0))
    assert pr.inflight  # still waiting for the lost chunk: it is re-sent after the timeout
    cl.settle(cl.now + 2000)
    assert cl.logs["n3"].first_index() == 100
    assert cl.logs["n3"].last_index() == cl.logs["n1"].last_index()


def test_leader_whose_commit_index_is_below_its_first_entry_answers_reads():
    # after an install (or a restart recovering such a state) the commit index can be
    # first - 1, a term the log may not keep; elected, read_index and the membership checks
    # looked that term up and raised IndexOutOfRangeError (simulation seed 33441)
    import random

    from quorumlog.raft import HardState, RaftCore
    lg = MemLog(keep_head_term=False)
    for _ in range(20):
        lg.append_as_leader(1, [b"x"])
    lg.flush()
    lg.drop_before(15, (("n1",), ()))
    c = RaftCore("n1", lg, random.Random(1), RaftConfig(), hard_state=HardState(1, None),
                 config_history=lg.config_history(("n1",)), peers=("n1",), commit_index=14)
    c.tick(c.next_time_to_request_vote)
    assert c.role == Role.LEADER and c.commit_index == 14
    c.read_index("r")  # its NOOP is not flushed, so nothing of its term has committed yet
    assert c.lease_read_index() is None
    assert not [e for e in c.ready().events if type(e).__name__ == "ReadReady"]
    c.on_persisted(lg.flush())
    c.tick(c.now_ms + 1)
    events = c.ready().events
    assert [(e.ctx, e.index) for e in events if type(e).__name__ == "ReadReady"] == [("r", 21)]
