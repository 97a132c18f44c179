"""`quorumlog serve` and `quorumlog cluster start|status|restart|stop` (click commands).

    quorumlog serve --dir /var/lib/q1 --config node.toml      # one replica (server.py)
    quorumlog cluster start --nodes 3 --dir /tmp/q            # a local group on loopback
    quorumlog cluster status --dir /tmp/q                     # roles, terms, commit, lag
    quorumlog cluster restart --dir /tmp/q n2                 # one member
    cluster stop --dir /tmp/q

Settings of `serve`: a TOML file ([node], [raft], [store] tables) < QUORUMLOG_* environment <
flags (quorumlog.node.config). Logs go to stderr; SIGTERM/SIGINT stop the replica cleanly
(the store is flushed and closed, the process exits 0). Library code logs; this entry point
configures handlers.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import threading
import time

import click

from .. import server
from ..config import PROFILES
from ..errors import QuorumlogError
from ..net.messages import MAX_GROUPS
from ..localcluster import PARENT_ENV, LocalCluster
from ..node.config import load_node_config
from ..node.replica import check_replica_dir
from ..raft.messages import Role

__all__ = ["serve", "cluster", "serve_main"]

log = logging.getLogger(__name__)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False),
              help="The replica's data directory.")
@click.option("--config", type=click.Path(dir_okay=False), help="TOML: [node] [raft] [store].")
@click.option("--node-id")
@click.option("--peers", help="id=host:port,... of every voter, this node included.")
@click.option("--client-addr", help="host:port of the client listener.")
@click.option("--client-addrs", help="id=host:port,... client listeners of all members.")
@click.option("--cluster-id")
@click.option("--secret-file", type=click.Path(dir_okay=False))
@click.option("--insecure", is_flag=True, default=None, help="Allow running without a secret.")
@click.option("--flush", type=click.Choice(["sync", "async"]))
@click.option("--segment-size-bytes", type=int)
@click.option("--profile", type=click.Choice(sorted(PROFILES)),
              help="The store's profile (small: 4 MiB segments, for trials).")
@click.option("--groups", type=int, help="Raft groups this process hosts (default 1; "
              "every member of a cluster must host the same number).")
@click.option("--ready-file", help="Written (with the pid) once the listeners are up.")
@click.option("--log-level", default=lambda: os.environ.get("QUORUMLOG_LOG_LEVEL", "INFO"),
              show_default="INFO or $QUORUMLOG_LOG_LEVEL")
def serve(directory, config, node_id, peers, client_addr, client_addrs, cluster_id, secret_file,
          insecure, flush, segment_size_bytes, profile, groups, ready_file, log_level):
    """Run one replica until SIGTERM/SIGINT (logs to stderr)."""
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr, force=True,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    _follow_parent(os.environ.get(PARENT_ENV))
    store = {k: v for k, v in (("flush", flush), ("segment_size_bytes", segment_size_bytes),
                               ("profile", profile)) if v}
    try:
        check_replica_dir(directory)
        cfg, rcfg, scfg = load_node_config(config, None, store=store, node_id=node_id,
                                           peers=peers, client_addr=client_addr,
                                           client_addrs=client_addrs, cluster_id=cluster_id,
                                           secret_file=secret_file, insecure=insecure,
                                           groups=groups)
    except QuorumlogError as e:
        click.echo(f"quorumlog serve: {e}", err=True)
        sys.exit(2)
    # This process is the replica: everything allocated at start-up lives as long as it, and
    # a full collection of the young generations every 700 allocations costs the event loop
    # pauses under load (profiled: gc was a visible share of the leader's GIL time).
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        import uvloop  # noqa: F401  (optional: faster sockets, see DESIGN.md)
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        sys.exit(runner(server.run_server(directory, cfg, rcfg, scfg, ready_file=ready_file)))
    except QuorumlogError as e:
        log.critical("replica %s failed: %s", cfg.node_id, e)
        sys.exit(1)


def _follow_parent(pid: str | None) -> None:
    """A replica started by a LocalCluster that is not detached (tests, benchmarks) stops
    when the process that started it is gone: it is re-parented then, and a watchdog thread
    polling getppid() once a second sends this process SIGTERM (a clean stop), then SIGKILL
    if that takes over 20 s. Polled rather than PR_SET_PDEATHSIG, which follows the thread
    that forked, and clusters are restarted from executor threads that come and go."""
    if not pid:
        return
    parent = int(pid)

    def watch():
        tick = threading.Event()
        while os.getppid() == parent:
            tick.wait(1.0)
        log.warning("the process that started this replica (pid %d) is gone: stopping", parent)
        os.kill(os.getpid(), signal.SIGTERM)
        tick.wait(20.0)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="follow-parent", daemon=True).start()


def serve_main(argv) -> int:
    """`quorumlog serve ARGV` in this process -> its exit code (bench/replica.py)."""
    try:
        serve.main(args=list(argv), prog_name="quorumlog serve", standalone_mode=True)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


@click.group()
def cluster():
    """A local replica group on loopback (for trying things out and for tests)."""


@cluster.command("start")
@click.option("--nodes", default=3, show_default=True, type=click.IntRange(1, 9))
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False))
@click.option("--flush", default="async", show_default=True,
              type=click.Choice(["sync", "async"]))
@click.option("--segment-size-bytes", type=int)
@click.option("--profile", type=click.Choice(sorted(PROFILES)),
              help="The replicas' store profile: small preallocates 4 MiB segments (local "
                   "trials); the default 1 GiB + 24 MiB per replica.")
@click.option("--groups", default=1, show_default=True, type=click.IntRange(1, MAX_GROUPS),
              help="Raft groups per process (queues are placed on groups; leaders spread).")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for a leader.")
def cluster_start(nodes, directory, flush, segment_size_bytes, profile, groups, timeout):
    """Start NODES replicas (secret generated into DIR, ports from the OS, pids in DIR)."""
    c = LocalCluster(directory, nodes, flush=flush, segment_size_bytes=segment_size_bytes,
                     profile=profile, groups=groups, detached=True)
    running = [n for n in c.ids if c.alive(n)]
    if running:
        raise click.ClickException(f"already running in {directory}: {', '.join(running)} "
                                   "(quorumlog cluster stop first)")
    try:
        c.start()
        c.wait_started(timeout=timeout)
        leader = c.wait_leader(timeout=timeout) if c.groups == 1 else \
            ",".join(f"g{g}={x}" for g, x in enumerate(c.wait_group_leaders(timeout=timeout)))
    except (QuorumlogError, TimeoutError) as e:
        c.stop()
        raise click.ClickException(str(e)) from None
    click.echo(f"started {len(c.ids)} replicas in {c.dir} (flush={c.flush}"
               f"{f', groups={c.groups}' if c.groups > 1 else ''}); leader {leader}")
    for nid in c.ids:
        click.echo(f"  {nid}  pid {c.pid(nid)}  peers {c.peers[nid]}  clients {c.clients[nid]}  "
                   f"log {c.log_file(nid)}")
    click.echo(f"secret: {c.secret_file}")


@cluster.command("status")
@click.option("--dir", "directory", required=True, type=click.Path(exists=True, file_okay=False))
def cluster_status(directory):
    """Roles, terms, commit indexes, lag of every member, and whether it is serving (a
    leader ready to serve: its lease holds and its term's first entry is committed)."""
    c = LocalCluster(directory)
    if not c.peers:
        raise click.ClickException(f"no cluster in {directory}")
    if c.groups > 1:
        _group_status(c)
        return
    st = c.statuses()
    ok = [s for s in st.values() if not isinstance(s, Exception)]
    top = max((s.last_index for s in ok), default=0)
    click.echo(f"{'node':6} {'pid':>8} {'role':10} {'term':>6} {'commit':>10} {'last':>10} "
               f"{'lag':>8}  leader  serving")
    for nid in c.ids:
        s = st[nid]
        pid = c.pid(nid) if c.alive(nid) else "-"
        if isinstance(s, Exception):
            click.echo(f"{nid:6} {pid!s:>8} {'DOWN':10} {'':>6} {'':>10} {'':>10} {'':>8}  "
                       f"({type(s).__name__})")
            continue
        click.echo(f"{nid:6} {pid!s:>8} {Role(s.role).name:10} {s.term:>6} {s.commit_index:>10} "
                   f"{s.last_index:>10} {top - s.last_index:>8}  {s.leader_id or '-':6}  "
                   f"{'yes' if s.ready_to_serve else '-'}")
    # members the group has that this directory did not start (add_member): from the
    # leader's configuration, as it reports them
    leaders = [s for s in ok if s.role == int(Role.LEADER)]
    for nid in sorted(set(leaders[0].voters) - set(c.ids)) if leaders else ():
        click.echo(f"{nid:6} {'-':>8} {'MEMBER':10} {'':>6} {'':>10} {'':>10} {'':>8}  "
                   f"(added with add_member; not started from {c.dir})")


def _group_status(c: LocalCluster) -> None:
    """`cluster status` of a many-group cluster: one line per member and group."""
    st = c.group_statuses()
    click.echo(f"{'node':6} {'group':>5} {'pid':>8} {'role':10} {'term':>6} {'commit':>10} "
               f"{'last':>10}  leader")
    for nid in c.ids:
        pid = c.pid(nid) if c.alive(nid) else "-"
        groups = st[nid]
        if isinstance(groups, Exception):
            click.echo(f"{nid:6} {'*':>5} {pid!s:>8} {'DOWN':10}  ({type(groups).__name__})")
            continue
        for s in groups:
            click.echo(f"{nid:6} {s.group:>5} {pid!s:>8} {Role(s.role).name:10} {s.term:>6} "
                       f"{s.commit_index:>10} {s.last_index:>10}  {s.leader_id or '-'}")
    per = {}
    for groups in st.values():
        if not isinstance(groups, Exception):
            for s in groups:
                if s.role == int(Role.LEADER):
                    per[s.node_id] = per.get(s.node_id, 0) + 1
    click.echo("leaders per member: " + ", ".join(f"{n}={per.get(n, 0)}" for n in c.ids))


@cluster.command("restart")
@click.option("--dir", "directory", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--timeout", default=30.0, show_default=True,
              help="Seconds to wait for the member to stop, and then to listen again.")
@click.argument("node")
def cluster_restart(directory, timeout, node):
    """Restart one member NODE (SIGTERM, kill -9 after --timeout; then start it again with
    the same directory, addresses and settings)."""
    c = LocalCluster(directory, detached=True)
    if not c.peers:
        raise click.ClickException(f"no cluster in {directory}")
    if node not in c.ids:
        raise click.ClickException(f"no member {node!r} in {directory} (members: "
                                   f"{', '.join(c.ids)})")
    was_running = c.alive(node)
    rc = c.stop_node(node, timeout=timeout) if was_running else None
    try:
        c.start_node(node)
        c.wait_started(timeout=timeout, nodes=[node])
    except (QuorumlogError, TimeoutError) as e:
        raise click.ClickException(f"{node} did not start again: {e}") from None
    was = ("stopped cleanly" if rc == 0 else "killed" if rc is None else f"exit {rc}") \
        if was_running else "was not running"
    click.echo(f"{node}: {was}; restarted, pid {c.pid(node)}")


@cluster.command("stop")
@click.option("--dir", "directory", required=True, type=click.Path(exists=True, file_okay=False))
def cluster_stop(directory):
    """SIGTERM every member (kill -9 after 20 s), by the pids in DIR."""
    c = LocalCluster(directory)
    t0 = time.monotonic()
    codes = c.stop()
    for nid, rc in codes.items():
        click.echo(f"{nid}: {'stopped' if rc == 0 else f'exit {rc}' if rc else 'killed'}")
    click.echo(f"stopped in {time.monotonic() - t0:.1f} s")
