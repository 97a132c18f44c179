"""Deterministic simulation of 3- and 5-node clusters under mixed faults (quorumlog.testing.sim).

1,000 seeds in chunks; a failure names the seed. Replay one with `pytest tests/sim --sim-seed N`
(prints the full trace on failure) or `python -m quorumlog.testing.soak --seed N -v`.
"""
import pytest

from quorumlog.testing.sim import FaultProfile, Simulator, run_seed, sim_options

SEEDS = 1000
CHUNK = 50


def _check(seed, **kw):
    r = run_seed(seed, **kw)
    if not r.ok:
        return f"{r.violation}\n  replay: pytest tests/sim --sim-seed {seed}"
    return None


@pytest.mark.parametrize("start", range(0, SEEDS, CHUNK), ids=lambda s: f"seeds{s}-{s + CHUNK - 1}")
def test_mixed_faults(start, sim_seed):
    failures = [f for f in (_check(s) for s in range(start, start + CHUNK)) if f]
    assert not failures, "\n".join(failures)


def test_replay_seed(sim_seed):
    assert sim_seed is not None   # selected only with --sim-seed (tests/conftest.py)
    r = run_seed(sim_seed, trace=True)
    if not r.ok:
        print("\n".join(r.trace[-400:]))
    assert r.ok, r.violation
    print(f"seed {sim_seed}: events={r.events} elections={r.elections} acked={r.acked} {r.stats}")


def test_same_seed_same_run():
    a, b = run_seed(12345), run_seed(12345)
    assert (a.events, a.elections, a.committed, a.acked, a.stats) == \
           (b.events, b.elections, b.committed, b.acked, b.stats)


def test_mix_covers_both_sizes_and_dledger_timings():
    sizes = {sim_options(s)["n_nodes"] for s in range(20)}
    assert sizes == {3, 5}
    assert any("config" in sim_options(s) for s in range(20))


@pytest.mark.parametrize("n", [3, 5])
def test_fault_free_cluster_commits_everything(n):
    r = Simulator(7, n, faults=FaultProfile()).run()
    assert r.ok, r.violation
    assert r.elections == 1 and r.acked > 100 and r.liveness_ms >= 0


def test_heavy_faults_5_nodes():
    f = FaultProfile(drop=0.3, dup=0.1, max_delay_ms=40, spike=0.05, crash_rate=2.0,
                     partition_rate=3.0, disk_max_ms=10, membership=True, transfers=True)
    for seed in range(20):
        r = Simulator(seed, 5, faults=f).run()
        assert r.ok, f"{r.violation}\n  replay: Simulator({seed}, 5, faults=<heavy>)"


# seeds that once found a bug (docs/raft.md "Measured" lists what each found)
REGRESSION_SEEDS = [39, 48, 127, 6943, 13790, 23098, 27448, 28440, 30961]


@pytest.mark.parametrize("seed", REGRESSION_SEEDS)
def test_regression_seed(seed):
    failure = _check(seed)
    assert failure is None, failure
