"""bench/phases.py: a kill's gap split into phases from the replicas' events and the
producers' trace (synthetic streams here; tests/bench_tool/test_bench_cluster.py checks a
real run's)."""
from quorumlog.bench.phases import (describe, kill_phases, leader_changes, medians,
                                    stray_elections)

MS = 1_000_000


def _events():
    e = [("n2", "peer_lost", {"peer": "n1"}, 30), ("n2", "peer_refused", {"peer": "n1"}, 31),
         ("n2", "vote", {"pre": True, "term": 3}, 32),
         ("n2", "role", {"role": "CANDIDATE", "term": 2, "leader": None}, 32),
         ("n3", "role", {"role": "CANDIDATE", "term": 2, "leader": None}, 35),
         ("n2", "vote", {"pre": False, "term": 3}, 40),
         ("n2", "role", {"role": "LEADER", "term": 3, "leader": "n2"}, 50),
         ("n3", "role", {"role": "FOLLOWER", "term": 3, "leader": "n2"}, 51),
         ("n2", "commit", {"term": 3, "index": 99}, 55),
         ("n2", "role", {"role": "LEADER", "term": 9, "leader": "n2"}, 5000)]
    return [dict(kw, node=n, ev=ev, t_ns=t * MS) for n, ev, kw, t in e]


def test_a_kill_is_split_into_phases():
    client = [(36 * MS, "error", ("127.0.0.1", 1), "TransportClosedError "),
              (37 * MS, "send", ("127.0.0.1", 3), True),
              (38 * MS, "error", ("127.0.0.1", 3), "LeaderRedirectError 127.0.0.1:2"),
              (39 * MS, "sleep", None, 0.01),
              (60 * MS, "send", ("127.0.0.1", 2), True),
              (70 * MS, "send", ("127.0.0.1", 2), False)]
    addrs = {"n1": "127.0.0.1:1", "n2": "127.0.0.1:2", "n3": "127.0.0.1:3"}
    p = kill_phases({"node": "n1", "t_ns": 0, "gap_ns": 80 * MS}, _events(), client, addrs)
    assert p["new_leader"] == "n2"
    assert (p["lost"], p["detect"], p["elect"], p["commit"]) == (30, 32, 18, 5)
    assert (p["client_err"], p["find"], p["serve"]) == (36, 5, 20)
    assert (p["pre_vote_rounds"], p["vote_rounds"], p["terms"]) == (1, 1, 1)
    assert (p["client_errors"], p["redirects"], p["sleeps"], p["slept_ms"]) == (2, 1, 1, 10.0)
    assert medians([p, {"node": "n3"}])["elect"] == 18
    assert "n1->n2" in describe([p])


def test_an_unanswered_kill_has_no_phases_and_elections_are_counted_in_a_window():
    assert kill_phases({"node": "n1", "t_ns": 0, "gap_ns": None}, _events(), [], {}) == \
        {"node": "n1"}
    assert leader_changes(_events(), 0, 100 * MS) == 1
    assert leader_changes(_events(), 0, 6000 * MS) == 2


def test_elections_outside_the_kills_gaps_are_listed():
    kills = [{"node": "n1", "t_ns": 0, "gap_ns": 80 * MS}]
    assert stray_elections(_events(), kills, 0, 6000 * MS) == [(5000, "n2", 9)]
    assert stray_elections(_events(), kills, 0, 100 * MS) == []
