"""A follower that lost entries it had acknowledged (flush = "async": acknowledged at
page-cache level, then a power loss) is caught up by the leader instead of being sent past
its end forever."""
import pytest

from quorumlog.raft.messages import Role
from quorumlog.testing.cluster import ManualCluster


# without the re-probe the leader and n2 exchange APPEND / GAP without end (the hand-driven
# pump never returns): the timeout turns that into a failure
@pytest.mark.timeout(60)
def test_leader_reprobes_a_follower_that_lost_acknowledged_entries():
    c = ManualCluster(("n1", "n2", "n3"))
    c.elect("n1")
    for _ in range(5):
        c.propose("n1", count=4)
        c.deliver()
    leader = c.core("n1")
    assert leader.role == Role.LEADER
    end = leader.log.last_index()
    assert leader.progress["n2"].match == end
    # n2 loses its last 10 entries durably (its page cache was lost), and restarts
    c.logs["n2"].truncate_after(end - 10)
    c.logs["n2"].flush()
    c.crash("n2")
    c.restart("n2")
    assert c.core("n2").log.last_index() == end - 10
    # the leader keeps appending; n2 answers GAP below its old match, the leader re-probes
    # and replicates the lost entries again
    for k in range(6):
        c.propose("n1", count=2)
        c.settle(c.now + 200)
    assert c.core("n2").log.last_index() == leader.log.last_index()
    assert leader.progress["n2"].match == leader.log.last_index()
    assert c.core("n2").commit_index == leader.commit_index
