"""A replica group of local processes on loopback: what `quorumlog cluster start|status|stop`
and the cluster tests run.

    c = LocalCluster("/tmp/q", nodes=3, flush="async")
    c.start()                  # secret generated into /tmp/q/secret, ports from the OS
    c.wait_leader(timeout=10)  # -> node id
    c.kill("n1"); c.restart("n1"); c.stop()

Layout of the directory: cluster.json (node ids, peer and client addresses, flush mode),
secret (mode 0600), and per node n<i>/ (its data), n<i>.log (its stderr), n<i>.pid. Ports are
chosen by binding port 0 and releasing it just before the server binds it again (the server
listens with SO_REUSEADDR); a collision with another process in between fails the start
loudly (the server logs the bind error and exits), never silently.

Replicas started by a LocalCluster exit (SIGTERM to themselves) when the process that
started them dies -- a killed test run or benchmark leaves no replica behind -- unless the
cluster is `detached` (`quorumlog cluster start|restart`: the replicas outlive the CLI).
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time

from .errors import QuorumlogError

__all__ = ["LocalCluster", "free_port"]

CLUSTER_FILE = "cluster.json"
# Set in a replica's environment: the pid whose death the replica follows (cli/node.py).
PARENT_ENV = "QUORUMLOG_EXIT_WITH_PARENT"


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


# A replica's address must outlive the replica: a killed one restarts on the same port. A
# port from the kernel's ephemeral range (what bind to port 0 hands out) is free for every
# outgoing connection while its replica is down -- a client's reconnect after the kill can
# take it, and the restart fails "address already in use" (seen once in a loaded bench).
# So ports come from below that range, where the kernel never assigns one by itself, each
# checked free by binding it; each process walks the range from its own random start.
_PORT_LOW = 10_000
_next_port = None
_port_lock = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now, outside the kernel's ephemeral range (bind to port 0 when
    the range leaves no room below it)."""
    global _next_port
    high = _ephemeral_low()
    if high - _PORT_LOW < 1000:
        return _bound_port(host, 0)
    span = high - _PORT_LOW
    with _port_lock:
        if _next_port is None:
            _next_port = _PORT_LOW + secrets.randbelow(span)
        for _ in range(span):
            port = _next_port
            _next_port = _PORT_LOW + (_next_port + 1 - _PORT_LOW) % span
            try:
                return _bound_port(host, port)
            except OSError:
                continue
    return _bound_port(host, 0)


def _bound_port(host: str, port: int) -> int:
    s = socket.socket()
    try:
        s.bind((host, port))
        return s.getsockname()[1]
    finally:
        s.close()


class LocalCluster:
    def __init__(self, directory, nodes: int = 3, *, flush: str = "async",
                 segment_size_bytes: int | None = None, env: dict | None = None,
                 raft: dict | None = None, log_level: str = "INFO", profile: str | None = None,
                 groups: int = 1, detached: bool = False):
        self.detached = detached        # replicas outlive this process (the CLI's clusters)
        self.dir = os.path.abspath(os.fspath(directory))
        self.flush = flush
        self.segment_size_bytes = segment_size_bytes
        self.profile = profile          # the store profile ("small": 4 MiB segments)
        self.env = dict(env or {})
        self.raft = dict(raft or {})
        self.log_level = log_level
        self.groups = groups            # Raft groups per process (node/groups.py)
        self.ids = [f"n{i + 1}" for i in range(nodes)]
        self.peers: dict[str, str] = {}
        self.clients: dict[str, str] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        path = os.path.join(self.dir, CLUSTER_FILE)
        if os.path.exists(path):
            self._load(path)

    # -- files -------------------------------------------------------------------------------
    def _load(self, path) -> None:
        with open(path) as fh:
            d = json.load(fh)
        self.ids = d["ids"]
        self.peers = d["peers"]
        self.clients = d["clients"]
        self.flush = d.get("flush", self.flush)
        self.segment_size_bytes = d.get("segment_size_bytes")
        self.profile = d.get("profile")
        self.raft = d.get("raft", {})
        self.groups = d.get("groups", 1)

    def _save(self) -> None:
        d = {"ids": self.ids, "peers": self.peers, "clients": self.clients,
             "flush": self.flush, "segment_size_bytes": self.segment_size_bytes,
             "profile": self.profile,
             "raft": self.raft, "groups": self.groups}
        tmp = os.path.join(self.dir, CLUSTER_FILE + ".tmp")
        with open(tmp, "w") as fh:
            json.dump(d, fh, indent=1)
        os.replace(tmp, os.path.join(self.dir, CLUSTER_FILE))

    @property
    def secret_file(self) -> str:
        return os.path.join(self.dir, "secret")

    def secret(self) -> str:
        with open(self.secret_file) as fh:
            return fh.readline().strip()

    def pid_file(self, nid) -> str:
        return os.path.join(self.dir, f"{nid}.pid")

    def log_file(self, nid) -> str:
        return os.path.join(self.dir, f"{nid}.log")

    def data_dir(self, nid) -> str:
        return os.path.join(self.dir, nid)

    def client_addresses(self) -> list[str]:
        return [self.clients[i] for i in self.ids]

    # -- processes ---------------------------------------------------------------------------
    def start(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        if not os.path.exists(self.secret_file):
            fd = os.open(self.secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32) + "\n")
        if not self.peers:
            self.peers = {i: f"127.0.0.1:{free_port()}" for i in self.ids}
            self.clients = {i: f"127.0.0.1:{free_port()}" for i in self.ids}
            self._save()
        for nid in self.ids:
            self.start_node(nid)

    def command(self, nid) -> list[str]:
        cmd = [sys.executable, "-m", "quorumlog", "serve", "--dir", self.data_dir(nid),
               "--node-id", nid, "--peers", ",".join(f"{k}={v}" for k, v in self.peers.items()),
               "--client-addr", self.clients[nid],
               "--client-addrs", ",".join(f"{k}={v}" for k, v in self.clients.items()),
               "--secret-file", self.secret_file, "--flush", self.flush,
               "--ready-file", self.pid_file(nid) + ".ready", "--log-level", self.log_level]
        if self.segment_size_bytes:
            cmd += ["--segment-size-bytes", str(self.segment_size_bytes)]
        if self.profile:
            cmd += ["--profile", self.profile]
        if self.groups != 1:
            cmd += ["--groups", str(self.groups)]
        return cmd

    def start_node(self, nid) -> int:
        ready = self.pid_file(nid) + ".ready"
        if os.path.exists(ready):
            os.unlink(ready)
        env = dict(os.environ, **self.env)
        for k, v in self.raft.items():
            env[f"QUORUMLOG_RAFT_{k.upper()}"] = str(v)
        if self.detached:
            env.pop(PARENT_ENV, None)
        else:
            env[PARENT_ENV] = str(os.getpid())
        logf = open(self.log_file(nid), "ab")
        try:
            p = subprocess.Popen(self.command(nid), stdin=subprocess.DEVNULL,
                                 stdout=logf, stderr=logf, env=env, start_new_session=True)
        finally:
            logf.close()
        self.procs[nid] = p
        with open(self.pid_file(nid), "w") as fh:
            fh.write(f"{p.pid}\n")
        return p.pid

    def pid(self, nid) -> int | None:
        p = self.procs.get(nid)
        if p is not None:
            return p.pid
        try:
            with open(self.pid_file(nid)) as fh:
                return int(fh.read().strip())
        except (OSError, ValueError):
            return None

    def alive(self, nid) -> bool:
        p = self.procs.get(nid)
        if p is not None:
            return p.poll() is None
        pid = self.pid(nid)
        if pid is None:
            return False
        try:
            # our own child whose Popen is gone (another LocalCluster object started it):
            # reap it, or it stays a zombie that kill(pid, 0) calls alive
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return False
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True

    def wait_started(self, timeout: float = 30.0, nodes=None) -> None:
        deadline = time.monotonic() + timeout
        for nid in nodes or self.ids:
            ready = self.pid_file(nid) + ".ready"
            while not os.path.exists(ready):
                p = self.procs.get(nid)
                if p is not None and p.poll() is not None:
                    raise QuorumlogError(f"{nid} exited with {p.returncode}; see "
                                         f"{self.log_file(nid)}:\n{self.tail_log(nid)}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{nid} did not start within {timeout} s; see "
                                       f"{self.log_file(nid)}")
                time.sleep(0.02)

    def tail_log(self, nid, nbytes: int = 4000) -> str:
        try:
            with open(self.log_file(nid), "rb") as fh:
                fh.seek(0, 2)
                fh.seek(max(0, fh.tell() - nbytes))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def signal(self, nid, sig) -> None:
        pid = self.pid(nid)
        if pid is not None:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def kill(self, nid) -> None:
        """kill -9 (the page cache keeps what the process wrote)."""
        self.signal(nid, signal.SIGKILL)
        self._reap(nid, 10)

    def stop_node(self, nid, timeout: float = 20.0) -> int | None:
        self.signal(nid, signal.SIGTERM)
        rc = self._reap(nid, timeout)
        if rc is None:
            self.kill(nid)
        return rc

    def _reap(self, nid, timeout) -> int | None:
        p = self.procs.get(nid)
        if p is not None:
            try:
                return p.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
        deadline = time.monotonic() + timeout
        while self.alive(nid):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)
        return 0

    def restart(self, nid) -> None:
        self.start_node(nid)
        self.wait_started(nodes=[nid])

    def stop(self) -> dict:
        """SIGTERM every node, kill -9 whoever does not exit in time -> {id: exit code}."""
        out = {}
        for nid in self.ids:
            if self.alive(nid):
                self.signal(nid, signal.SIGTERM)
        for nid in self.ids:
            rc = self._reap(nid, 20)
            if rc is None and self.alive(nid):
                self.kill(nid)
            out[nid] = rc
            try:
                os.unlink(self.pid_file(nid))
            except OSError:
                pass
        return out

    def kill_all(self) -> None:
        for nid in self.ids:
            if self.alive(nid):
                self.signal(nid, signal.SIGKILL)
        for nid in self.ids:
            self._reap(nid, 10)

    # -- status ------------------------------------------------------------------------------
    def client(self, **kw):
        from .client import Client
        kw.setdefault("groups", self.groups)
        return Client(self.client_addresses(), secret=self.secret(), **kw)

    def _ask_each(self, client, ask) -> dict:
        """{node id: ask(client, its client address) or the error} for each member."""
        own = client is None
        c = client or self.client(request_timeout=2.0, retry_timeout=2.0)
        out = {}
        try:
            for nid in self.ids:
                try:
                    out[nid] = ask(c, self.clients[nid])
                except Exception as e:  # a dead member: report it, do not stop
                    out[nid] = e
        finally:
            if own:
                c.close()
        return out

    def statuses(self, client=None) -> dict:
        """{node id: AdminResponse or the error} asked of each member."""
        return self._ask_each(client, lambda c, addr: c.status(addr))

    def group_statuses(self, client=None) -> dict:
        """{node id: [GroupAdminResponse of each group] or the error} asked of each member."""
        return self._ask_each(client, lambda c, addr: [c.group_status(g, addr)
                                                       for g in range(self.groups)])

    def group_leaders(self, client=None) -> list:
        """[the member leading group g (its own word), or None] for every group."""
        st = self.group_statuses(client)
        leaders: list = [None] * self.groups
        for nid, groups in st.items():
            if isinstance(groups, Exception):
                continue
            for s in groups:
                if s.role == 2 and s.node_id == nid:
                    leaders[s.group] = nid
        return leaders

    def wait_group_leaders(self, timeout: float = 30.0, client=None, exclude=()) -> list:
        """Every group has a leader (not in `exclude`) -> [leader of group g]."""
        deadline = time.monotonic() + timeout
        while True:
            leaders = self.group_leaders(client)
            if all(x is not None and x not in exclude for x in leaders):
                return leaders
            if time.monotonic() > deadline:
                raise TimeoutError(f"not every group has a leader within {timeout} s: {leaders}")
            time.sleep(0.05)

    def wait_leader(self, timeout: float = 15.0, client=None, exclude=()) -> str:
        deadline = time.monotonic() + timeout
        while True:
            st = self.statuses(client)
            leaders = [nid for nid, s in st.items() if nid not in exclude
                       and not isinstance(s, Exception) and s.role == 2 and s.node_id == nid]
            if len(leaders) == 1:
                return leaders[0]
            if time.monotonic() > deadline:
                raise TimeoutError(f"no single leader within {timeout} s: {st}")
            time.sleep(0.05)
