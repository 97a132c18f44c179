"""The failover workload's phases: where the time from a leader's SIGKILL to the next
acknowledgement goes, per kill, from what the processes wrote down as it happened (nothing
guessed, nothing timed by polling).

Sources, all on one clock (CLOCK_MONOTONIC: time.monotonic_ns in the replicas,
time.perf_counter_ns in the bench; the same clock on Linux, checked by `same_clock`):
  * each replica's events file (bench/replica.py EventLog): role changes, the first request
    of each (pre-)vote round it sends, a peer connection lost, a new leader's first commit
    and ReadyToServe;
  * the bench's producers (AsyncClient's trace hook): every attempt of a request ("send",
    with the member's client address), each failure ("error": exception name and the leader
    address a redirect named) and each backoff ("sleep");
  * the kill time and the acknowledgement that ended the gap (workloads/replicated.py).

Phases of one kill (milliseconds; None where the step did not happen):
  lost       kill -> a survivor's transport saw its connection to the killed leader close
  detect     kill -> the first survivor left FOLLOWER (gave the leader up)
  elect      that -> the new leader's RoleChanged(LEADER)
  commit     that -> the new leader's first commit of its term (its NOOP)
  client_err kill -> the first failed request (the producers noticed)
  find       new leader's first commit -> the first request sent to it once it led
             (negative: a request reached it before its first commit)
  serve      that request -> the acknowledgement that ended the gap (the new leader's
             producer table, rebuilt from its log before it takes a producer's batch, and
             the retried batches, resent oldest first, ahead of the put that ends the gap)
plus counts: pre-vote and vote rounds, the terms they spanned, client errors, backoff sleeps
(and their total) and redirects between the kill and the end of the gap.
"""
from __future__ import annotations

import json
import os
import statistics
import time

PHASES = ("lost", "detect", "elect", "commit", "client_err", "find", "serve")


def same_clock() -> bool:
    """The replicas' monotonic_ns and the bench's perf_counter_ns read one clock."""
    a = time.get_clock_info("perf_counter").implementation
    return a == time.get_clock_info("monotonic").implementation


def read_events(paths) -> list:
    """Every replica's events (JSON lines), sorted by time; a torn last line (a killed
    writer) is skipped."""
    out = []
    for path in paths:
        if not os.path.exists(path):
            continue
        with open(path) as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    out.sort(key=lambda e: e["t_ns"])
    return out


def _first(events, t0, t1, pred):
    return next((e for e in events if t0 <= e["t_ns"] <= t1 and pred(e)), None)


def _ms(a_ns, b_ns):
    return None if a_ns is None or b_ns is None else (b_ns - a_ns) / 1e6


def kill_phases(kill: dict, events: list, client: list, clients: dict) -> dict:
    """Phases of one kill. kill: {"node", "t_ns", "gap_ns"}; events: read_events(); client:
    [(t_ns, event, address, detail)] of the producers; clients: node id -> client address
    ("host:port")."""
    t0 = kill["t_ns"]
    if kill.get("gap_ns") is None:
        return {"node": kill["node"]}
    t_end = t0 + kill["gap_ns"]
    dead = kill["node"]
    lost = _first(events, t0, t_end, lambda e: e["ev"] == "peer_lost" and e["peer"] == dead)
    cand = _first(events, t0, t_end, lambda e: e["ev"] == "role" and e["node"] != dead
                  and e["role"] == "CANDIDATE")
    lead = _first(events, t0, t_end, lambda e: e["ev"] == "role" and e["role"] == "LEADER")
    t_lead = lead["t_ns"] if lead else None
    commit = None if lead is None else _first(
        events, t_lead, t_end, lambda e: e["ev"] == "commit" and e["node"] == lead["node"])
    t_commit = commit["t_ns"] if commit else None
    rounds = [e for e in events if t0 <= e["t_ns"] <= (t_lead or t_end) and e["ev"] == "vote"]
    terms = sorted({e["term"] for e in rounds if not e["pre"]})
    mine = [c for c in client if t0 <= c[0] <= t_end]
    errors = [c for c in mine if c[1] == "error"]
    sleeps = [c[3] for c in mine if c[1] == "sleep"]
    new_addr = clients.get(lead["node"]) if lead else None
    t_send = None
    if t_lead is not None and new_addr is not None:
        # the first request that reached the new leader once it led (the producers found it)
        t_send = next((c[0] for c in mine if c[1] == "send" and c[0] >= t_lead
                       and _addr(c[2]) == new_addr), None)
    return {"node": dead, "new_leader": lead["node"] if lead else None,
            "lost": _ms(t0, lost["t_ns"] if lost else None),
            "detect": _ms(t0, cand["t_ns"] if cand else None),
            "elect": _ms(cand["t_ns"] if cand else None, t_lead),
            "commit": _ms(t_lead, t_commit),
            "client_err": _ms(t0, errors[0][0] if errors else None),
            "find": _ms(t_commit, t_send),
            "serve": _ms(t_send, t_end),
            "pre_vote_rounds": sum(1 for e in rounds if e["pre"]),
            "vote_rounds": sum(1 for e in rounds if not e["pre"]),
            "terms": len(terms),
            "client_errors": len(errors),
            "redirects": sum(1 for c in errors if len(c[3].split()) > 1),
            "sleeps": len(sleeps), "slept_ms": round(sum(sleeps) * 1e3, 1)}


def _addr(a) -> str | None:
    if a is None:
        return None
    return a if isinstance(a, str) else f"{a[0]}:{a[1]}"


def leader_changes(events: list, t0_ns: int, t1_ns: int) -> int:
    """RoleChanged(LEADER) events in [t0, t1]: elections won (a run without kills should
    have none after its first)."""
    return sum(1 for e in events if t0_ns <= e["t_ns"] <= t1_ns and e["ev"] == "role"
               and e["role"] == "LEADER")


def stray_elections(events: list, kills: list, t0_ns: int, t1_ns: int) -> list:
    """Elections won in [t0, t1] outside every kill's gap -> [(ms after the kill before it
    (None: before the first), node, term)]: spurious ones, or a second one after a kill."""
    out = []
    for e in events:
        if not (t0_ns <= e["t_ns"] <= t1_ns and e["ev"] == "role" and e["role"] == "LEADER"):
            continue
        before = [k for k in kills if k["t_ns"] <= e["t_ns"]]
        k = before[-1] if before else None
        if k is not None and k.get("gap_ns") is not None and e["t_ns"] <= k["t_ns"] + k["gap_ns"]:
            continue
        out.append((None if k is None else round((e["t_ns"] - k["t_ns"]) / 1e6),
                    e["node"], e["term"]))
    return out


def medians(per_kill: list) -> dict:
    """The median of each phase over the kills where it happened."""
    out = {}
    for p in PHASES + ("pre_vote_rounds", "vote_rounds", "terms", "client_errors",
                       "sleeps", "slept_ms"):
        vals = [k[p] for k in per_kill if k.get(p) is not None]
        out[p] = round(statistics.median(vals), 1) if vals else None
    return out


def describe(per_kill: list) -> str:
    """One line per kill for the notes."""
    def f(v):
        return "-" if v is None else f"{v:.0f}"
    return "; ".join(
        f"{k['node']}->{k.get('new_leader')}: " + " ".join(
            f"{p} {f(k.get(p))}" for p in PHASES)
        + f" (pre {k.get('pre_vote_rounds')}, votes {k.get('vote_rounds')}, errors "
          f"{k.get('client_errors')}, slept {k.get('slept_ms')} ms)" for k in per_kill)
