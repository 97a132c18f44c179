"""The flood harness's reading of the replicas' logs (python -m quorumlog.testing.flood):
only what was written since the flood began counts -- stalls (count, longest) and elections
won -- from every replica's log, a missing log counting nothing."""
from quorumlog.localcluster import LocalCluster
from quorumlog.testing.flood import log_events, log_sizes


def test_log_events_counts_stalls_and_elections_written_since_the_start(tmp_path):
    c = LocalCluster(tmp_path, 3)
    before = ("x INFO node n1: event loop stalled for 9000 ms\n"
              "x INFO node n1: LEADER in term 1 (leader n1)\n")
    (tmp_path / "n1.log").write_text(before)
    (tmp_path / "n2.log").write_text("")
    since = log_sizes(c)
    assert since == {"n1": len(before), "n2": 0, "n3": 0}
    with open(tmp_path / "n1.log", "a") as fh:
        fh.write("x INFO node n1: event loop stalled for 300 ms\n"
                 "x INFO node n1: FOLLOWER in term 2 (leader n2)\n")
    (tmp_path / "n2.log").write_text("x INFO node n2: event loop stalled for 1603 ms\n"
                                     "x INFO node n2: LEADER in term 2 (leader n2)\n")
    assert log_events(c, since) == {"loop_stalls": 2, "longest_stall_ms": 1603,
                                    "elections": 1}
