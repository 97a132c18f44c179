"""A replica's restart on a big log (issue 20's failover: the killed replica's restart_s and
the `lost` phase). DIR is a store kept by `quorumlog bench --keep --dir D cluster --replicas 1
--duration 40` (its cluster folder, with cluster.json). Per round, optionally after
`sync; echo 3 > /proc/sys/vm/drop_caches` (--cold, root only):
  open:    MessageStore open, then node/driver.py config_history, in this process (seconds,
           bytes read from disk, major faults);
  restart: `python -m quorumlog serve` on the store, spawn -> ready file, its RssFile, then
           SIGKILL -> EOF on a client connection it accepted (what a peer sees as `lost`).
The build is the one on sys.path (PYTHONPATH selects another for an A/B).

    python bench/replica_restart.py DIR [--cold] [--rounds 3]
"""
import argparse
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time

from quorumlog.config import load_config
from quorumlog.node.driver import config_history
from quorumlog.store import MessageStore


def _drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")


def _read_bytes() -> int:
    with open("/proc/self/io") as fh:
        return int(dict(ln.split(": ") for ln in fh.read().splitlines())["read_bytes"])


def open_phases(store_dir: str, segment_bytes: int) -> str:
    out = []
    st = None
    try:
        for what in ("store open", "config_history"):
            t0, r0 = time.monotonic(), _read_bytes()
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
            if st is None:
                st = MessageStore(store_dir, load_config(None, {}, segment_size_bytes=segment_bytes),
                                  replicated=True)
            else:
                config_history(st.commitlog, ["n1"])
            out.append(f"{what} {time.monotonic() - t0:.2f} s, read {(_read_bytes() - r0) / 1e9:.2f} GB, "
                       f"{resource.getrusage(resource.RUSAGE_SELF).ru_majflt - f0} major faults")
    finally:
        if st is not None:
            st.close()
    return "; ".join(out)


def restart_and_kill(d: str, c: dict) -> str:
    ready = os.path.join(d, "n1.bench-ready")
    if os.path.exists(ready):
        os.unlink(ready)
    cmd = [sys.executable, "-m", "quorumlog", "serve", "--dir", os.path.join(d, "n1"),
           "--node-id", "n1", "--peers", "n1=" + c["peers"]["n1"], "--client-addr",
           c["clients"]["n1"], "--secret-file", os.path.join(d, "secret"), "--flush", "async",
           "--ready-file", ready, "--segment-size-bytes", str(c["segment_size_bytes"]),
           "--log-level", "ERROR"]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    try:
        while not os.path.exists(ready):
            if p.poll() is not None or time.monotonic() - t0 > 300:
                raise SystemExit(f"the replica exited or did not start: {p.returncode}")
            time.sleep(0.01)
        t1 = time.monotonic()
        host, port = c["clients"]["n1"].rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
        time.sleep(0.3)           # (accepted; well inside the server's 1 s hello timeout)
        with open(f"/proc/{p.pid}/status") as fh:
            rss = next(ln.split()[1] for ln in fh if ln.startswith("RssFile"))
        k0 = time.monotonic()
        p.send_signal(signal.SIGKILL)
        s.settimeout(30)
        try:
            while s.recv(65536):
                pass
        except ConnectionResetError:
            pass
        k1 = time.monotonic()
        s.close()
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    return (f"restart {t1 - t0:.2f} s, RssFile {int(rss) / 1e6:.2f} GB, SIGKILL -> EOF "
            f"{1e3 * (k1 - k0):.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    c = json.load(open(os.path.join(a.dir, "cluster.json")))
    for _ in range(a.rounds):
        for step in (lambda: open_phases(os.path.join(a.dir, "n1"), c["segment_size_bytes"]),
                     lambda: restart_and_kill(a.dir, c)):
            if a.cold:
                _drop_caches()
            print(("cold " if a.cold else "warm ") + step(), flush=True)


if __name__ == "__main__":
    main()
