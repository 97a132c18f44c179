"""The replicated node's performance goals, printed beside the cluster and failover rows as a
ratio (1.0 = the goal is met exactly; 0.19 = 19 % of it). A goal applies only to a run of its
shape: 1 KiB messages, 3 replicas, acknowledged after majority commit, plus the shape of the
load below. Other runs get no goal (not a misleading one).

  cluster, --batch > 1, --flush async        >= 500 MB/s
  cluster, --batch > 1, --flush sync         >= 300 MB/s
  cluster, 1 producer, --batch 1, --window 1  p50 <= 0.25 ms (one message at a time)
  cluster, --flush sync, 64 producers, --batch 1, --window 1   >= 200,000 msg/s
  failover                                    kill -9 of the leader -> next ack, p99 <= 1 s
"""
from __future__ import annotations

from .options import KiB, Resolved

GOAL_SIZE = KiB
GOAL_REPLICAS = 3


def _goal(name: str, target: float, unit: str, measured: float | None, higher_is_better: bool):
    if measured is None:
        ratio = None
    elif higher_is_better:
        ratio = measured / target
    else:
        ratio = target / measured if measured > 0 else None
    return {"name": name, "target": target, "unit": unit, "measured": measured,
            "higher_is_better": higher_is_better, "ratio": ratio}


def cluster_goal(r: Resolved, *, MBps: float, msgs_per_s: float,
                 p50_us: float | None) -> dict | None:
    """The goal a cluster run of this shape is held to, or None."""
    if r.size != GOAL_SIZE or r.replicas != GOAL_REPLICAS:
        return None
    if r.batch > 1:
        target = 500.0 if r.flush == "async" else 300.0
        return _goal(f"{r.flush} throughput", target, "MB/s", MBps, True)
    if r.window == 1 and r.producers == 1:
        return _goal("one message at a time, p50", 0.25, "ms",
                     None if p50_us is None else p50_us / 1e3, False)
    if r.window == 1 and r.producers == 64 and r.flush == "sync":
        return _goal("64 producers of single messages, sync", 200_000.0, "msg/s", msgs_per_s,
                     True)
    return None


def failover_goal(r: Resolved, gap_p99_s: float | None) -> dict | None:
    if r.size != GOAL_SIZE or r.replicas != GOAL_REPLICAS:
        return None
    return _goal("kill -9 of the leader -> next ack, p99", 1.0, "s", gap_p99_s, False)
