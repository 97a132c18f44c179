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


def _dir_tree(path, mtimes=True):
    """Every file and directory under `path`: size, mtime (a live store's own threads may
    touch mtimes: `mtimes=False`) and content hash -- to show that something wrote nothing."""
    import hashlib
    import os
    out = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.join(root, d)] = "dir"
        for f in files:
            p = os.path.join(root, f)
            st = os.stat(p)
            with open(p, "rb") as fh:
                out[p] = (st.st_size, st.st_mtime_ns if mtimes else 0,
                          hashlib.sha1(fh.read()).hexdigest())
    return out


@pytest.fixture
def dir_tree():
    """dir_tree(path, mtimes=True) -> a snapshot of everything under path (compare two)."""
    return _dir_tree
