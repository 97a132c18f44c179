"""The `quorumlog` command: the click group and its inspection commands.

A click group: `bench` (quorumlog.bench.command), `info`, `verify` (read-only inspection,
quorumlog.inspection), `serve` and `cluster` (cli/node.py), `repair` (cli/repair.py). Library
code never configures logging; this entry point does.
"""
import json
import logging
import os

import click

from .. import __version__
from .stores import InspectionError, group_heading, store_dirs


@click.group("quorumlog", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="quorumlog",
                      message="%(prog)s %(version)s")
def cli():
    """quorumlog: benchmarks and store inspection."""
    logging.basicConfig(level=os.environ.get("QUORUMLOG_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


# Exit codes of the inspection commands (documented in docs/operations.md).
EXIT_OK = 0
EXIT_DAMAGE = 1          # verify found damage


class DamageError(InspectionError):
    """Damage that stops the inspection itself (a checkpoint that fails its CRC): exit 1."""
    exit_code = EXIT_DAMAGE


def _inspect(fn, path, segment_size_bytes):
    """Run a read-only inspection; NotAStoreError and OSError (permissions, I/O) become exit
    code 2 with one line, damage that stops `info` exit code 1."""
    from ..errors import CorruptLogError, NotAStoreError
    try:
        return fn(path, segment_size_bytes=segment_size_bytes)
    except NotAStoreError as exc:
        raise InspectionError(str(exc)) from None
    except CorruptLogError as exc:
        raise DamageError(f"corrupt: {exc}") from None
    except OSError as exc:
        raise InspectionError(f"cannot read {exc.filename or path}: "
                              f"{exc.strerror or exc}") from None


_path_arg = click.argument("path", type=click.Path(file_okay=True, dir_okay=True))
_segment_opt = click.option("--segment-size-bytes", type=int, default=None,
                            help="for a store without a checkpoint (default: the length of "
                            "its first segment file); the checkpoint's value otherwise")


def _echo_tree(d, indent=0):
    pad = "  " * indent
    for k, v in d.items():
        if isinstance(v, dict):
            click.echo(f"{pad}{k}:" + ("" if v else " (none)"))
            _echo_tree(v, indent + 1)
        else:
            click.echo(f"{pad}{k}: {v}")


def _echo_info(d):
    """`info` as text: sections of `key: value`, one line per topic and its queues' offset
    ranges (`qN min..max`, empty queues left out), one line per consumer group."""
    topics = d.pop("topics")
    groups = d.pop("consumer_offsets", None)
    disk = d.pop("disk")
    delay = d.pop("delay_progress", None)
    _echo_tree(d)
    if delay is not None:
        click.echo("delay_progress (next offset to deliver, by level): " + (
            " ".join(f"{k}:{v}" for k, v in sorted(delay.items(), key=lambda kv: int(kv[0])))
            if isinstance(delay, dict) else str(delay)))
    click.echo("topics:" + ("" if topics else " (none)"))
    for name, t in topics.items():
        ranges = " ".join(f"q{q} {r['min_offset']}..{r['max_offset']}"
                          for q, r in t["queue_offsets"].items() if r["max_offset"])
        kind = " (system)" if t["system"] else ""
        click.echo(f"  {name}{kind}: {t['queues']} queues, {t['messages']} messages"
                   + (f"; {ranges}" if ranges else ""))
    if groups is not None:
        click.echo("consumer_offsets:" + ("" if groups else " (none)"))
        if isinstance(groups, dict):
            for group, by_topic in groups.items():
                click.echo(f"  {group}: " + "; ".join(
                    f"{t} " + " ".join(f"q{q} {o}" for q, o in qs.items())
                    for t, qs in by_topic.items()))
        else:
            click.echo(f"  {groups}")
    click.echo(f"disk: {disk['total_bytes']} bytes allocated ("
               + ", ".join(f"{k} {v}" for k, v in disk["by_entry"].items() if v) + ")")


_group_opt = click.option(
    "--group", type=click.IntRange(0, None), default=None,
    help="a directory of many Raft groups (groups.json): this group only (default: every "
         "group, each under a 'group G' heading)")


@cli.command()
@_path_arg
@_segment_opt
@_group_opt
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout")
def info(path, segment_size_bytes, group, as_json):
    """Show a store's state, read-only (works on a live store; creates and locks nothing).

    PATH: the store directory, or a replica directory of many Raft groups (each group's
    store is shown). Log positions and indexes, checkpoint, topics with each queue's
    min/max offset, consumer-group offsets, delay progress, a replica's term and vote
    (raft-state), disk use. Exit code 2: not a store, or a file cannot be read."""
    from .. import inspection
    docs = [(g, d, _inspect(inspection.describe, d, segment_size_bytes))
            for g, d in store_dirs(path, group)]
    if as_json:
        doc = docs[0][2] if docs[0][0] is None else {
            "groups": {str(g): x for g, _, x in docs}}
        click.echo(json.dumps(doc, indent=1, sort_keys=True))
        return
    for g, d, x in docs:
        group_heading(g, d)
        _echo_info(x)


@cli.command()
@_path_arg
@_segment_opt
@_group_opt
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout")
@click.pass_context
def verify(ctx, path, segment_size_bytes, group, as_json):
    """Check every file of a store, read-only: each record's CRC, the raft index, every
    consume-queue entry, topics.json, delay and consumer offsets, raft-state.

    PATH: the store directory, or a replica directory of many Raft groups (every group's
    store is checked). Exit codes: 0 no damage, 1 damage found (each problem names its
    file and offset), 2 not a store or a file cannot be read. What the next open repairs
    by itself (a torn tail, index entries past the checkpoint) is printed as a note and is
    not damage."""
    from .. import inspection
    reps = [(g, d, _inspect(inspection.verify, d, segment_size_bytes))
            for g, d in store_dirs(path, group)]
    ok = all(rep.ok for _, _, rep in reps)
    if as_json:
        docs = {str(g): {"ok": rep.ok, "problems": rep.problems, "notes": rep.notes,
                         "checked": rep.checked} for g, _, rep in reps}
        click.echo(json.dumps(docs["None"] if reps[0][0] is None else
                              {"ok": ok, "groups": docs}, indent=1, sort_keys=True))
        ctx.exit(EXIT_OK if ok else EXIT_DAMAGE)
    for g, d, rep in reps:
        group_heading(g, d)
        _echo_verify(rep)
    ctx.exit(EXIT_OK if ok else EXIT_DAMAGE)


def _echo_verify(rep) -> None:
    for n in rep.notes:
        click.echo(f"note: {n}")
    for prob in rep.problems:
        click.echo(f"corrupt: {prob}", err=True)
    counts = ", ".join(f"{k} {v}" for k, v in rep.checked.items())
    if rep.ok:
        first, last = rep.checked.get("first_index", 0), rep.checked.get("last_index", 0)
        click.echo(f"ok: records {first}..{last} verified ({counts})")
    else:
        click.echo(f"damaged: {len(rep.problems)} problem(s) ({counts})", err=True)


def _add_subcommands():
    """The commands that live in their own modules: bench, serve, cluster, repair."""
    from ..bench.command import bench
    from .node import cluster, serve
    from .repair import repair
    for command in (bench, serve, cluster, repair):
        cli.add_command(command)


_add_subcommands()


def main(argv=None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    try:
        rv = cli.main(args=argv, prog_name="quorumlog", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        return 1
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
