"""`quorumlog repair PATH`: the click command over quorumlog.repair (cli/main.py adds it).

Exit codes: 0 the log opens (repaired, or nothing to repair), 1 no repair is known for the
damage or the store is open elsewhere; --dry-run reports the first problem and the fix it
would apply and changes nothing (exit 0 when the log opens as it is, 3 when it needs a repair).
"""
import json

import click


@click.command("repair")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("--dry-run", is_flag=True,
              help="report the first problem and the fix that would be applied; change nothing")
@click.option("--segment-size-bytes", type=int, default=None,
              help="default: as recorded in the checkpoint, else the segment files' size")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@click.pass_context
def repair(ctx, path, dry_run, segment_size_bytes, as_json):
    """Make the store at PATH open again when its commit log refuses to (damage in durable
    records, damage with intact data after it, a missing segment, a damaged checkpoint).

    The log is cut at the last intact record before the damage; everything removed is kept in
    PATH/repair-<time>/ with report.json. Records after the cut are lost to this store (on a
    Raft replica the leader replicates them again)."""
    from ..errors import LockedError, QuorumlogError
    from ..repair import repair as run_repair
    settings = {} if segment_size_bytes is None else {"segment_size_bytes": segment_size_bytes}
    try:
        report = run_repair(path, dry_run=dry_run, **settings)
    except LockedError as exc:
        click.echo(f"not repaired: {exc}", err=True)
        ctx.exit(1)
    except QuorumlogError as exc:
        click.echo(f"not repaired: {exc}", err=True)
        ctx.exit(1)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=1, default=list))
    else:
        for p in report.problems:
            click.echo(f"problem: {p}")
        for a in report.actions:
            click.echo(f"{'would ' if dry_run else ''}fix: {a}")
        if report.cut_position is not None:
            click.echo(f"log cut at position {report.cut_position} after raft index "
                       f"{report.last_kept_index}")
        if report.dropped_indexes:
            lo, hi = report.dropped_indexes
            click.echo(f"raft indexes {lo}..{hi} are no longer in this log")
        if report.backup_dir:
            click.echo(f"removed data and report.json: {report.backup_dir}")
        if report.opens:
            click.echo(f"ok: the log opens (last index {report.last_index})"
                       if report.actions else "ok: nothing to repair")
    if dry_run and not report.opens:
        ctx.exit(3)
