"""The replicated workloads of `quorumlog bench` (`cluster`, `failover`): their options, tiny runs
against real replica processes on loopback (started by the workload, or running ones reached
with --connect), the JSON they write, and the integrity check failing when a message is lost
or a replica's log differs. Numbers are not judged here (goals live in docs/benchmarks.md)."""
import os

import jsonschema
import pytest

from quorumlog.bench import cluster as bench_cluster
from quorumlog.bench.goals import cluster_goal, failover_goal
from quorumlog.bench.options import BenchOptionError, BenchOptions, parse_connect, resolve
from quorumlog.bench.workloads import replicated

# each run is bounded by the workload's own deadlines; this is the backstop (the workload's
# finally stops every replica it started, by pid)
pytestmark = pytest.mark.timeout(300)

@pytest.fixture(autouse=True)
def small_segments(monkeypatch):
    """16 MiB segments: each replica preallocates one, not 256 MiB."""
    monkeypatch.setattr(bench_cluster, "SEGMENT_BYTES", 16 << 20)


@pytest.fixture
def schema():
    import importlib.resources
    import json
    return json.loads(importlib.resources.files("quorumlog.bench").joinpath("schema.json")
                      .read_text())


def _checked(run, schema):
    assert run.exit_code == 0, run.output + run.stderr
    jsonschema.validate(run.doc, schema)
    (row,) = run.doc["results"]
    integ = row["integrity"]
    assert integ["ok"] is True
    assert integ["missing"] == 0 and integ["duplicates"] == 0 and integ["misplaced"] == 0
    assert integ["read_back"] == integ["acknowledged"] == row["messages"]
    return row


# ------------------------------------------------------------------------------ options

@pytest.mark.parametrize("argv, message", [
    (["cluster", "--connect", "localhost"], "'localhost' is not host:port"),
    (["cluster", "--connect", "h:1,h:1"], "an address is given twice"),
    (["cluster", "--connect", "h:99999"], "'h:99999' is not host:port"),
    (["cluster", "--kills", "2"], "--kills does not apply to the cluster workload"),
    (["failover", "--connect", "h:1"], "--connect does not apply to the failover workload"),
    (["failover", "--count", "10"], "--count does not apply to the failover workload"),
    (["failover", "--kill-every", "0.1"], "0.1 is not in the range 0.5<=x<=3600.0"),
    (["failover", "--kills", "0"], "0 is not in the range 1<=x<=1000"),
    (["failover", "--replicas", "1"], "failover needs at least 3"),
    (["store", "--kill-every", "2"], "--kill-every does not apply to the store workload"),
    (["cluster", "--producers", "256", "--window", "8", "--batch", "10000"],
     "bytes of bodies in flight"),
    (["failover", "--window", "9"], "keeps at most 8 batches in flight"),
])
def test_bad_replicated_options_exit_2(invoke, argv, message):
    res = invoke("bench", *argv, "--no-references")
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "result:" not in res.output


def test_secret_file_needs_connect(invoke, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("x" * 32 + "\n")
    res = invoke("bench", "cluster", "--secret-file", str(secret), "--no-references")
    assert res.exit_code == 2 and "--secret-file goes with --connect" in res.output


def test_connect_and_failover_options_parse():
    assert parse_connect("127.0.0.1:7001, host-b:7002") == ("127.0.0.1:7001", "host-b:7002")
    with pytest.raises(BenchOptionError):
        parse_connect(",")
    o = BenchOptions(kills=5, kill_every_s=1.5)
    r = resolve(o, replicated.FailoverWorkload.defaults)
    assert (r.kills, r.kill_every_s, r.count, r.duration_s) == (5, 1.5, None, None)
    r = resolve(BenchOptions(), replicated.FailoverWorkload.defaults)
    assert (r.kills, r.kill_every_s) == (3, 4.0)
    with pytest.raises(BenchOptionError, match="--kill-every"):
        BenchOptions(kill_every_s=0.1)


def test_failover_help_shows_its_defaults(invoke):
    res = invoke("bench", "failover", "--help")
    assert res.exit_code == 0
    assert "--kills" in res.output and "Default: 3." in res.output
    assert "--kill-every" in res.output and "Default: 4 s." in res.output
    assert "--connect" not in res.output and "--count" not in res.output
    res = invoke("bench", "cluster", "--help")
    assert "--connect" in res.output and "--secret-file" in res.output
    assert "--kills" not in res.output


def test_goals_apply_only_to_their_shape():
    base = resolve(BenchOptions(), replicated.ClusterWorkload.defaults)
    g = cluster_goal(base, MBps=50.0, msgs_per_s=5e4, p50_us=900.0)
    assert (g["target"], g["unit"], g["ratio"]) == (500.0, "MB/s", 0.1)
    sync = resolve(BenchOptions(flush="sync"), replicated.ClusterWorkload.defaults)
    assert cluster_goal(sync, MBps=60.0, msgs_per_s=1, p50_us=1)["ratio"] == 0.2
    one = resolve(BenchOptions(producers=1, batch=1, window=1),
                  replicated.ClusterWorkload.defaults)
    g = cluster_goal(one, MBps=1, msgs_per_s=1, p50_us=500.0)
    assert (g["unit"], g["measured"], g["ratio"]) == ("ms", 0.5, 0.5)
    many = resolve(BenchOptions(producers=64, batch=1, window=1, flush="sync"),
                   replicated.ClusterWorkload.defaults)
    assert cluster_goal(many, MBps=1, msgs_per_s=20_000.0, p50_us=1)["ratio"] == 0.1
    other = resolve(BenchOptions(size=100), replicated.ClusterWorkload.defaults)
    assert cluster_goal(other, MBps=1, msgs_per_s=1, p50_us=1) is None
    f = resolve(BenchOptions(), replicated.FailoverWorkload.defaults)
    assert failover_goal(f, 2.0)["ratio"] == 0.5
    assert failover_goal(f, None)["ratio"] is None


# ---------------------------------------------------------------------------- tiny runs

def _processes_using(path) -> list:
    """Pids whose command line names `path` (replicas get their directories as arguments)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if str(path).encode() in fh.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def test_cluster_tiny_run(bench, schema, tmp_path):
    run = bench("cluster", "--count", "1200", "--batch", "40", "--producers", "2",
                "--window", "3", "--flush", "sync")
    row = _checked(run, schema)
    assert row["op"] == "produce b40 w3" and row["messages"] == 1200
    assert row["latency"]["unit"] == "message" and row["latency"]["count"] == 1200
    reps = row["replicas"]
    assert sorted(reps) == ["n1", "n2", "n3"]
    assert sum(r["role"] == "leader" for r in reps.values()) == 1
    # sync: a majority (the leader and at least one follower) flushed before each ack; the
    # third replica may lag behind a run this short
    assert sum(r["flushes"] >= 1 and r["appends"] >= 1 for r in reps.values()) >= 2
    assert all(r["flushes"] is not None and r["cpu_seconds"] is not None for r in reps.values())
    leader = next(n for n, r in reps.items() if r["role"] == "leader")
    assert row["flushes"] == reps[leader]["flushes"] >= 1
    assert reps[leader]["cpu_seconds"] > 0
    assert set(row["cpu_seconds"]) == {"bench", "n1", "n2", "n3"}
    logs = row["integrity"]["replica_logs"]
    assert logs["identical"] and logs["covers_acknowledged"] and logs["compared_bytes"] > 1200 * 1024
    assert row["goal"]["name"] == "sync throughput" and row["goal"]["ratio"] > 0
    assert "vs goal" in run.output and "x ≥300 MB/s" in run.output
    # every replica it started was stopped and its directory removed
    assert _processes_using(tmp_path) == []
    assert not [p for p in os.listdir(tmp_path) if p.startswith("quorumlog-bench-")]


def test_cluster_steady_state_shape(bench, schema):
    # --steady: retention deletes segments during the run and the replicas reuse the files;
    # the read-back and the log comparison account for what retention deleted
    run = bench("cluster", "--duration", "5", "--steady", "16")
    assert run.exit_code == 0, run.output + run.stderr
    jsonschema.validate(run.doc, schema)
    (row,) = run.doc["results"]
    integ = row["integrity"]
    assert integ["ok"] is True and integ["missing"] == 0 and integ["misplaced"] == 0
    assert integ["retained_away"] > 0
    assert integ["read_back"] == integ["acknowledged"] - integ["retained_away"]
    logs = integ["replica_logs"]
    assert logs["identical"] and logs["covers_acknowledged"] and logs["compared_from"] > 0
    assert all(r["segments_recycled"] > 0 for r in row["replicas"].values())


def test_cluster_one_message_at_a_time_for_a_duration(bench, schema):
    run = bench("cluster", "--duration", "0.5", "--batch", "1", "--producers", "1",
                "--window", "1")
    row = _checked(run, schema)
    assert row["op"] == "produce" and row["messages"] > 0
    assert row["latency"]["count"] == row["messages"]
    assert row["goal"]["unit"] == "ms" and row["goal"]["measured"] == \
        row["latency"]["p50_us"] / 1e3


def test_cluster_against_running_replicas(bench, schema, tmp_path):
    c = bench_cluster.start_local(str(tmp_path / "group"), 3, "async")
    try:
        secret = tmp_path / "secret"
        secret.write_text(c.secret() + "\n")
        run = bench("cluster", "--connect", ",".join(c.client_addresses()), "--secret-file",
                    str(secret), "--count", "500", "--batch", "50")
        row = _checked(run, schema)
        assert row["options"]["connect"] == c.client_addresses()
        assert row["replicas"] is None and set(row["cpu_seconds"]) == {"bench"}
        assert "replica_logs" not in row["integrity"]
        assert any("logs are not compared" in n for n in row["notes"])
        # the benchmark left the replicas it did not start running
        assert all(c.alive(n) for n in c.ids)
    finally:
        c.kill_all()


def test_failover_tiny_run(bench, schema):
    run = bench("failover", "--kills", "1", "--kill-every", "1", "--batch", "16",
                "--producers", "2", "--window", "2")
    row = _checked(run, schema)
    fo = row["failover"]
    (kill,) = fo["kills"]
    assert kill["node"] in ("n1", "n2", "n3")
    assert kill["gap_s"] is not None and kill["gap_s"] > 0
    assert fo["gap_p50_s"] == fo["gap_p99_s"] == fo["gap_max_s"] == kill["gap_s"]
    assert row["goal"]["unit"] == "s" and row["goal"]["measured"] == kill["gap_s"]
    assert row["integrity"]["replica_logs"]["identical"]
    assert "kill -> next ack" in run.output
    # where the gap went, from the events the replicas and the producers wrote
    ph = kill["phases_ms"]
    assert ph["new_leader"] in ("n1", "n2", "n3") and ph["new_leader"] != kill["node"]
    assert 0 < ph["detect"] < kill["gap_s"] * 1e3 and ph["elect"] >= 0
    assert ph["vote_rounds"] >= 1 and ph["client_errors"] >= 1
    assert fo["elections"] == 1 and kill["settle_s"] is not None
    assert "phase medians" in run.output
    assert f"killed replica's restart (s, spawn -> serving): {kill['restart_s']:.2f}" in run.output


# ------------------------------------------------------------------- integrity failures

def test_cluster_fails_when_a_message_is_missing_from_the_read_back(bench, monkeypatch):
    """The leader's answer loses one message on its way to the check."""
    real = bench_cluster.read_back

    async def lose_one(address, secret, acked, verifier):
        feed, dropped = verifier.feed, []

        def feed_but_one(body):
            if not dropped:
                dropped.append(bytes(body[:8]))
                return
            feed(body)
        verifier.feed = feed_but_one
        return await real(address, secret, acked, verifier)

    monkeypatch.setattr(replicated, "read_back", lose_one)
    run = bench("cluster", "--count", "300", "--batch", "30")
    assert run.exit_code == 1
    integ = run.doc["results"][0]["integrity"]
    assert integ["ok"] is False and integ["missing"] == 1 and integ["read_back"] == 299
    assert "integrity check FAILED" in run.output and "result: FAILED" in run.output


def test_cluster_fails_when_a_replica_log_differs(bench, monkeypatch):
    """One byte of a follower's committed log changed after the run: the logs differ."""
    real = replicated.compare_logs

    def damage_then_compare(c):
        victim = c.ids[-1]
        start, path = bench_cluster._segments(c, victim)[0]
        with open(path, "r+b") as fh:
            fh.seek(4096)
            b = fh.read(1)
            fh.seek(4096)
            fh.write(bytes([b[0] ^ 0xFF]))
        return real(c)

    monkeypatch.setattr(replicated, "compare_logs", damage_then_compare)
    run = bench("cluster", "--count", "300", "--batch", "30")
    assert run.exit_code == 1
    integ = run.doc["results"][0]["integrity"]
    logs = integ["replica_logs"]
    assert logs["identical"] is False and integ["ok"] is False
    assert logs["first_difference"] == "n3 differs from n1 at byte 4096"
    assert integ["missing"] == 0          # the leader still served every message


class _Stopped:
    """What _compare_group reads of a stopped cluster: ids, store dirs, committed positions."""

    def __init__(self, root, committed):
        self.ids, self.root, self.committed = list(committed), root, committed

    def store_dir(self, nid, group=0):
        return os.path.join(self.root, nid)

    def committed_positions(self, group=0):
        return dict(self.committed)


def _segment(root, nid, start, data):
    d = os.path.join(root, nid, "commitlog")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{start:020d}"), "wb") as fh:
        fh.write(data)


def test_replica_logs_are_compared_from_what_every_replica_still_holds(tmp_path):
    # a store on a nearly full disk deletes its oldest segments (force-clean), each replica
    # at its own moment: the bytes one replica no longer holds are not a difference, a byte
    # that differs after them still is
    seg = 4096
    data = [bytes([k]) * seg for k in range(3)]
    for nid in ("n1", "n2", "n3"):
        for k in (range(1, 3) if nid == "n2" else range(3)):
            _segment(tmp_path, nid, k * seg, data[k])
    c = _Stopped(str(tmp_path), {"n1": 3 * seg, "n2": 3 * seg - 10, "n3": 3 * seg})
    got = bench_cluster._compare_group(c, 0)
    assert got == {"compared_bytes": 2 * seg - 10, "compared_from": seg, "identical": True,
                   "first_difference": None}
    _segment(tmp_path, "n3", 2 * seg, data[2][:100] + b"x" + data[2][101:])
    got = bench_cluster._compare_group(c, 0)
    assert got["identical"] is False
    assert got["first_difference"] == f"n3 differs from n1 at byte {2 * seg + 100}"


def test_keep_leaves_the_replicas_running(bench, schema, tmp_path):
    from quorumlog.localcluster import LocalCluster
    run = bench("cluster", "--count", "400", "--batch", "40", "--keep")
    (kept,) = [p for p in tmp_path.iterdir() if p.name.startswith("quorumlog-bench-")]
    (group,) = [p for p in kept.iterdir() if p.name.startswith("cluster-")]
    c = LocalCluster(group)
    try:
        row = _checked(run, schema)
        assert f"replicas kept running in {group}" in run.output + run.stderr
        # the group still serves: a client reads what the benchmark wrote
        with c.client(request_timeout=5, retry_timeout=10) as client:
            lo, hi = client.offsets(bench_cluster.TOPIC, 0)
            assert hi > lo
        assert all(c.alive(n) for n in c.ids)
        logs = row["integrity"]["replica_logs"]
        assert logs["identical"] and logs["covers_acknowledged"]
    finally:
        c.kill_all()
