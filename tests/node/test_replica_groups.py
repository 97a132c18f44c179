"""quorumlog.open_replica over many Raft groups (issue 19, "the embedding API: role events carry
the group; a broker can open only the groups it wants"): three embedded replicas of a G = 4
directory, one opening only groups 0 and 3; puts routed by (topic, queue) -> group, read
back from every replica that opened the group; role events with their group; clear errors
(and nothing changed) for a queue of a group not opened, a group out of range, another G."""
from __future__ import annotations

import threading
import time

import pytest

import quorumlog
from quorumlog.errors import ConfigError, InvalidArgumentError, TopicNotFoundError
from quorumlog.localcluster import free_port
from quorumlog.net.messages import LeaderRedirectError, UnknownGroupError
from quorumlog.node.groups import group_of, preferred_leader
from quorumlog.node.service import ClientService
from quorumlog.testing.faults.cluster import wait_for

G = 4
PARTIAL = (0, 3)        # the groups n3 opens
TOPIC = "orders"
SECRET = "s" * 16


def _wait(cond, what: str, timeout: float = 20.0):
    got = wait_for(cond, timeout, interval=0.01)
    assert got, f"timed out waiting for {what}"
    return got


def _leader_of(reps, g):
    for r in reps:
        if g in r.open_groups and r.raft_group(g).is_ready_to_serve:
            return r
    return None


def _settled_leaders(reps):
    """group -> the replica leading it, once every group's leader is ready and is its
    preferred member when that member opened the group (leader balance moves it there)."""
    ids = sorted(r.cfg.node_id for r in reps)
    out = {}
    for g in range(G):
        r = _leader_of(reps, g)
        pref = next(x for x in reps if x.cfg.node_id == preferred_leader(g, ids))
        if r is None or (g in pref.open_groups and r is not pref):
            return None
        out[g] = r
    return out


def _put(reps, g, fn, deadline_s: float = 20.0):
    """fn(leader) on group g's leader, following a leadership change (an election on a
    loaded machine) until the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        r = _leader_of(reps, g)
        try:
            if r is not None:
                return r, fn(r)
        except LeaderRedirectError:
            pass
        assert time.monotonic() < deadline, f"no leader of group {g} took the put"
        time.sleep(0.02)


def _queue_in(g: int) -> int:
    return next(q for q in range(64) if group_of(TOPIC, q, G) == g)


def _max_offset(rep, q: int) -> int:
    """The queue's next offset on `rep`, -1 while its store has not applied the topic yet (a
    follower applies what the leader committed up to FOLLOWER_APPLY_DELAY_MS later)."""
    try:
        return rep.max_offset(TOPIC, q)
    except TopicNotFoundError:
        return -1


def test_three_replicas_g4_one_opening_some_groups(tmp_path):
    ids = ["n1", "n2", "n3"]
    peers = {i: f"127.0.0.1:{free_port()}" for i in ids}
    events = {i: [] for i in ids}
    lock = threading.Lock()
    reps = []
    try:
        for i in ids:
            def cb(group, ch, i=i):
                with lock:
                    events[i].append((group, ch))
            reps.append(quorumlog.open_replica(
                tmp_path / i, i, peers, secret=SECRET, flush="sync", groups=G,
                open_groups=list(PARTIAL) if i == "n3" else None,
                on_group_role_change=cb, segment_size_bytes=1 << 22))
        n1, n2, n3 = reps
        assert n3.open_groups == PARTIAL and n1.open_groups == tuple(range(G))
        leaders = _wait(lambda: _settled_leaders(reps), "every group's leader", 40)
        for g in (1, 2):                # n3 does not host them: n1 or n2 leads
            assert leaders[g] is not n3
        # group 2 prefers n3 (sorted voters, 2 mod 3), which did not open it: leader balance
        # must not hand it there (it asked every 5 s, each transfer stalling the group's
        # writes until it timed out)
        lead2 = leaders[2]
        assert preferred_leader(2, ids) == "n3"
        assert lead2._call(lead2._sync(lead2.host.balance_once)) != 2
        assert 2 not in lead2.host._asked
        _wait(lambda: n3.host.stats["not_open"], "n3 dropping frames of groups 1 and 2")
        written = {}
        for g in range(G):
            q = _queue_in(g)
            lead, r = _put(reps, g, lambda x: x.put(TOPIC, f"g{g}-a".encode(), queue_id=q))
            lead, rb = _put(reps, g, lambda x: x.put_batch(
                TOPIC, [f"g{g}-b".encode(), f"g{g}-c".encode()], queue_id=q))
            assert r.queue_id == q and rb.first_index > r.index
            written[g] = (q, r.queue_offset)
            other = next(x for x in reps if x is not lead and g in x.open_groups)
            with pytest.raises(LeaderRedirectError):
                other.put(TOPIC, b"not the leader", queue_id=q)
        for rep in reps:
            for g, (q, off) in written.items():
                if g not in rep.open_groups:
                    continue
                _wait(lambda: _max_offset(rep, q) >= off + 3, f"{rep} group {g}")
                got = [bytes(m.body) for m in rep.get(TOPIC, q, off, 10)]
                assert got == [f"g{g}-{c}".encode() for c in "abc"]
        # a queue of a group n3 did not open: a clear error, nothing sent, nothing changed
        q1 = _queue_in(1)
        n1_log = n1.raft_group(1).node.store.commitlog
        before = n1_log.last_index
        with pytest.raises(UnknownGroupError, match=r"group 1 of 4.*did not open"):
            n3.put(TOPIC, b"nowhere", queue_id=q1)
        with pytest.raises(UnknownGroupError, match="did not open"):
            n3.get(TOPIC, q1, 0)
        with pytest.raises(UnknownGroupError):
            n3.raft_group(2)
        with pytest.raises(UnknownGroupError):
            n1.raft_group(G)
        assert n1_log.last_index == before
        assert n1.max_offset(TOPIC, q1) == written[1][1] + 3
        # a put without a queue goes to a queue of a group this replica leads
        lead, r = _put(reps, 0, lambda x: x.put(TOPIC, b"any queue"))
        assert lead.raft_group(group_of(TOPIC, r.queue_id, G)).role == "LEADER"
        # n3 chooses among the queues of its own groups (it leads none of them now: their
        # leaders redirect); so does its client service for a produce with queue -1
        try:
            r = n3.put(TOPIC, b"a queue of n3's groups")
            assert group_of(TOPIC, r.queue_id, G) in PARTIAL
        except LeaderRedirectError:
            pass
        svc = ClientService(n3.host, n3.cfg)
        picked = {n3._call(n3._sync(svc._led_queue, TOPIC, G, k)) for k in range(2 * G)}
        assert {group_of(TOPIC, q, G) for q in picked} <= set(PARTIAL), picked
        # per-group accessors only: the single-group ones say so
        with pytest.raises(InvalidArgumentError, match="per group"):
            n1.role
        with pytest.raises(InvalidArgumentError, match="on_group_role_change"):
            n1.on_role_change(lambda ch: None)
        # role events name their group; n3 hears only of its own groups; every group's
        # leader heard LEADER then READY_TO_SERVE for it, and a follower its leader's id
        for g in range(G):
            lead = _wait(lambda g=g: _leader_of(reps, g), f"a leader of group {g}")
            lid = lead.cfg.node_id

            def told(g=g, lead=lead, lid=lid):
                with lock:
                    mine = [ch.role for gg, ch in events[lid] if gg == g]
                    fol = [[ch for gg, ch in events[o.cfg.node_id] if gg == g][-1:]
                           for o in reps if o is not lead and g in o.open_groups]
                return mine[-2:] == ["LEADER", "READY_TO_SERVE"] and all(
                    f and (f[0].role, f[0].leader_id) == ("FOLLOWER", lid) for f in fol)
            _wait(told, f"the role events of group {g}")
        with lock:
            assert {g for g, _ in events["n3"]} == set(PARTIAL)
        assert n3.status()["open_groups"] == list(PARTIAL)
    finally:
        for rep in reps:
            rep.close()
    assert all(rep.closed for rep in reps)


def test_bad_groups_input_refused(tmp_path):
    peers = {"n1": f"127.0.0.1:{free_port()}"}
    for bad in ([G], [-1], [], [1, 1], "0", [True]):
        with pytest.raises(ConfigError, match="open_groups"):
            quorumlog.open_replica(tmp_path / "a", "n1", peers, secret=SECRET, groups=G,
                                   open_groups=bad)
    assert not (tmp_path / "a").exists()       # nothing created
    with pytest.raises(ConfigError, match="open_groups"):
        quorumlog.open_replica(tmp_path / "b", "n1", peers, secret=SECRET, open_groups=[1])
    with pytest.raises(InvalidArgumentError, match="on_group_role_change"):
        quorumlog.open_replica(tmp_path / "c", "n1", peers, secret=SECRET, groups=G,
                               on_role_change=lambda ch: None)
    rep = quorumlog.open_replica(tmp_path / "d", "n1", peers, secret=SECRET, groups=G,
                                 open_groups=[2], segment_size_bytes=1 << 22)
    try:
        # one open group: the single-group accessors serve it
        assert rep.wait_ready_to_serve(10) and rep.role == "LEADER"
        assert rep.put(TOPIC, b"x", queue_id=_queue_in(2)).queue_id == _queue_in(2)
    finally:
        rep.close()
    with pytest.raises(ConfigError, match="holds 4 Raft groups, opened with groups=2"):
        quorumlog.open_replica(tmp_path / "d", "n1", peers, secret=SECRET, groups=2)
    with pytest.raises(ConfigError, match="holds 4 Raft groups, opened with groups=1"):
        quorumlog.open_replica(tmp_path / "d", "n1", peers, secret=SECRET)
    quorumlog.open_replica(tmp_path / "e", "n1", peers, secret=SECRET,
                           segment_size_bytes=1 << 22).close()
    with pytest.raises(ConfigError, match="single-group store.*open it with groups=1"):
        quorumlog.open_replica(tmp_path / "e", "n1", peers, secret=SECRET, groups=G)
    assert not (tmp_path / "e" / "groups.json").exists()
