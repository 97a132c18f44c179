"""Fixtures for tests on real replica processes (quorumlog.localcluster) on 127.0.0.1: ports
from the OS, every wait bounded by a deadline, every process killed by pid in a finally."""
from __future__ import annotations

import pytest
from cluster_support import SEGMENT

from quorumlog.localcluster import LocalCluster


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(nodes=3, **kw):
        kw.setdefault("segment_size_bytes", SEGMENT)
        c = LocalCluster(tmp_path / f"c{len(made)}", nodes, **kw)
        made.append(c)
        c.start()
        c.wait_started(timeout=60)
        return c
    try:
        yield make
    finally:
        for c in made:
            c.kill_all()

