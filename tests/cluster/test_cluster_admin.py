"""Admin calls through the client: leadership transfer, removing a member and adding it
back (it catches up as a learner, then a CONFIG entry makes it a voter again)."""
from __future__ import annotations

from cluster_support import wait_until

from quorumlog.client import Client


def test_transfer_leadership_and_remove_then_add_a_member(make_cluster):
    c = make_cluster(3, flush="async")
    with c.client(request_timeout=3, retry_timeout=20) as cl:
        leader = c.wait_leader(client=cl)
        cl.produce("t", [b"a", b"b"])
        target = next(n for n in c.ids if n != leader)
        # the follower must hold the leader's whole log before the leader hands over
        st = cl.transfer_leadership(target)
        assert st.node_id == leader
        wait_until(lambda: c.wait_leader(client=cl, timeout=20) == target, 20,
                   f"{target} leading after the transfer")
        r = cl.produce("t", b"after transfer")
        assert r.first_index > 0
        # remove a follower: the group goes on with two voters
        gone = next(n for n in c.ids if n != target)
        wait_until(lambda: _try(cl.remove_member, gone), 20, "remove_member accepted")
        wait_until(lambda: gone not in cl.members(), 20, f"{gone} removed")
        cl.produce("t", b"two voters")
        # and back: a learner first, a voter once caught up
        wait_until(lambda: _try(cl.add_member, gone, c.peers[gone]), 20, "add_member accepted")
        wait_until(lambda: gone in cl.members(), 30, f"{gone} added back")
        r = cl.produce("t", b"three voters again")
    with Client([c.clients[gone]], secret=c.secret()) as m:
        wait_until(lambda: m.status(c.clients[gone]).commit_index >= r.first_index, 30,
                   f"{gone} catching up")
        assert sorted(m.members()) == sorted(c.ids)
    assert c.stop() == {n: 0 for n in c.ids}


def _try(fn, *args):
    """True once the call succeeds (a membership change is refused while another one, or
    the new leader's NOOP, is still uncommitted)."""
    from quorumlog.raft.errors import MembershipChangeError
    try:
        fn(*args)
        return True
    except MembershipChangeError:
        return False
