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
import shutil
import sys
import tempfile
import traceback

from rich.console import Console

from . import references as refs_mod
from . import report
from ..config import StoreConfig
from ..store.retention import default_disk_usage
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


# Below the stores' force-clean ratio with room for the suite's own writes (a few GiB on a
# disk of tens): above it the replicas' retention deletes their oldest segments, which the
# read-back checks then report as lost messages.
DISK_MARGIN = 0.05


class DiskTooFull(WorkloadUnavailable):
    """The benchmark directory's file system is too full for the stores' retention to
    leave the suite's data alone."""


def check_disk(directory: str | None) -> None:
    d = directory or tempfile.gettempdir()
    used, force = default_disk_usage(d), StoreConfig().disk_force_clean_ratio
    if used > force - DISK_MARGIN:
        raise DiskTooFull(
            f"disk use {used:.0%} on the file system of {d}: the stores' retention deletes "
            f"their oldest segments above {force:.0%} (disk_force_clean_ratio), which the "
            f"read-back checks would report as lost messages; free space (below "
            f"{force - DISK_MARGIN:.0%}) or pass --dir on another file system")


def run(opts: BenchOptions, steps, *, strict: bool, argv: list[str]) -> dict:
    """Plan, measure the references, run every step, print the summary, write --json.
    Returns the document (its "ok" is False when an integrity check failed or a step
    raised)."""
    planned, skipped = plan(opts, steps, strict=strict)
    out, err = _console(), _console(stderr=True)
    progress = ProgressLine(err, opts.progress)
    started = report.now_iso()
    check_disk(opts.dir)
    base = tempfile.mkdtemp(prefix="quorumlog-bench-", dir=opts.dir)
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
