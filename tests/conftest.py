"""Shared pytest options and fixtures (keep small: several areas share this file)."""
import os
import tempfile

import pytest

from quorumlog.bench.suite import disk_space
from quorumlog.config import StoreConfig

# What a whole run needs free at once: its test directories peak at the largest test's (1.2 GiB
# measured, du every 2 s over a whole run; it was ~16 GiB when every directory was kept;
# the default-profile cluster test preallocates 3 x 1 GiB segments). Passed tests'
# directories are deleted as they end (tmp_path_retention_policy in pyproject.toml).
NEED_FREE_BYTES = 6 << 30


def pytest_addoption(parser):
    parser.addoption("--sim-seed", type=int, default=None,
                     help="replay one deterministic Raft simulation seed (tests/sim)")
    parser.addoption("--rewrite", action="store_true", default=False,
                     help="regenerate golden outputs of tests/raft/scenarios/*.txt")


def pytest_sessionstart(session):
    """Refuse to start on a file system without room for the run: without this a full disk
    shows up as hundreds of DiskFullErrors (and above the stores' force-clean ratio their
    retention deletes segments the tests then miss)."""
    where = os.path.abspath(session.config.option.basetemp or tempfile.gettempdir())
    existing = where
    while not os.path.isdir(existing):           # --basetemp is created later
        existing = os.path.dirname(existing)
    used, total = disk_space(existing)
    force = StoreConfig().disk_force_clean_ratio
    if total > 0 and (used + NEED_FREE_BYTES) / total > force:
        raise pytest.UsageError(
            f"the tests need {NEED_FREE_BYTES / (1 << 30):.0f} GiB under {where} with its file "
            f"system staying below {force:.0%} used (the stores' disk_force_clean_ratio); it is "
            f"{used / total:.0%} used, {(total - used) / (1 << 30):.1f} GiB free: free "
            f"{(used + NEED_FREE_BYTES - force * total) / (1 << 30):.1f} GiB or pass "
            f"--basetemp on another file system")


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
