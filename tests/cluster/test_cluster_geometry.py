"""A member created with another segment size is refused at the handshake, by real
processes, with an error naming both values (it used to join and then stall forever at its
first segment end: `index N carries position P; it lands at Q`); the group goes on."""
from __future__ import annotations

import signal
import subprocess
import sys

from cluster_support import SEGMENT, wait_until

from quorumlog.localcluster import free_port


def test_member_with_another_segment_size_is_refused_naming_both(make_cluster, tmp_path):
    c = make_cluster(3)
    other = 1 << 22
    assert other != SEGMENT
    n4_peer, n4_client = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    peers = ",".join(f"{k}={v}" for k, v in {**c.peers, "n4": n4_peer}.items())
    log_path = tmp_path / "n4.log"
    with c.client(retry_timeout=30) as cl:
        c.wait_leader(client=cl)
        cl.produce("orders", [b"before"])
        with open(log_path, "wb") as logf:
            n4 = subprocess.Popen(
                [sys.executable, "-m", "quorumlog", "serve", "--dir", str(tmp_path / "n4"),
                 "--node-id", "n4", "--peers", peers, "--client-addr", n4_client,
                 "--secret-file", c.secret_file, "--segment-size-bytes", str(other)],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True)
        try:
            cl.add_member("n4", n4_peer)
            want = (f"has segment_size_bytes={SEGMENT}, this node ('n4') has "
                    f"segment_size_bytes={other}")
            wait_until(lambda: want in log_path.read_text(errors="replace"), 30,
                       "n4 refusing the leader for its geometry")
            assert "carries position" not in log_path.read_text(errors="replace")
            # the leader's side names both values too (the refusal's reason)
            # (logged when the leader reads n4's refusal: after n4 logs it, so waited for)
            wait_until(lambda: any(f"segment_size_bytes {SEGMENT} differs from {other}" in
                                   open(c.log_file(n), errors="replace").read() for n in c.ids),
                       30, "the leader logging the refusal's reason")
            # the group still commits without it
            r = cl.produce("orders", [b"after"])
            assert r.positions
        finally:
            n4.send_signal(signal.SIGKILL)
            n4.wait(10)
