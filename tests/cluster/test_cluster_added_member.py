"""A member added with add_member (a fourth process, not started by `quorumlog cluster
start`) appears in `quorumlog cluster status` once it is a voter, and every member accepts its
connections (not only the leader, which add_member told its address)."""
from __future__ import annotations

import signal
import subprocess
import sys

from click.testing import CliRunner
from cluster_support import SEGMENT, wait_until

from quorumlog.cli import cli
from quorumlog.localcluster import free_port


def test_added_member_appears_in_cluster_status(make_cluster, tmp_path):
    c = make_cluster(3)
    n4_peer, n4_client = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    peers = ",".join(f"{k}={v}" for k, v in {**c.peers, "n4": n4_peer}.items())
    with c.client(retry_timeout=30) as cl:
        c.wait_leader(client=cl)
        cl.produce("orders", [b"before"])
        with open(tmp_path / "n4.log", "wb") as logf:
            n4 = subprocess.Popen(
                [sys.executable, "-m", "quorumlog", "serve", "--dir", str(tmp_path / "n4"),
                 "--node-id", "n4", "--peers", peers, "--client-addr", n4_client,
                 "--secret-file", c.secret_file, "--segment-size-bytes", str(SEGMENT)],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True)
        try:
            cl.add_member("n4", n4_peer)
            wait_until(lambda: "n4" in cl.members(), 30, "n4 a voter")
            r = CliRunner().invoke(cli, ["cluster", "status", "--dir", c.dir])
            assert r.exit_code == 0, r.output
            rows = {ln.split()[0]: ln for ln in r.output.splitlines()[1:] if ln.strip()}
            assert sorted(rows) == ["n1", "n2", "n3", "n4"]
            assert "MEMBER" in rows["n4"] and "added with add_member" in rows["n4"]
            # every member accepts n4's connections once the CONFIG entry names it (before:
            # the followers refused it as an unknown node, one warning per redial)
            for nid in c.ids:
                wait_until(lambda nid=nid: f"{nid!r} connected to peer 'n4'" in
                           open(c.log_file(nid), errors="replace").read(), 30,
                           f"{nid} connected to n4")
        finally:
            n4.send_signal(signal.SIGKILL)
            n4.wait(10)
