"""A replica as `quorumlog bench` starts it: `python -m quorumlog.bench.replica --stats-file F
[--events-file E] <quorumlog serve arguments>` runs the unchanged replica server (`quorumlog
serve`) and adds two things: on SIGUSR1 it writes its counters to F as JSON (atomically: a
temporary file, then rename). The benchmark asks before and after a measured phase and reports
the difference (flushes and appends per replica), so nothing is counted or written while it
measures. With --events-file it appends one JSON line per election step to E as it happens
(the failover workload's phases, bench/phases.py): {"t_ns": time.monotonic_ns() -- one
clock for every process of the machine --, "node", "ev", ...} for a role change ("role":
CANDIDATE/FOLLOWER/LEADER, "term"), the first (pre-)vote request of each round it sends
("vote", "pre", "term"), each (pre-)vote request and answer it receives ("vote_req",
"vote_resp": "src", "pre", "term", "result"), the replication messages it receives in the
300 ms after a role change ("repl": "src", "type", "term", "what"), a peer connection lost
or a redial refused ("peer_lost" / "peer_refused", "peer"), the first commit of a new
leader's term ("commit") and ReadyToServe ("ready"). Elections are rare: a line each costs
nothing measurable.

Counters written: the commit log's stats() (appends, records, bytes, flushes, ...), the
producer table's duplicate count (retried batches answered from the table), the Raft role and
commit index, and the pid.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time

from .. import server
from ..cli.node import serve_main
from ..raft.core import ReadyToServe, RoleChanged
from ..raft.messages import (Append, AppendResponse, Heartbeat, HeartbeatResponse, Role,
                              VoteRequest, VoteResponse, VoteResult)

log = logging.getLogger(__name__)


def write_stats(node, path: str, siblings=()) -> None:
    """The node's counters -> `path` (JSON); with many groups per process (siblings: the
    other groups' Nodes) the commit-log counters and duplicates are the groups' sums."""
    cl = node.store.commitlog if node.store is not None else None
    doc = {"pid": os.getpid(), "node_id": node.id,
           "role": int(node.core.role) if node.core is not None else None,
           "commit_index": node.core.commit_index if node.core is not None else None,
           "commitlog": dict(cl.stats()) if cl is not None else None,
           "duplicates": node.stats["duplicates"]}
    for other in siblings:
        if other is node or other.store is None or doc["commitlog"] is None:
            continue
        for k, v in other.store.commitlog.stats().items():
            if isinstance(v, int) and isinstance(doc["commitlog"].get(k), int):
                doc["commitlog"][k] += v
        doc["duplicates"] += other.stats["duplicates"]
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


_VOTES = (VoteRequest, VoteResponse)
_REPLICATION = (Append, AppendResponse, Heartbeat, HeartbeatResponse)
REPLICATION_TRACE_NS = 300_000_000     # after a role change


class EventLog:
    """Election steps of one replica as JSON lines, appended (and flushed) as they happen."""

    def __init__(self, path: str, node_id: str):
        self.fh = open(path, "a")
        self.node_id = node_id
        self.rounds: set = set()         # (pre, term) of the vote rounds written
        self.awaiting_commit = None      # a new leader's term until its first commit
        self.replication_until_ns = 0    # replication messages written until then

    def write(self, ev: str, **kw) -> None:
        kw.update(t_ns=time.monotonic_ns(), node=self.node_id, ev=ev)
        self.fh.write(json.dumps(kw) + "\n")
        self.fh.flush()

    def on_event(self, ev, core) -> None:
        if isinstance(ev, RoleChanged):
            self.write("role", role=ev.role.name, term=ev.term, leader=ev.leader_id)
            self.awaiting_commit = ev.term if ev.role == Role.LEADER else None
            self.replication_until_ns = time.monotonic_ns() + REPLICATION_TRACE_NS
        elif isinstance(ev, ReadyToServe):
            self.write("ready", term=ev.term)

    def on_send(self, m) -> None:
        key = (m.pre, m.term)
        if key not in self.rounds:
            self.rounds.add(key)
            self.write("vote", pre=m.pre, term=m.term)

    def on_replication(self, m) -> None:
        """An APPEND / APPEND_RESP / HEARTBEAT(_RESP) received shortly after a role change
        (how a new leader's first entry reaches its followers)."""
        if time.monotonic_ns() > self.replication_until_ns:
            self.replication_until_ns = 0
            return
        self.write("repl", src=m.src, type=m.type_name, term=m.term, what=m.fields())

    def on_vote_message(self, m) -> None:
        """A (pre-)vote request or answer received: who, which round, what verdict."""
        if type(m) is VoteRequest:
            self.write("vote_req", src=m.src, pre=m.pre, term=m.term)
        else:
            self.write("vote_resp", src=m.src, pre=m.pre, term=m.req_term,
                       result=VoteResult(m.result).name)

    def on_commit(self, core, commit_index: int) -> None:
        t = self.awaiting_commit
        if t is not None and core.log.term_at(commit_index) == t:
            self.awaiting_commit = None
            self.write("commit", term=t, index=commit_index)


def _stats_node_class(path: str, events_path: str | None = None):
    started = []        # every group's Node of this process (the last handler sums them)

    class StatsNode(server.Node):
        """The server's Node with a SIGUSR1 handler that writes its counters."""

        async def start(self):
            await super().start()
            started.append(self)

            def dump():
                try:
                    write_stats(self, path, started)
                except Exception:  # noqa: BLE001 -- a failed dump must not stop the replica
                    log.exception("bench replica: writing %s failed", path)
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump)

    if events_path is None:
        return StatsNode

    class EventsNode(StatsNode):
        """... that also writes its election steps (EventLog) as they happen."""

        events: EventLog | None = None

        def _send(self, m) -> None:
            if type(m) is VoteRequest and self.events is not None:
                self.events.on_send(m)
            super()._send(m)

        def _commit(self, commit_index: int) -> None:
            if self.events is not None and self.events.awaiting_commit is not None:
                self.events.on_commit(self.core, commit_index)
            super()._commit(commit_index)

        def _on_message(self, peer: str, msg) -> None:
            ev = self.events
            if ev is not None:
                if type(msg) in _VOTES:
                    ev.on_vote_message(msg)
                elif ev.replication_until_ns and type(msg) in _REPLICATION:
                    ev.on_replication(msg)
            super()._on_message(peer, msg)

        def on_peer_lost(self, peer: str, refused: bool) -> None:
            if self.events is not None:
                self.events.write("peer_refused" if refused else "peer_lost", peer=peer)
            super().on_peer_lost(peer, refused)

        async def start(self):
            self.events = EventLog(events_path, self.id)
            self.events.write("start")
            await super().start()
            self.add_listener(lambda ev: self.events.on_event(ev, self.core))
    return EventsNode


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or argv[0] != "--stats-file":
        print("usage: python -m quorumlog.bench.replica --stats-file FILE [--events-file FILE] "
              "<server arguments>", file=sys.stderr)
        return 2
    path, rest = argv[1], argv[2:]
    events = None
    if len(rest) >= 2 and rest[0] == "--events-file":
        events, rest = os.path.abspath(rest[1]), rest[2:]
    # run_server builds its Node from the module's name: this process serves with StatsNode
    server.Node = _stats_node_class(os.path.abspath(path), events)
    return serve_main(rest)


if __name__ == "__main__":
    sys.exit(main())
