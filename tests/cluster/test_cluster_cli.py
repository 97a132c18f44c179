"""`quorumlog cluster start|status|stop` on a local 3-replica group (click CliRunner; the
replicas are real processes, killed by pid in a finally)."""
from __future__ import annotations

import re
import time

from click.testing import CliRunner

from quorumlog.cli import cli as main
from quorumlog.localcluster import LocalCluster


def test_cluster_start_status_stop(tmp_path):
    d = str(tmp_path / "q")
    runner = CliRunner()
    try:
        r = runner.invoke(main, ["cluster", "start", "--nodes", "3", "--dir", d])
        assert r.exit_code == 0, r.output
        assert re.search(r"leader n[123]", r.output)
        assert (tmp_path / "q" / "secret").stat().st_mode & 0o077 == 0
        r = runner.invoke(main, ["cluster", "start", "--nodes", "3", "--dir", d])
        assert r.exit_code != 0 and "already running" in r.output
        r = runner.invoke(main, ["cluster", "status", "--dir", d])
        assert r.exit_code == 0, r.output
        rows = [ln.split() for ln in r.output.splitlines()[1:]]
        # one leader, serving (once its term's first entry is committed), two followers in
        # its term (under load a follower may be a pre-vote candidate for a moment)
        deadline = time.monotonic() + 10
        while sorted((row[2], row[-1]) for row in rows) != [("FOLLOWER", "-"),
                                                           ("FOLLOWER", "-"),
                                                           ("LEADER", "yes")]:
            assert time.monotonic() < deadline, r.output
            time.sleep(0.05)
            r = runner.invoke(main, ["cluster", "status", "--dir", d])
            rows = [ln.split() for ln in r.output.splitlines()[1:]]
        assert len({row[3] for row in rows}) == 1          # one term
        r = runner.invoke(main, ["cluster", "stop", "--dir", d])
        assert r.exit_code == 0, r.output
        assert r.output.count("stopped") == 4
        c = LocalCluster(d)
        assert not any(c.alive(n) for n in c.ids)
    finally:
        LocalCluster(d).kill_all()


def test_cluster_start_small_profile_and_restart_one_member(tmp_path):
    d = str(tmp_path / "q")
    runner = CliRunner()
    try:
        r = runner.invoke(main, ["cluster", "start", "--nodes", "3", "--dir", d,
                                 "--profile", "small"])
        assert r.exit_code == 0, r.output
        c = LocalCluster(d)
        assert c.profile == "small"
        segs = list((tmp_path / "q" / "n1" / "commitlog").iterdir())
        assert segs and all(s.stat().st_size == 4 << 20 for s in segs)   # not 1 GiB
        before = c.pid("n2")
        r = runner.invoke(main, ["cluster", "restart", "--dir", d, "n2"])
        assert r.exit_code == 0, r.output
        assert "n2: stopped cleanly; restarted" in r.output
        c = LocalCluster(d)
        assert c.alive("n2") and c.pid("n2") != before
        assert c.wait_leader(timeout=30) in c.ids
        r = runner.invoke(main, ["cluster", "restart", "--dir", d, "n9"])
        assert r.exit_code != 0 and "no member 'n9'" in r.output
    finally:
        LocalCluster(d).kill_all()
