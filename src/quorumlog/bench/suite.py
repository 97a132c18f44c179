"""Planning and running `quorumlog bench`: one workload (a subcommand) or the default suite
(no subcommand; what `make bench` runs), then the JSON document and the summary table.

Each option of a step comes from, first to last: what the user gave, the step's own settings
in DEFAULT_SUITE, the workload's defaults. In the suite an option a workload does not use is
not passed to it; given to a single workload, it is an error. Steps that end up identical are
run once.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import sys
import tempfile
import traceback

from rich.console import Console

from . import references as refs_mod
from . import report
from ..config import StoreConfig
from .options import BenchOptionError, BenchOptions, Resolved, resolve
from .progress import ProgressLine
from .workloads import (ALL_OPTIONS, RunContext, Workload, WorkloadUnavailable, flag, get,
                        not_used)

log = logging.getLogger(__name__)

# (workload, the step's own settings). The cluster steps are the shapes the node's goals are
# stated for (goals.py): batches with async and with sync flush, one producer of single
# messages, 64 sync producers of single messages; then failover with 5 kills.
DEFAULT_SUITE = (
    ("log", {}),
    ("store", {"flush": "async"}),
    ("store", {"flush": "sync"}),
    ("store", {"flush": "async", "batch": 1, "count": 200_000}),
    ("commit", {}),
    ("e2e", {}),
    ("scan", {}),
    ("cluster", {"flush": "async"}),
    ("cluster", {"flush": "sync"}),
    ("cluster", {"flush": "async", "producers": 1, "batch": 1, "window": 1,
                 "duration_s": 5.0}),
    ("cluster", {"flush": "sync", "producers": 64, "batch": 1, "window": 1,
                 "duration_s": 5.0}),
    ("failover", {"kills": 5}),
)

# Lines wider than 80 columns are kept whole when the output is not a terminal (make bench).
PIPE_WIDTH = 260


@dataclasses.dataclass(frozen=True)
class Step:
    workload: Workload
    resolved: Resolved


def plan(opts: BenchOptions, steps, *, strict: bool) -> tuple[list, list]:
    """(steps to run, skipped [{workload, reason}]). strict (one workload asked by name):
    options it does not use and values it cannot honour raise BenchOptionError, and an
    unavailable workload raises WorkloadUnavailable."""
    given = {k: getattr(opts, k) for k in ALL_OPTIONS}
    run, skipped, seen = [], [], set()
    for name, settings in steps:
        w = get(name)
        reason = w.unavailable()
        if reason is not None:
            if strict:
                raise WorkloadUnavailable(f"{name}: {reason}")
            skipped.append({"workload": name, "reason": reason})
            continue
        unused = not_used(w, given)
        if unused and strict:
            raise BenchOptionError(", ".join(flag(k) for k in unused)
                                   + f" does not apply to the {name} workload")
        o = dataclasses.replace(opts, **{k: None for k in unused}) if unused else opts
        defaults = {**w.defaults, **settings}
        if o.count is not None or o.duration_s is not None:
            defaults.pop("count", None)
            defaults.pop("duration_s", None)
        elif "count" in settings:          # the step's amount replaces the workload's
            defaults.pop("duration_s", None)
        try:
            r = resolve(o, defaults)
            w.check(r)
        except BenchOptionError as e:
            if strict:
                raise
            skipped.append({"workload": name, "reason": str(e)})
            continue
        if (name, r) in seen:
            continue
        seen.add((name, r))
        run.append(Step(w, r))
    return run, skipped


def _console(stderr: bool = False) -> Console:
    c = Console(stderr=stderr)
    if not c.is_terminal:
        c = Console(stderr=stderr, width=PIPE_WIDTH)
    return c


# What a step may write, estimated before it runs: a count's messages with their record
# headers, or its length at the workload's `write_rate_bound` (bytes per second per replica,
# above anything measured on these machines), plus a preallocated segment per group; times
# the replicas of a cluster step (none when it drives running replicas, --connect). The
# estimate errs towards room: an overestimate refuses a run that would have fitted, an
# underestimate lets the replicas' retention delete segments the read-back checks then
# report as lost.
STEP_RECORD_OVERHEAD = 128          # record header, properties and index per message
FAILOVER_EXTRA_S = 10.0             # the failover step's start and drain around its kills


def step_disk_bytes(step: Step) -> int:
    r, w = step.resolved, step.workload
    if r.connect:
        return 0
    if r.count is not None:
        data = r.count * (r.size + STEP_RECORD_OVERHEAD)
    else:
        seconds = (r.duration_s if r.duration_s is not None
                   else (r.kills or 0) * (r.kill_every_s or 0.0) + FAILOVER_EXTRA_S)
        data = seconds * w.write_rate_bound
    copies = r.replicas if "replicas" in w.uses else 1
    return int(data + w.segment_bytes * r.groups) * copies


class DiskTooFull(WorkloadUnavailable):
    """The step would fill the disk past the stores' force-clean ratio (the CLI exits 2)."""


def disk_space(directory: str) -> tuple[int, int]:
    """(used bytes, used + available to unprivileged users), as df and the stores'
    retention (default_disk_usage) count them."""
    fs = os.statvfs(directory)
    used = (fs.f_blocks - fs.f_bfree) * fs.f_frsize
    return used, used + fs.f_bavail * fs.f_frsize


def check_disk(directory: str, need: int, what: str) -> None:
    """Raise DiskTooFull if writing `need` more bytes under `directory` would take its file
    system above the stores' force-clean ratio: the replicas' retention would then delete
    their oldest segments and the read-back checks report the messages as lost."""
    force = StoreConfig().disk_force_clean_ratio
    used, total = disk_space(directory)
    if total <= 0:
        return
    after = (used + need) / total
    if after > force:
        raise DiskTooFull(
            f"{what} may write {need / (1 << 30):.1f} GiB under {directory}, taking its file "
            f"system from {used / total:.0%} to {after:.0%} used: above {force:.0%} "
            f"(disk_force_clean_ratio) the stores' retention deletes their oldest segments, "
            f"which the read-back checks would report as lost messages; free "
            f"{(used + need - force * total) / (1 << 30):.1f} GiB or pass --dir on another "
            f"file system")


def run(opts: BenchOptions, steps, *, strict: bool, argv: list[str]) -> dict:
    """Plan, measure the references, run every step, print the summary, write --json.
    Returns the document (its "ok" is False when an integrity check failed or a step
    raised)."""
    planned, skipped = plan(opts, steps, strict=strict)
    out, err = _console(), _console(stderr=True)
    progress = ProgressLine(err, opts.progress)
    started = report.now_iso()
    base_dir = opts.dir or tempfile.gettempdir()
    if planned:
        # each step removes its stores when it ends, unless --keep
        biggest = max(planned, key=step_disk_bytes)
        need, what = step_disk_bytes(biggest), biggest.workload.describe(biggest.resolved)
        if opts.keep:
            need, what = sum(map(step_disk_bytes, planned)), "the run with --keep"
        check_disk(base_dir, need, what)
    base = tempfile.mkdtemp(prefix="quorumlog-bench-", dir=base_dir)
    results, errors, refs = [], [], None
    try:
        if opts.references:
            progress.note(f"references: touching {opts.warm_bytes / (1 << 30):.2f} GiB, then "
                          "memcpy, page-cache write, fdatasync, loopback TCP")
            refs = refs_mod.measure(base, warm_bytes=opts.warm_bytes, quick=opts.quick)
        ctx = RunContext(directory=base, progress=progress, warm_bytes=opts.warm_bytes,
                         quick=opts.quick, keep=opts.keep, secret_file=opts.secret_file)
        for i, step in enumerate(planned, 1):
            progress.note(f"[{i}/{len(planned)}] {step.workload.describe(step.resolved)}")
            try:
                results.extend(step.workload.run(step.resolved, ctx))
            except WorkloadUnavailable as e:
                skipped.append({"workload": step.workload.name, "reason": str(e)})
            except Exception as e:  # noqa: BLE001 -- reported, the other steps still run
                log.debug("workload %s failed", step.workload.name, exc_info=True)
                errors.append({"workload": step.workload.name,
                               "error": f"{type(e).__name__}: {e}",
                               "traceback": traceback.format_exc()})
    finally:
        if opts.keep:
            progress.note(f"stores kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    doc = report.document(options=opts, references=refs, results=results, skipped=skipped,
                          errors=errors, argv=argv, started_at=started,
                          finished_at=report.now_iso())
    if opts.json_path == "-":
        # `--json -`: the document alone on stdout (as other tools do), the table on stderr
        report.print_summary(err, doc, opts.wide)
        report.write_json_stream(sys.stdout, doc)
        return doc
    if opts.json_path:
        report.write_json(opts.json_path, doc)
    report.print_summary(out, doc, opts.wide)
    if opts.json_path:
        out.print(f"results written to {opts.json_path}", highlight=False)
    return doc
