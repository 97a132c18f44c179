"""`quorumlog bench`: the click command group (the default suite) and one subcommand per
registered workload. Options may be given before the workload name (they apply to it, or to
every step of the suite) or after it; after wins.

Exit codes: 0 every integrity check passed; 1 an integrity check failed or a workload raised;
2 bad options, or the workload is not available here (pyspark missing, replicated node not
built).
"""
from __future__ import annotations

import os
import sys

import click
from click.core import ParameterSource

from . import options as O
from .options import BenchOptionError, BenchOptions
from . import suite
from .workloads import ALL_OPTIONS, REGISTRY, WorkloadUnavailable


EXIT_CODES = ("Exit codes: 0 ok; 1 an integrity check failed or a workload raised; 2 bad "
              "options or an unavailable workload.")


class ParsedType(click.ParamType):
    """Text parsed by an options.py function (its BenchOptionError becomes click's usage
    error); a value already of type `parsed` (a default) passes through."""

    def __init__(self, name: str, parse, parsed: type):
        self.name, self._parse, self._parsed = name, parse, parsed

    def convert(self, value, param, ctx):
        if isinstance(value, self._parsed):
            return value
        try:
            return self._parse(value)
        except BenchOptionError as e:
            self.fail(str(e), param, ctx)



_DEFAULT_NOTE = "Default: per workload (see `quorumlog bench WORKLOAD --help`)."
_GLOBAL_DEFAULTS = {"size": "1 KiB", "window": 1, "replicas": 3}

# (param decls, click kwargs): shared by the group and every workload command.
OPTIONS = (
    (("--size",), dict(type=ParsedType("SIZE", O.parse_size, int), metavar="SIZE",
                       help=f"Body bytes per message, {O.MIN_SIZE_BYTES} B .. 4 MiB; suffixes "
                            "k/KiB, m/MiB (1024-based). The first 8 bytes carry a sequence "
                            "number for the integrity check. {default}")),
    (("--count",), dict(type=click.IntRange(1, O.MAX_COUNT), metavar="N",
                        help="Messages to write per measured phase (not with --duration). "
                             "{default}")),
    (("--duration",), dict(type=click.FloatRange(O.MIN_DURATION_S, O.MAX_DURATION_S),
                           metavar="SECONDS",
                           help="Write for this long instead of a count (no batch starts "
                                "after it; batches in flight finish).")),
    (("--producers",), dict(type=click.IntRange(1, O.MAX_PRODUCERS), metavar="N",
                            help="Producer threads writing at once (store, commit; the "
                                 "commit log has one writer); client connections (cluster, "
                                 "failover). {default}")),
    (("--batch",), dict(type=click.IntRange(1, O.MAX_BATCH), metavar="N",
                        help="Messages per put_batch/append_batch; 1 = single put/append "
                             "calls. --batch x --size <= 64 MiB. {default}")),
    (("--window",), dict(type=click.IntRange(1, O.MAX_WINDOW), metavar="N",
                         help="Batches a producer sends before waiting for the oldest one's "
                              "acknowledgement (log with --flush sync; cluster). {default}")),
    (("--flush",), dict(type=click.Choice(O.FLUSH_MODES),
                        help="sync: acknowledge after the flush that covers the message "
                             "(group commit); async: acknowledge at page-cache level, flush in "
                             "the background. {default}")),
    (("--replicas",), dict(type=click.IntRange(1, O.MAX_REPLICAS), metavar="N",
                           help="Replicas of the replicated workloads (cluster, failover). "
                                "{default}")),
    (("--groups",), dict(type=click.IntRange(1, O.MAX_GROUPS), metavar="G",
                         help="cluster: Raft groups per replica process (queues spread over "
                              "the groups, leaders over the replicas). Default: 1.")),
    (("--steady", "steady_mib"), dict(
        type=click.IntRange(O.MIN_STEADY_MIB, O.MAX_STEADY_MIB), metavar="MIB",
        help="cluster: the steady-state shape -- segments of MIB MiB, and retention deleting "
             "every segment committed, dispatched and a second old, every 0.5 s, so the "
             "replicas write into segment files retention freed (the default is the "
             "fresh-log shape: nothing is deleted during a run).")),
    (("--connect",), dict(type=ParsedType("HOST:PORT,...", O.parse_connect, tuple),
                          metavar="HOST:PORT,...",
                          help="cluster: drive these running replicas (their client "
                               "addresses) instead of starting --replicas on loopback; "
                               "--flush then only labels the rows (the replicas' own setting "
                               "applies), and their CPU, flushes and logs are not read.")),
    (("--secret-file",), dict(type=click.Path(exists=True, dir_okay=False), metavar="FILE",
                              help="With --connect: the file whose first line is the "
                                   "replicas' cluster secret.")),
    (("--kills",), dict(type=click.IntRange(1, O.MAX_KILLS), metavar="N",
                        help="failover: how many times the leader is SIGKILLed. {default}")),
    (("--kill-every",), dict(type=click.FloatRange(O.MIN_KILL_EVERY_S, O.MAX_KILL_EVERY_S),
                             metavar="SECONDS",
                             help="failover: seconds between kills (each killed replica is "
                                  "restarted once the group acknowledged again). "
                                  "{default}")),
    (("--dir",), dict(type=click.Path(exists=True, file_okay=False, writable=True),
                      help="Directory for the stores (a new temporary directory is made in "
                           "it). Default: the system temporary directory.")),
    (("--keep",), dict(is_flag=True, default=None,
                       help="Keep the stores after the run (their directory is printed).")),
    (("--seed",), dict(type=click.IntRange(0, (1 << 63) - 1), metavar="N",
                       help="Seed of the random message bodies. Default: 1.")),
    (("--json", "json_path"), dict(type=click.Path(dir_okay=False, writable=True,
                                              allow_dash=True),
                                   metavar="FILE",
                                   help="Also write the results as JSON (schema: "
                                        "docs/benchmarks.md, quorumlog/bench/schema.json); "
                                        "`-`: to stdout (the table goes to stderr).")),
    (("--warm-gib",), dict(type=click.FloatRange(0, O.MAX_WARM_GIB), metavar="GIB",
                           help=f"Memory to fault in before measuring (a fresh VM's first "
                                f"touch of memory is slow); 0 skips. Default: "
                                f"{O.DEFAULT_WARM_GIB:g}, {O.QUICK_WARM_GIB:g} with --quick.")),
    (("--quick",), dict(is_flag=True, default=None,
                        help="Smoke run: default counts and durations / 10, smaller "
                             "references and warm-up, one Spark query per reader.")),
    (("--rate",), dict(type=click.FloatRange(O.MIN_RATE, O.MAX_RATE), metavar="N",
                       help="Offer N messages per second on a fixed schedule and measure "
                            "latency at that load, from each batch's scheduled send time "
                            "(log, store, commit). Default: as fast as acknowledged.")),
    (("--wide",), dict(is_flag=True, default=None,
                       help="Every column of the table (default: the columns that fit 120 "
                            "characters; --json has everything).")),
    (("--no-references",), dict(is_flag=True, default=None,
                                help="Skip measuring the machine's limits (no ratios).")),
    (("--progress/--no-progress",), dict(default=None,
                                         help="Live progress line. Default: only when "
                                              "stderr is a terminal.")),
)


def _field(decls) -> str:
    name = decls[-1] if not decls[-1].startswith("-") else decls[0].split("/")[0]
    name = name.lstrip("-").replace("-", "_")
    return _SECONDS_FIELDS.get(name, name)


# options given in seconds whose BenchOptions field says so
_SECONDS_FIELDS = {"duration": "duration_s", "kill_every": "kill_every_s"}


def bench_options(workload=None):
    """The options as click decorators. For a workload's own command, "{default}" in a help
    text becomes that workload's default, and options it does not use are hidden from its
    help (still parsed, so giving one gets a specific error rather than "no such option")."""
    def deco(f):
        for decls, kw in reversed(OPTIONS):
            kw = dict(kw)
            field = _field(decls)
            if "help" in kw and "{default}" in kw["help"]:
                if workload is None:
                    note = (f"Default: {_GLOBAL_DEFAULTS[field]}." if field in _GLOBAL_DEFAULTS
                            else _DEFAULT_NOTE)
                else:
                    note = f"Default: {_workload_default(workload, field)}."
                kw["help"] = kw["help"].replace("{default}", note)
            if workload is not None and field in ALL_OPTIONS and field not in workload.uses:
                kw["hidden"] = True
            f = click.option(*decls, **kw)(f)
        return f
    return deco


def _workload_default(w, field):
    if field in w.defaults:
        v = w.defaults[field]
        return f"{v:g} s" if field.endswith("_s") else (f"{v:,}" if isinstance(v, int) else v)
    if field == "count" and "duration_s" in w.defaults:
        return "none (--duration " + f"{w.defaults['duration_s']:g})"
    return _GLOBAL_DEFAULTS.get(field, 1)


def _given(ctx, kw) -> dict:
    """The options given on this command's part of the command line."""
    return {k: v for k, v in kw.items()
            if v is not None and ctx.get_parameter_source(k) != ParameterSource.DEFAULT}


def _options(given: dict) -> BenchOptions:
    d = dict(given)
    for name, field in _SECONDS_FIELDS.items():
        if name in d:
            d[field] = d.pop(name)
    if d.pop("no_references", None):
        d["references"] = False
    for flag_name in ("keep", "quick", "wide"):
        d[flag_name] = bool(d.get(flag_name))
    path = d.get("json_path")
    if path and path != "-":
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise BenchOptionError(f"--json {path}: directory {parent} does not exist")
    return BenchOptions(**d)


def _run(ctx, given: dict, steps, *, strict: bool):
    try:
        opts = _options(given)
        doc = suite.run(opts, steps, strict=strict, argv=["quorumlog", *sys.argv[1:]])
    except WorkloadUnavailable as e:
        click.echo(f"quorumlog bench {e}", err=True)
        ctx.exit(2)
    except BenchOptionError as e:
        raise click.UsageError(str(e), ctx) from None
    ctx.exit(0 if doc["ok"] else 1)


def _merge_flags(parent: dict, own: dict) -> dict:
    out = {**parent, **own}
    for k in ("keep", "quick", "wide", "no_references"):      # a flag given anywhere holds
        if parent.get(k) or own.get(k):
            out[k] = True
    return out


class _BenchGroup(click.Group):
    def list_commands(self, ctx):
        return list(REGISTRY)          # registration order, not alphabetical


@click.group("bench", cls=_BenchGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]},
             epilog=EXIT_CODES)
@bench_options()
@click.pass_context
def bench(ctx, **kw):
    """Measure throughput and latency on this machine.

    With no WORKLOAD: the default suite (what `make bench` runs): log; store with async and
    sync flush; store single puts; commit; scan (when pyspark is installed); a 3-replica
    loopback cluster with async and sync flush, one producer of single messages, 64 sync
    producers of single messages; failover. One table at the end: msg/s, MB/s, latency
    percentiles, flushes, CPU seconds, each throughput beside the machine limit measured in
    the same run (and cluster rows beside the node's goals), and whether every acknowledged
    message was read back intact.
    """
    ctx.obj = _given(ctx, kw)
    if ctx.invoked_subcommand is None:
        _run(ctx, ctx.obj, suite.DEFAULT_SUITE, strict=False)


def _workload_command(w):
    reason = w.unavailable()
    short = w.summary + (f" [unavailable: {reason}]" if reason else "")
    text = (type(w).__doc__ or w.summary).strip()

    @click.command(w.name, help=text, short_help=short, epilog=EXIT_CODES,
                   context_settings={"help_option_names": ["-h", "--help"]})
    @bench_options(w)
    @click.pass_context
    def cmd(ctx, **kw):
        _run(ctx, _merge_flags(ctx.parent.obj or {}, _given(ctx, kw)), [(w.name, {})],
             strict=True)
    return cmd


for _w in REGISTRY.values():
    bench.add_command(_workload_command(_w))
