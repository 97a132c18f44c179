"""Shared pytest options and fixtures (keep small: several areas share this file)."""
import pytest


def pytest_addoption(parser):
    parser.addoption("--sim-seed", type=int, default=None,
                     help="replay one deterministic Raft simulation seed (tests/sim)")
    parser.addoption("--rewrite", action="store_true", default=False,
                     help="regenerate golden outputs of tests/raft/scenarios/*.txt")


@pytest.fixture
def sim_seed(request):
    return request.config.getoption("--sim-seed")


@pytest.fixture
def rewrite(request):
    return request.config.getoption("--rewrite")


def pytest_collection_modifyitems(config, items):
    """--sim-seed N selects the replay test and drops the 1,000-seed sweep; without it the
    replay test is deselected (not skipped: a normal run reports no skips)."""
    replay = config.getoption("--sim-seed") is not None
    drop = "test_mixed_faults" if replay else "test_replay_seed"
    keep = [it for it in items if it.originalname != drop]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[it for it in items if it.originalname == drop])
        items[:] = keep
