"""`quorumlog repair PATH`: the click command over quorumlog.repair (cli/main.py adds it).

Exit codes: 0 the log opens (repaired, or nothing to repair), 1 no repair is known for the
damage or the store is open elsewhere (in any group of a multi-group directory); --dry-run reports the first problem and the fix it
would apply and changes nothing (exit 0 when the log opens as it is, 3 when it needs a repair).
"""
import json

import click

from ..errors import QuorumlogError
from ..repair import repair as run_repair
from .stores import group_heading, store_dirs


@click.command("repair")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("--dry-run", is_flag=True,
              help="report the first problem and the fix that would be applied; change nothing")
@click.option("--segment-size-bytes", type=int, default=None,
              help="default: as recorded in the checkpoint, else the segment files' size")
@click.option("--group", type=click.IntRange(0, None), default=None,
              help="a directory of many Raft groups (groups.json): this group only "
                   "(default: every group, each under a 'group G' heading)")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@click.pass_context
def repair(ctx, path, dry_run, segment_size_bytes, group, as_json):
    """Make the store at PATH open again when its commit log refuses to (damage in durable
    records, damage with intact data after it, a missing segment, a damaged checkpoint).

    PATH: the store directory, or a replica directory of many Raft groups (each group's
    store is repaired on its own). The log is cut at the last intact record before the
    damage; everything removed is kept in <store>/repair-<time>/ with report.json. Records
    after the cut are lost to this store (on a Raft replica the leader replicates them
    again)."""
    settings = {} if segment_size_bytes is None else {"segment_size_bytes": segment_size_bytes}
    failed = needs = False
    reports = {}
    for g, d in store_dirs(path, group):
        try:
            report = run_repair(d, dry_run=dry_run, **settings)
        except QuorumlogError as exc:       # LockedError included: open elsewhere
            if not as_json:
                group_heading(g, d)
            click.echo(f"not repaired: {exc}", err=True)
            failed = True
            continue
        needs = needs or not report.opens
        if as_json:
            reports[str(g)] = report.as_dict()
            continue
        group_heading(g, d)
        _echo_report(report, dry_run)
    if as_json and reports:
        click.echo(json.dumps(reports["None"] if "None" in reports else {"groups": reports},
                              indent=1, default=list))
    if failed:
        ctx.exit(1)
    if dry_run and needs:
        ctx.exit(3)


def _echo_report(report, dry_run: bool) -> None:
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
