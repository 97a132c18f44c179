"""A follower that was stopped (SIGSTOP) and resumed, and one that restarted with its
unflushed tail lost, catch up with the leader and end byte-identical to it."""
from __future__ import annotations

import os
import re
import signal

from cluster_support import Producers, assert_logs_identical, checkpoint, wait_until

from quorumlog.client import Client


def _caught_up(c, admin, nid):
    """nid's last index and commit index have reached the leader's commit index."""
    st = c.statuses(admin)
    leaders = [s for s in st.values() if not isinstance(s, Exception) and s.role == 2]
    f = st[nid]
    if len(leaders) != 1 or isinstance(f, Exception):
        return False
    return f.last_index >= leaders[0].commit_index and f.commit_index >= leaders[0].commit_index


def _run_load_around(c, action, settle_s=1.0):
    secret = c.secret()
    with c.client(request_timeout=2, retry_timeout=2) as admin:
        leader = c.wait_leader(client=admin)
        follower = next(n for n in c.ids if n != leader)
        prod = Producers(c.client_addresses(), secret, n=2, batch=20)
        prod.thread.start()
        try:
            wait_until(lambda: prod.count() > 300 or prod.errors, 30, "load")
            action(follower)
            before = prod.count()
            wait_until(lambda: prod.count() > before + 300 or prod.errors, 30,
                       "load after the follower came back")
        finally:
            prod.stop.set()
            prod.thread.join(60)
        assert not prod.errors, prod.errors
        wait_until(lambda: _caught_up(c, admin, follower), 60, f"{follower} catching up")
    with Client([c.clients[follower]], secret=secret) as m:
        for q, first, bodies in prod.acked[-20:]:
            r = m.fetch("events", q, first, max_messages=len(bodies))
            assert [bytes(x.body) for x in r.messages] == bodies
    assert c.stop() == {n: 0 for n in c.ids}
    assert_logs_identical(c)
    return follower


def test_follower_stopped_with_sigstop_and_resumed_catches_up(make_cluster):
    c = make_cluster(3, flush="sync")
    seen = {}

    def commit_of_leader(stopped):
        # asked of the two running members only (the stopped one would not answer)
        with c.client(request_timeout=2, retry_timeout=5) as admin:
            st = [admin.status(c.clients[n]) for n in c.ids if n != stopped]
        return max(s.commit_index for s in st if s.role == 2)

    def pause(f):
        c.signal(f, signal.SIGSTOP)
        try:
            seen["before"] = commit_of_leader(f)
            # the group keeps committing with the other two: f falls 100 entries behind
            seen["during"] = wait_until(
                lambda: (lambda x: x if x >= seen["before"] + 100 else 0)(commit_of_leader(f)),
                30, f"the group committing 100 entries while {f} is stopped")
        finally:
            c.signal(f, signal.SIGCONT)
    f = _run_load_around(c, pause)
    assert f in c.ids
    # sync flush: the leader and the other follower made a majority while f was stopped (the
    # wait in pause() fails the test otherwise)


def _zero_after(d: str, flushed: int) -> int:
    """Zero every byte of the commit log in `d` past the position `flushed`, as a lost page
    cache would leave it -> the end of the data that was there (past the last nonzero byte)."""
    data_end = 0
    for name in sorted(n for n in os.listdir(d) if n.isdigit()):   # (not the .free pool)
        start = int(name)
        with open(os.path.join(d, name), "r+b") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            cut = min(max(flushed - start, 0), size)
            fh.seek(cut)
            tail = fh.read().rstrip(b"\0")
            if tail:
                data_end = max(data_end, start + cut + len(tail))
                fh.seek(cut)
                fh.write(b"\0" * len(tail))
    return data_end


def test_follower_restarted_with_its_unflushed_tail_lost_catches_up(make_cluster):
    c = make_cluster(3, flush="async")
    lost = {}

    def crash_and_lose_tail(f):
        c.kill(f)
        # kill -9 keeps the page cache; a power loss would not: zero everything after the
        # flushed position the checkpoint vouches for
        lost["flushed"] = checkpoint(c, f).flushed_position
        lost["data_end"] = _zero_after(os.path.join(c.data_dir(f), "commitlog"), lost["flushed"])
        # (under load an async follower always holds appends the last flush did not cover)
        assert lost["data_end"] > lost["flushed"], ("nothing unflushed to lose", lost)
        c.restart(f)
    f = _run_load_around(c, crash_and_lose_tail)
    # the restarted follower really came back shorter than it was (it lost entries it had
    # acknowledged, in async mode) and still caught up
    m = re.findall(r"unclean open; log ends at position (\d+) \(index \d+\)",
                   open(c.log_file(f)).read())
    assert m and int(m[-1]) <= lost["flushed"] < lost["data_end"], (m, lost)
