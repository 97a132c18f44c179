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
