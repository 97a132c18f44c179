"""The integrity check of `quorumlog bench`: every workload reads back what was acknowledged,
and a missing, duplicated or damaged message fails the run (exit code 1, "ok": false), whether
the loss happens in the engine or on the read path."""
import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from quorumlog.bench.latency import LatencyRecorder, quantize
from quorumlog.bench.payload import Payload, Verifier
from quorumlog.bench.workloads import log as log_workload
from quorumlog.bench.workloads import store as store_workload


def _bodies(payload, n):
    return [payload.body(s) for s in range(n)]


def test_verifier_accepts_exactly_the_acknowledged_messages():
    p = Payload(64, 10, seed=3)
    v = Verifier(p, [(0, 10), (10, 10)])
    for b in reversed(_bodies(p, 20)):          # order does not matter
        v.feed(b)
    r = v.result()
    assert r["ok"] and r["read_back"] == 20 and r["checksum_read_back"] == \
        r["checksum_acknowledged"]


@pytest.mark.parametrize("damage, key, value", [
    (lambda bs: bs[:7] + bs[8:], "missing_first", [7]),
    (lambda bs: bs + [bs[3]], "duplicates", 1),
    (lambda bs: bs[:5] + [bs[5][:-1] + bytes([bs[5][-1] ^ 1])] + bs[6:], "wrong_body_first", [5]),
    (lambda bs: bs + [Payload(64, 10, seed=3).body(99)], "unknown", 1),   # never acknowledged
    (lambda bs: bs[:2] + [bs[2][:-1]] + bs[3:], "unknown", 1),           # wrong length
])
def test_verifier_names_what_is_wrong(damage, key, value):
    p = Payload(64, 10, seed=3)
    v = Verifier(p, [(0, 20)])
    for b in damage(_bodies(p, 20)):
        v.feed(b)
    r = v.result()
    assert r[key] == value
    assert r["ok"] is False


def test_batch_buffer_stamps_the_same_bodies_as_payload_body():
    p = Payload(40, 12, seed=9)
    buf = p.buffer()
    for s0, n in ((0, 12), (24, 12), (36, 5), (48, 1)):
        assert [bytes(b) for b in buf.fill(s0, n)] == [p.body(s) for s in range(s0, s0 + n)]


def test_log_workload_fails_when_the_engine_loses_the_last_message(bench, monkeypatch):
    """A real loss in the engine: the log's last entry is truncated before the read-back."""
    real = log_workload.read_back

    def lose_last(log, verifier):
        log.truncate_after(log.last_index - 1)
        return real(log, verifier)

    monkeypatch.setattr(log_workload, "read_back", lose_last)
    run = bench("log", "--count", "500", "--batch", "50")
    assert run.exit_code == 1
    assert run.doc["ok"] is False
    integ = run.doc["results"][0]["integrity"]
    assert integ["missing"] == 1 and integ["missing_first"] == [499]
    assert integ["read_back"] == 499 and integ["acknowledged"] == 500
    assert integ["checksum_read_back"] != integ["checksum_acknowledged"]
    assert "integrity check FAILED" in run.output and "result: FAILED" in run.output


def _tamper_first_read(monkeypatch, change):
    """Make the store workloads' read-back pass their first body through `change` (returning
    None drops it) before the verifier sees it."""
    real = store_workload.read_back

    def tampered(store, verifier, latency=None):
        feed, seen = verifier.feed, []

        def feed_changed(body):
            if not seen:
                seen.append(1)
                body = change(bytes(body))
                if body is None:
                    return
            feed(body)
        verifier.feed = feed_changed
        return real(store, verifier, latency)

    monkeypatch.setattr(store_workload, "read_back", tampered)


def test_store_workload_fails_when_the_read_back_drops_one_message(bench, monkeypatch):
    _tamper_first_read(monkeypatch, lambda body: None)
    run = bench("store", "--count", "300", "--batch", "30")
    assert run.exit_code == 1
    integ = run.rows("store", "put_batch")[0]["integrity"]
    assert integ["ok"] is False and integ["missing"] == 1 and integ["read_back"] == 299


def test_commit_workload_fails_on_a_damaged_body(bench, monkeypatch):
    _tamper_first_read(monkeypatch, lambda body: body[:-1] + bytes([body[-1] ^ 0x40]))
    run = bench("commit", "--count", "50", "--producers", "2")
    assert run.exit_code == 1
    integ = run.rows("commit")[0]["integrity"]
    assert integ["wrong_body"] == 1 and integ["missing"] == 0 and integ["ok"] is False


def test_a_workload_that_raises_fails_the_run_and_the_others_still_report(bench, monkeypatch):
    from quorumlog.bench import suite

    def broken(*a, **k):
        raise OSError("disk went away")

    monkeypatch.setattr(suite, "DEFAULT_SUITE", (("log", {}), ("store", {})))
    monkeypatch.setattr(store_workload, "read_back", broken)
    run = bench("--count", "200", "--batch", "100")
    assert run.exit_code == 1
    assert [e["workload"] for e in run.doc["errors"]] == ["store"]
    assert "OSError: disk went away" in run.doc["errors"][0]["error"]
    assert [r["workload"] for r in run.doc["results"]] == ["log"]


def test_latency_percentiles_match_a_histogram_fed_one_value_at_a_time():
    rng = np.random.default_rng(5)
    ns = np.concatenate([rng.integers(1, 5000, 3000), rng.lognormal(12, 2, 5000).astype(np.int64),
                         [0, 1, 2047, 2048, 2049, 10**12]])
    rec = LatencyRecorder("message")
    local = rec.local()
    for v in ns.tolist():
        local.record(v)
    local.flush()
    ref = HdrHistogram(1, 3_600_000_000_000, 3)
    for v in ns.tolist():
        ref.record_value(max(int(v), 1))
    got = rec.summary()
    assert got["count"] == len(ns)
    for p, key in ((50, "p50_us"), (90, "p90_us"), (99, "p99_us"), (99.9, "p99_9_us")):
        assert got[key] == ref.get_value_at_percentile(p) / 1e3
    assert got["max_us"] == ref.get_max_value() / 1e3
    # quantize only drops bits the histogram does not keep
    q = quantize(ns)
    assert np.all(q <= ns) and np.all(ns - q < np.maximum(ns, 1) / 1000)
