"""`quorumlog bench` options: --help documents every one, bad values and options a workload does
not use are refused with a specific message and exit code 2 before anything is measured, and
the default suite is planned from the user's options, the step's settings and the workload's
defaults."""
import importlib.util

import pytest

from quorumlog.bench import suite
from quorumlog.bench.command import OPTIONS
from quorumlog.bench.options import BenchOptionError, BenchOptions, parse_size
from quorumlog.bench.workloads import REGISTRY, get
from quorumlog.errors import InvalidArgumentError

ALL_FLAGS = ["--size", "--count", "--duration", "--producers", "--batch", "--window", "--flush",
             "--replicas", "--dir", "--keep", "--seed", "--json", "--warm-gib", "--quick",
             "--no-references", "--wide", "--progress", "--no-progress", "--connect", "--secret-file",
             "--kills", "--kill-every", "--rate", "--groups", "--steady"]


def test_help_documents_every_option_and_workload(invoke):
    res = invoke("bench", "--help")
    assert res.exit_code == 0
    for f in ALL_FLAGS:
        assert f in res.output, f
    for name in ("log", "store", "commit", "scan", "cluster", "failover"):
        assert name in res.output
    # the table of options the CLI builds from is the one the help shows
    assert {d[0].split("/")[0] for d, _ in OPTIONS} <= set(ALL_FLAGS)


@pytest.mark.parametrize("name", ["log", "store", "commit", "scan", "cluster", "failover"])
def test_workload_help_shows_its_defaults_and_only_its_options(invoke, name):
    res = invoke("bench", name, "--help")
    assert res.exit_code == 0
    w = REGISTRY[name]
    for opt in ("count", "batch"):
        if opt in w.defaults:
            assert f"Default: {w.defaults[opt]:,}" in res.output
    if "replicas" not in w.uses:
        assert "--replicas" not in res.output
    if "producers" not in w.uses:
        assert "--producers" not in res.output


@pytest.mark.parametrize("argv, message", [
    (["store", "--count", "0"], "--count"),
    (["store", "--size", "4"], "--size 4 outside [8, 4194304]"),
    (["store", "--size", "12q"], "is not a size"),
    (["store", "--size", "8MiB"], "--size 8388608 outside"),
    (["store", "--count", "10", "--duration", "1"], "give --count or --duration, not both"),
    (["log", "--producers", "2"], "--producers does not apply to the log workload"),
    (["store", "--window", "2"], "--window does not apply to the store workload"),
    (["commit", "--replicas", "3"], "--replicas does not apply to the commit workload"),
    (["log", "--window", "4"], "--window applies to the log with --flush sync"),
    (["commit", "--flush", "async"], "commit measures sync group commit"),
    (["store", "--flush", "fast"], "'fast' is not one of 'sync', 'async'"),
    (["store", "--batch", "65536", "--size", "4KiB"], "the store's max_batch_bytes"),
    (["store", "--batch", "0"], "--batch"),
    (["store", "--duration", "0.01"], "--duration"),
    (["store", "--json", "/nonexistent-dir-ql/x.json"], "does not exist"),
    (["store", "--dir", "/nonexistent-dir-ql"], "does not exist"),
    (["store", "--bogus"], "No such option '--bogus'"),
    (["nosuch"], "No such command 'nosuch'"),
    (["--producers", "999"], "999 is not in the range 1<=x<=256"),
    (["--producers", "2", "log"], "--producers does not apply to the log workload"),
])
def test_bad_options_exit_2_with_a_specific_message(invoke, argv, message):
    res = invoke("bench", *argv)
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "result:" not in res.output          # nothing was measured


def test_scan_without_pyspark_is_a_clear_exit_2(bench, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pyspark" else real(name, *a))
    run = bench("scan", "--count", "100")
    assert run.exit_code == 2
    assert "pyspark is not installed" in run.stderr and "quorumlog[spark]" in run.stderr


def test_a_run_that_could_fill_the_disk_past_the_force_clean_ratio_is_a_clear_exit_2(
        bench, monkeypatch, tmp_path):
    """Above 85 % the stores' retention deletes their oldest segments; a suite run there
    failed its read-back with an OffsetOutOfRangeError that did not say why. The check is
    the step's estimated writes on top of what is used (a commit step of 100 messages:
    about its 1 GiB segment)."""
    gib = 1 << 30
    monkeypatch.setattr(suite, "disk_space", lambda d: (84 * gib, 100 * gib))
    run = bench("commit", "--count", "100", "--dir", str(tmp_path))
    assert run.exit_code == 2
    assert "from 84% to 85% used" in run.stderr and "disk_force_clean_ratio" in run.stderr
    assert not list(tmp_path.iterdir())                   # nothing created, nothing run
    monkeypatch.setattr(suite, "disk_space", lambda d: (83 * gib, 100 * gib))
    assert bench("commit", "--count", "100", "--dir", str(tmp_path)).exit_code == 0


def test_a_run_no_disk_here_can_hold_is_refused_before_anything_exists(bench, tmp_path):
    run = bench("log", "--count", "1000000000", "--size", "4MiB", "--batch", "1",
                "--dir", str(tmp_path))
    assert run.exit_code == 2, run.output
    assert "may write" in run.stderr and "disk_force_clean_ratio" in run.stderr
    assert list(tmp_path.iterdir()) == []


def test_disk_estimate_per_step():
    def estimate(name, **given):
        (step,), _ = suite.plan(BenchOptions(**given), [(name, {})], strict=True)
        return suite.step_disk_bytes(step)

    w = get("log")
    assert estimate("log", count=1000, size=100) == 1000 * (100 + suite.STEP_RECORD_OVERHEAD) \
        + w.segment_bytes
    c = get("cluster")
    one = estimate("cluster", duration_s=2.0, replicas=3)
    assert one == int(2.0 * c.write_rate_bound + c.segment_bytes) * 3
    # a preallocated segment per group and replica
    assert estimate("cluster", duration_s=2.0, replicas=3, groups=4) \
        == one + 3 * 3 * c.segment_bytes
    # running replicas elsewhere: nothing is written here
    assert estimate("cluster", connect=("127.0.0.1:1",), secret_file="/dev/null") == 0


def test_options_before_the_workload_apply_and_after_wins(bench):
    run = bench("--size", "64", "--count", "300", "store", "--size", "128", "--batch", "50")
    assert run.exit_code == 0, run.output
    (put,) = run.rows("store", "put_batch")
    assert put["options"]["size"] == 128 and put["options"]["count"] == 300
    assert put["options"]["batch"] == 50


def test_sizes_parse_with_binary_units():
    assert [parse_size(s) for s in ("100", "1k", "4KiB", "1MiB", "2 mb")] == \
        [100, 1024, 4096, 1 << 20, 2 << 20]
    with pytest.raises(BenchOptionError):
        parse_size("1.5k")


def test_library_options_raise_the_projects_error_class():
    with pytest.raises(InvalidArgumentError, match="--producers 0"):
        BenchOptions(producers=0)
    with pytest.raises(BenchOptionError, match="not both"):
        BenchOptions(count=1, duration_s=1.0)
    with pytest.raises(BenchOptionError, match="--seed"):
        BenchOptions(seed=-1)


def _planned(opts):
    steps, skipped = suite.plan(opts, suite.DEFAULT_SUITE, strict=False)
    return [(s.workload.name, s.resolved) for s in steps], {s["workload"]: s["reason"]
                                                             for s in skipped}


def test_default_suite_plan():
    steps, skipped = _planned(BenchOptions())
    names = [n for n, _ in steps]
    assert names[:5] == ["log", "store", "store", "store", "commit"]
    assert "cluster" not in skipped and "failover" not in skipped
    assert ("scan" in names) != ("scan" in skipped)       # run, or skipped with the reason
    stores = [r for n, r in steps if n == "store"]
    assert [(r.flush, r.batch, r.count) for r in stores] == \
        [("async", 1000, 1_000_000), ("sync", 1000, 1_000_000), ("async", 1, 200_000)]
    commit = dict(steps)["commit"]
    assert (commit.flush, commit.producers, commit.batch, commit.count, commit.duration_s) == \
        ("sync", 8, 1, None, 5.0)


def test_suite_plan_follows_user_options():
    steps, skipped = _planned(BenchOptions(flush="sync", quick=True))
    stores = [r for n, r in steps if n == "store"]
    # async and sync put_batch steps became one; the single-put step stays (other batch)
    assert [(r.flush, r.batch, r.count) for r in stores] == [("sync", 1000, 100_000),
                                                              ("sync", 1, 20_000)]
    assert dict(steps)["log"].count == 200_000                 # --quick: default / 10
    assert dict(steps)["commit"].duration_s == 0.5
    steps, skipped = _planned(BenchOptions(flush="async", duration_s=1.0, producers=3))
    assert "commit measures sync group commit" in skipped["commit"]
    assert all(r.duration_s == 1.0 and r.count is None for n, r in steps
               if n not in ("scan", "failover"))
    # failover runs for its kills, not a duration
    failover = dict(steps)["failover"]
    assert (failover.duration_s, failover.count, failover.kills) == (None, None, 5)
    assert dict(steps)["log"].producers == 1                   # not passed to the log
    assert all(r.producers == 3 for n, r in steps if n == "store")


def test_rate_offers_a_fixed_load_and_measures_from_the_schedule(bench):
    """--rate 2000 with 400 single messages: the run takes about 0.2 s (the schedule, not
    the store's speed), every message is acknowledged and checked, and the JSON says the
    rate; a workload that does not pace (cluster) refuses it."""
    run = bench("store", "--count", "400", "--batch", "1", "--rate", "2000")
    assert run.exit_code == 0, run.output
    put = run.rows("store", "put")[0]
    assert put["options"]["rate"] == 2000 and put["integrity"]["ok"]
    assert put["messages"] == 400
    assert put["seconds"] >= 399 / 2000          # paced: the last send is due at 0.1995 s
    assert put["msgs_per_s"] <= 2000 * 1.05
    fast = bench("store", "--count", "400", "--batch", "1").rows("store", "put")[0]
    assert fast["options"]["rate"] is None


def test_rate_is_refused_where_it_does_not_apply(invoke):
    res = invoke("bench", "cluster", "--rate", "100", "--no-references")
    assert res.exit_code == 2 and "--rate does not apply to the cluster workload" in res.output
    res = invoke("bench", "store", "--rate", "0.5", "--no-references")
    assert res.exit_code == 2 and "0.5" in res.output


@pytest.mark.parametrize("mib", ["8", "2048", "x"])
def test_steady_segment_size_outside_its_range_is_refused(invoke, mib):
    res = invoke("bench", "cluster", "--steady", mib)
    assert res.exit_code == 2 and "--steady" in res.output, res.output
