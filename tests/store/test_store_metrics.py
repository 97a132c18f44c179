"""quorumlog.metrics: the Prometheus collector over a store (appends, bytes, flushes and their
latency histogram, dispatch lag, consume queues, disk ratio), a replica's Raft metrics fed
through ReplicaMetrics, and the optional /metrics HTTP endpoint (port from the OS)."""
import urllib.request

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from quorumlog import metrics


def _samples(text):
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _scrape(collector):
    reg = CollectorRegistry()
    reg.register(collector)
    return _samples(generate_latest(reg).decode())


def test_store_metrics(open_store):
    s = open_store(disk_usage=lambda path: 0.42)
    s.create_topic("t", queues=3)
    s.put_batch("t", [b"x" * 100] * 30)
    s.put("t", b"y", queue_id=1)
    s.flush()
    s.flush()
    m = _scrape(metrics.StoreCollector(s))
    assert m[("quorumlog_appended_records_total", ())] == 31
    assert m[("quorumlog_messages_put_total", ())] == 31
    assert m[("quorumlog_appends_total", ())] == 2
    assert m[("quorumlog_appended_bytes_total", ())] == s.commitlog.end_position
    assert m[("quorumlog_consume_queues", ())] == 3
    assert m[("quorumlog_disk_used_ratio", ())] == 0.42
    assert m[("quorumlog_dispatch_lag_bytes", ())] == 0
    flushes = m[("quorumlog_flushes_total", ())]
    assert flushes >= 1
    assert m[("quorumlog_flush_duration_seconds_count", ())] == flushes
    assert m[("quorumlog_flush_duration_seconds_bucket", (("le", "+Inf"),))] == flushes
    assert m[("quorumlog_flush_duration_seconds_sum", ())] > 0
    assert ("quorumlog_raft_term", ()) not in m           # no replica given
    s.close()
    assert _scrape(metrics.StoreCollector(s)) == {}       # a closed store: no samples


def test_replica_metrics_fed_by_the_node(open_store):
    s = open_store()
    rm = metrics.ReplicaMetrics()
    rm.set_role("CANDIDATE", 3)
    rm.set_role("LEADER", 3)
    rm.set_commit_index(17)
    rm.set_follower_lag("n2", 0)
    rm.set_follower_lag("n3", 12)
    m = _scrape(metrics.StoreCollector(s, replica=rm))
    assert m[("quorumlog_raft_role", (("role", "leader"),))] == 1
    assert m[("quorumlog_raft_role", (("role", "follower"),))] == 0
    assert m[("quorumlog_raft_term", ())] == 3
    assert m[("quorumlog_raft_commit_index", ())] == 17
    assert m[("quorumlog_raft_elections_total", ())] == 0     # started as CANDIDATE
    assert m[("quorumlog_raft_follower_lag_entries", (("follower", "n3"),))] == 12
    rm.set_role("FOLLOWER", 4)
    rm.set_role("CANDIDATE", 5)
    m = _scrape(metrics.StoreCollector(s, replica=rm))
    assert m[("quorumlog_raft_elections_total", ())] == 1
    assert not [k for k in m if k[0] == "quorumlog_raft_follower_lag_entries"]


def test_metrics_http_endpoint(open_store):
    s = open_store()
    s.put("t", b"x")
    server, port = metrics.serve(s, port=0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body = r.read().decode()
        m = _samples(body)
        assert m[("quorumlog_messages_put_total", ())] == 1
    finally:
        server.shutdown()
        server.server_close()
