"""`quorumlog cluster start|status|stop` on a local 3-replica group (click CliRunner; the
replicas are real processes, killed by pid in a finally)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

from click.testing import CliRunner

from quorumlog.cli import cli as main
from quorumlog.localcluster import PARENT_ENV, LocalCluster


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


PARENT = """
import sys
from quorumlog.localcluster import LocalCluster
c = LocalCluster(sys.argv[1], 1, profile="small", detached=sys.argv[2] == "detached")
c.start()
c.wait_started(timeout=60)
print(c.pid("n1"), flush=True)
sys.stdin.read()
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start_from_a_parent(d, mode):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, d, mode], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    return parent, int(parent.stdout.readline())


def test_replicas_started_by_a_killed_process_stop_and_detached_ones_do_not(tmp_path):
    """A test run or benchmark killed with SIGKILL must not leave its replicas running
    (they hold ports, disk and CPU for every later run); `cluster start`'s replicas are
    detached: they outlive the CLI by design."""
    pids, parents = [], []
    try:
        owned, pid = _start_from_a_parent(str(tmp_path / "owned"), "owned")
        parents.append(owned)
        pids.append(pid)
        detached, dpid = _start_from_a_parent(str(tmp_path / "detached"), "detached")
        parents.append(detached)
        pids.append(dpid)
        with open(f"/proc/{dpid}/environ", "rb") as fh:
            assert PARENT_ENV.encode() not in fh.read()      # nothing to follow
        owned.kill()
        detached.kill()
        deadline = time.monotonic() + 30
        while _running(pid):
            assert time.monotonic() < deadline, "the replica outlived its starter by 30 s"
            time.sleep(0.1)
        assert "is gone: stopping" in LocalCluster(str(tmp_path / "owned")).tail_log("n1")
        assert _running(dpid)
    finally:
        for p in parents:
            p.kill()
            p.wait(10)
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
