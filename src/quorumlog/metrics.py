"""Prometheus metrics of a store, and of a replica (fed by the replicated node).

    from prometheus_client import REGISTRY
    REGISTRY.register(quorumlog.metrics.StoreCollector(store))       # an app's own registry
    server, port = quorumlog.metrics.serve(store, port=9108)         # or a /metrics endpoint

`StoreCollector` reads `MessageStore.stats()` (and the log's counters) at each scrape: nothing
is counted on the put path that the store does not count already. Counters are since the
store was opened (Prometheus handles the reset of a restart). A replica's Raft state is not
the store's: the node feeds a `ReplicaMetrics` (role, term, commit index, per-follower lag,
elections, term changes, its connections to each peer per lane) and passes it to the
collector; `StoreCollector(store, replica=rm)`. A node with `metrics_addr` set serves its own
/metrics (quorumlog.node.NodeConfig).

Names follow Prometheus conventions (`quorumlog_` prefix, base units, `_total` counters);
docs/operations.md lists them.
"""
from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)

from .commitlog import FLUSH_LATENCY_BUCKETS_NS

__all__ = ["StoreCollector", "GroupsCollector", "ReplicaMetrics", "serve", "serve_collector",
           "ROLES"]

ROLES = ("LEADER", "FOLLOWER", "CANDIDATE")
MAX_FOLLOWERS = 64          # per-follower series kept (a limit on what a node can feed)
LANES = ("data", "control")


class ReplicaMetrics:
    """What the replicated node reports for the collector: set by the node's driver as its
    core's Ready events arrive, read at each scrape. Thread-safe; every method is O(1)."""

    def __init__(self, term: int = 0):
        self._lock = threading.Lock()
        self.role = "CANDIDATE"        # a node starts as CANDIDATE (DLedger)
        self.term = term               # (a restarted replica starts at its saved term)
        self.commit_index = 0
        self.elections = 0             # elections this node started (became CANDIDATE)
        # times this replica's term rose: every election in the group that reached it,
        # whoever ran it (with pre-vote, a candidacy that no quorum would support does not
        # raise a term; a spurious election does)
        self.term_changes = 0
        self.loop_stalls = 0           # the node's event loop did not run for > 250 ms
        self.follower_lag: dict[str, int] = {}   # leader only: entries behind, per follower
        # (peer, lane) -> (connected 0/1, connections made, connections lost), lane in LANES
        self.links: dict[tuple[str, str], tuple[int, int, int]] = {}

    def _term(self, term: int) -> None:
        if term > self.term:
            self.term_changes += 1
            self.term = term

    def set_role(self, role: str, term: int) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        with self._lock:
            if role == "CANDIDATE" and self.role != "CANDIDATE":
                self.elections += 1
            self.role = role
            self._term(term)
            if role != "LEADER":
                self.follower_lag.clear()

    def set_term(self, term: int) -> None:
        """The replica's current term (it only rises; each rise is counted)."""
        with self._lock:
            self._term(term)

    def election_started(self, term: int) -> None:
        with self._lock:
            self.elections += 1
            self._term(term)

    def set_loop_stalls(self, n: int) -> None:
        self.loop_stalls = n

    def set_link(self, peer: str, lane: str, connected: bool, connects: int,
                 disconnects: int) -> None:
        """The state of this replica's `lane` connection to `peer` (transport counters)."""
        if lane not in LANES:
            raise ValueError(f"lane must be one of {LANES}, got {lane!r}")
        key = (str(peer), lane)
        with self._lock:
            if key in self.links or len(self.links) < MAX_FOLLOWERS * len(LANES):
                self.links[key] = (int(bool(connected)), int(connects), int(disconnects))

    def set_commit_index(self, index: int) -> None:
        self.commit_index = index

    def set_follower_lag(self, follower: str, entries: int) -> None:
        with self._lock:
            if follower in self.follower_lag or len(self.follower_lag) < MAX_FOLLOWERS:
                self.follower_lag[str(follower)] = int(entries)

    def snapshot(self) -> dict:
        with self._lock:
            return dict(role=self.role, term=self.term, commit_index=self.commit_index,
                        elections=self.elections, term_changes=self.term_changes,
                        loop_stalls=self.loop_stalls, follower_lag=dict(self.follower_lag),
                        links=dict(self.links))


def _counter(name, doc, value):
    c = CounterMetricFamily(name, doc)
    c.add_metric([], value)
    return c


def _gauge(name, doc, value):
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], value)
    return g


class StoreCollector:
    """A prometheus_client collector over one MessageStore (and optionally a replica's
    ReplicaMetrics). A closed store yields no samples."""

    def __init__(self, store, replica: ReplicaMetrics | None = None):
        self.store = store
        self.replica = replica

    def describe(self):
        return []       # unchecked collector: families are produced at scrape time

    def collect(self):
        if self.store.closed:
            return
        try:
            st = self.store.stats()
        except Exception:       # closed between the check and the call
            if self.store.closed:
                return
            raise
        lg = st["log"]
        yield _counter("quorumlog_appends", "commit-log append calls", lg["appends"])
        yield _counter("quorumlog_appended_records", "records appended", lg["records"])
        yield _counter("quorumlog_appended_bytes", "bytes appended to the log", lg["bytes"])
        yield _counter("quorumlog_puts", "put / put_batch calls", st["puts"])
        yield _counter("quorumlog_messages_put", "messages put", st["messages_put"])
        yield _counter("quorumlog_gets", "get calls", st["gets"])
        yield _counter("quorumlog_messages_got", "messages returned by get", st["messages_got"])
        yield _counter("quorumlog_flushes", "log flushes (one per group commit)", lg["flushes"])
        yield self._flush_histogram(lg)
        yield _gauge("quorumlog_dispatch_lag_bytes",
                     "committed bytes not yet in the consume queues",
                     st["committed_position"] - st["dispatched_position"])
        yield _gauge("quorumlog_unflushed_bytes", "appended bytes not yet flushed",
                     st["end_position"] - st["flushed_position"])
        yield _gauge("quorumlog_uncommitted_bytes", "appended bytes not yet committed",
                     st["end_position"] - st["committed_position"])
        yield _gauge("quorumlog_consume_queues", "consume queues (all topics)", st["queues"])
        yield _gauge("quorumlog_topics", "user topics", st["topics"])
        yield _gauge("quorumlog_segments", "commit-log segment files", lg["segments"])
        yield _gauge("quorumlog_last_index", "raft index of the last record", lg["last_index"])
        yield _gauge("quorumlog_disk_used_ratio", "used fraction of the store's file system",
                     st["disk_used_ratio"])
        yield _gauge("quorumlog_disk_full", "1 while puts are rejected (disk_reject_ratio)",
                     int(st["disk_full"]))
        yield _counter("quorumlog_disk_full_rejects", "puts rejected: disk full",
                       st["disk_full_rejects"])
        yield _counter("quorumlog_segments_deleted", "segments deleted by retention",
                       st["segments_deleted"])
        yield _counter("quorumlog_dispatch_stalls", "dispatch stopped by a full disk",
                       st["dispatch_stalls"])
        yield _counter("quorumlog_dispatch_rejected",
                       "replicated records not dispatched (bad topic / queue)",
                       st["dispatch_rejected"])
        yield _counter("quorumlog_dispatch_conflicts",
                       "records claiming an offset their queue holds elsewhere",
                       st["dispatch_conflicts"])
        yield _gauge("quorumlog_pending_requests", "puts waiting for their commit",
                     st["pending_requests"])
        if self.replica is not None:
            yield from self._replica(self.replica.snapshot())

    @staticmethod
    def _flush_histogram(lg):
        counts = lg["flush_latency_counts"]
        buckets, acc = [], 0
        for bound, n in zip(FLUSH_LATENCY_BUCKETS_NS, counts):
            acc += n
            buckets.append((repr(bound / 1e9), acc))
        acc += counts[-1]
        buckets.append(("+Inf", acc))
        h = HistogramMetricFamily("quorumlog_flush_duration_seconds",
                                  "duration of a log flush (msync of the appended range)")
        h.add_metric([], buckets, lg["flush_latency_ns_total"] / 1e9)
        return h

    @staticmethod
    def _replica(r):
        role = GaugeMetricFamily("quorumlog_raft_role", "1 for this replica's current role",
                                 labels=["role"])
        for name in ROLES:
            role.add_metric([name.lower()], int(r["role"] == name))
        yield role
        yield _gauge("quorumlog_raft_term", "current Raft term", r["term"])
        yield _gauge("quorumlog_raft_commit_index", "Raft commit index", r["commit_index"])
        yield _counter("quorumlog_raft_elections", "elections this replica started",
                       r["elections"])
        lag = GaugeMetricFamily("quorumlog_raft_follower_lag_entries",
                                "leader: entries a follower is behind", labels=["follower"])
        for follower, n in sorted(r["follower_lag"].items()):
            lag.add_metric([follower], n)
        yield lag
        yield _counter("quorumlog_raft_term_changes",
                       "times this replica's term rose (elections in the group)",
                       r["term_changes"])
        yield _counter("quorumlog_node_loop_stalls",
                       "times the node's event loop did not run for over 250 ms",
                       r["loop_stalls"])
        up = GaugeMetricFamily("quorumlog_peer_connected",
                               "1 while the connection to a peer is up, per lane",
                               labels=["peer", "lane"])
        made = CounterMetricFamily("quorumlog_peer_connects",
                                   "connections to a peer established (first and reconnects)",
                                   labels=["peer", "lane"])
        lost = CounterMetricFamily("quorumlog_peer_disconnects", "connections to a peer lost",
                                   labels=["peer", "lane"])
        for (peer, lane), (connected, connects, disconnects) in sorted(r["links"].items()):
            up.add_metric([peer, lane], connected)
            made.add_metric([peer, lane], connects)
            lost.add_metric([peer, lane], disconnects)
        yield up
        yield made
        yield lost


class GroupsCollector:
    """The metrics of every Raft group of a process (node/host.py), one scrape: each
    group's StoreCollector families, every sample labelled `group` ("0", "1", ...).
    groups: a callable -> [(store, ReplicaMetrics), ...] in group order."""

    def __init__(self, groups):
        self.groups = groups

    def describe(self):
        return []

    def collect(self):
        merged: dict = {}
        for g, (store, replica) in enumerate(self.groups()):
            for fam in StoreCollector(store, replica).collect():
                out = merged.get(fam.name)
                if out is None:
                    out = merged[fam.name] = Metric(fam.name, fam.documentation, fam.type)
                for s in fam.samples:
                    out.add_sample(s.name, {**s.labels, "group": str(g)}, s.value)
        yield from merged.values()


def serve(store, port: int = 0, addr: str = "127.0.0.1", replica: ReplicaMetrics | None = None):
    """Serve /metrics of `store` over HTTP on a thread of its own -> (server, port).
    port=0 picks a free port; stop with server.shutdown(); server.server_close()."""
    return serve_collector(StoreCollector(store, replica), port, addr)


def serve_collector(collector, port: int = 0, addr: str = "127.0.0.1"):
    """Serve /metrics of one collector (StoreCollector, GroupsCollector) -> (server, port)."""
    registry = CollectorRegistry()
    registry.register(collector)
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server, server.server_port
