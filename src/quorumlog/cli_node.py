"""`quorumlog serve` and `quorumlog cluster start|status|stop` (click commands).

    quorumlog serve --dir /var/lib/q1 --config node.toml      # one replica (see server.py)
    quorumlog cluster start --nodes 3 --dir /tmp/q            # a local group on loopback
    quorumlog cluster status --dir /tmp/q                     # roles, terms, commit, lag
    quorumlog cluster stop --dir /tmp/q

`serve` and `cluster` are click objects for the `quorumlog` group to add
(`cli.add_command(serve)`, `cli.add_command(cluster)`); until then `python -m
quorumlog.cli_node ...` runs them. Library code logs; this entry point configures handlers.
"""
from __future__ import annotations

import logging
import os
import sys
import time

import click

from .config import PROFILES
from .errors import QuorumlogError

__all__ = ["serve", "cluster", "main"]


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
@click.option("--ready-file", help="Written (with the pid) once the listeners are up.")
@click.option("--log-level", default=lambda: os.environ.get("QUORUMLOG_LOG_LEVEL", "INFO"),
              show_default="INFO or $QUORUMLOG_LOG_LEVEL")
def serve(directory, config, node_id, peers, client_addr, client_addrs, cluster_id, secret_file,
          insecure, flush, segment_size_bytes, profile, ready_file, log_level):
    """Run one replica until SIGTERM/SIGINT (logs to stderr)."""
    from . import server
    argv = ["--dir", directory, "--log-level", log_level]
    for flag, v in (("--config", config), ("--node-id", node_id), ("--peers", peers),
                    ("--client-addr", client_addr), ("--client-addrs", client_addrs),
                    ("--cluster-id", cluster_id), ("--secret-file", secret_file),
                    ("--flush", flush), ("--ready-file", ready_file),
                    ("--segment-size-bytes", segment_size_bytes), ("--profile", profile)):
        if v is not None:
            argv += [flag, str(v)]
    if insecure:
        argv.append("--insecure")
    sys.exit(server.main(argv))


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
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for a leader.")
def cluster_start(nodes, directory, flush, segment_size_bytes, profile, timeout):
    """Start NODES replicas (secret generated into DIR, ports from the OS, pids in DIR)."""
    from .localcluster import LocalCluster
    c = LocalCluster(directory, nodes, flush=flush, segment_size_bytes=segment_size_bytes,
                     profile=profile)
    running = [n for n in c.ids if c.alive(n)]
    if running:
        raise click.ClickException(f"already running in {directory}: {', '.join(running)} "
                                   "(quorumlog cluster stop first)")
    try:
        c.start()
        c.wait_started(timeout=timeout)
        leader = c.wait_leader(timeout=timeout)
    except (QuorumlogError, TimeoutError) as e:
        c.stop()
        raise click.ClickException(str(e)) from None
    click.echo(f"started {len(c.ids)} replicas in {c.dir} (flush={c.flush}); leader {leader}")
    for nid in c.ids:
        click.echo(f"  {nid}  pid {c.pid(nid)}  peers {c.peers[nid]}  clients {c.clients[nid]}  "
                   f"log {c.log_file(nid)}")
    click.echo(f"secret: {c.secret_file}")


@cluster.command("status")
@click.option("--dir", "directory", required=True, type=click.Path(exists=True, file_okay=False))
def cluster_status(directory):
    """Roles, terms, commit indexes and lag of every member."""
    from .localcluster import LocalCluster
    from .raft.messages import Role
    c = LocalCluster(directory)
    if not c.peers:
        raise click.ClickException(f"no cluster in {directory}")
    st = c.statuses()
    ok = [s for s in st.values() if not isinstance(s, Exception)]
    top = max((s.last_index for s in ok), default=0)
    click.echo(f"{'node':6} {'pid':>8} {'role':10} {'term':>6} {'commit':>10} {'last':>10} "
               f"{'lag':>8}  leader")
    for nid in c.ids:
        s = st[nid]
        pid = c.pid(nid) if c.alive(nid) else "-"
        if isinstance(s, Exception):
            click.echo(f"{nid:6} {pid!s:>8} {'DOWN':10} {'':>6} {'':>10} {'':>10} {'':>8}  "
                       f"({type(s).__name__})")
            continue
        click.echo(f"{nid:6} {pid!s:>8} {Role(s.role).name:10} {s.term:>6} {s.commit_index:>10} "
                   f"{s.last_index:>10} {top - s.last_index:>8}  {s.leader_id or '-'}")


@cluster.command("restart")
@click.option("--dir", "directory", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--timeout", default=30.0, show_default=True,
              help="Seconds to wait for the member to stop, and then to listen again.")
@click.argument("node")
def cluster_restart(directory, timeout, node):
    """Restart one member NODE (SIGTERM, kill -9 after --timeout; then start it again with
    the same directory, addresses and settings)."""
    from .localcluster import LocalCluster
    c = LocalCluster(directory)
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
    from .localcluster import LocalCluster
    c = LocalCluster(directory)
    t0 = time.monotonic()
    codes = c.stop()
    for nid, rc in codes.items():
        click.echo(f"{nid}: {'stopped' if rc == 0 else f'exit {rc}' if rc else 'killed'}")
    click.echo(f"stopped in {time.monotonic() - t0:.1f} s")


@click.group()
def main():
    """quorumlog replica commands (to be added to the `quorumlog` group)."""
    logging.basicConfig(level=os.environ.get("QUORUMLOG_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


main.add_command(serve)
main.add_command(cluster)

if __name__ == "__main__":
    main()
