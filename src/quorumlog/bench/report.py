"""Results of `quorumlog bench` as a JSON document (schema: schema.json beside this file,
described in docs/benchmarks.md) and as the summary table printed at the end of a run.

The table is rendered from the document, so what is printed and what is saved agree.
"""
from __future__ import annotations

import dataclasses
import datetime
import io
import json
import os
import platform
import socket

from rich.console import Console
from rich import box
from rich.table import Table

SCHEMA_ID = "quorumlog-bench"
SCHEMA_VERSION = 1

REFERENCE_LABELS = {
    "page_cache_write": "page-cache write",
    "memcpy": "memcpy",
    "fdatasync": "1 ack per fdatasync",
    "loopback_tcp": "loopback TCP",
    "parquet": "Parquet",
}


def reference_ratio(res, refs: dict | None) -> float | None:
    """The result's throughput as a multiple of the machine limit it is compared with."""
    if res.reference_ratio is not None:
        return res.reference_ratio
    if not refs or res.reference is None or res.seconds <= 0:
        return None
    if res.reference == "page_cache_write":
        return res.MBps / (refs["page_cache_write_GBps"] * 1e3)
    if res.reference == "memcpy":
        return res.MBps / (refs["memcpy_GBps"] * 1e3)
    if res.reference == "fdatasync":
        # acknowledgements per second against one fdatasync (median) per acknowledgement
        acks_per_s = (res.latency.get("count") or 0) / res.seconds
        return acks_per_s * refs["fdatasync_p50_ms"] / 1e3
    if res.reference == "loopback_tcp":
        return res.MBps / refs["loopback_tcp_MBps"]
    return None


def cpu_per_work(res) -> tuple[float | None, float | None]:
    """(ms of CPU per MB of bodies, µs of CPU per message), the CPU summed over every
    process the row measured (the bench process, and each replica of a cluster row: for a
    replicated row, per MB and per message replicated to all of them); None without work."""
    total = sum(res.cpu_seconds.values()) if res.cpu_seconds else None
    if total is None:
        return None, None
    per_mb = total * 1e3 / (res.payload_bytes / 1e6) if res.payload_bytes else None
    per_msg = total * 1e6 / res.messages if res.messages else None
    return per_mb, per_msg


def result_dict(res, refs) -> dict:
    ratio = reference_ratio(res, refs)
    per_mb, per_msg = cpu_per_work(res)
    return {
        "workload": res.workload,
        "op": res.op,
        "options": res.options,
        "messages": res.messages,
        "payload_bytes": res.payload_bytes,
        "seconds": res.seconds,
        "msgs_per_s": res.msgs_per_s,
        "MBps": res.MBps,
        "latency": res.latency,
        "flushes": res.flushes,
        "msgs_per_flush": res.msgs_per_flush,
        "cpu_seconds": res.cpu_seconds,
        "cpu_ms_per_MB": per_mb,
        "cpu_us_per_msg": per_msg,
        "reference": None if res.reference is None else {"name": res.reference,
                                                         "ratio": ratio},
        "integrity": res.integrity,
        "notes": list(res.notes),
        "goal": res.goal,
        "replicas": res.replicas,
        "failover": res.failover,
    }


def document(*, options, references, results, skipped, errors, argv, started_at,
             finished_at) -> dict:
    from .. import __version__

    rows = [result_dict(r, references) for r in results]
    ok = not errors and all(r.ok for r in results)
    return {
        "schema": SCHEMA_ID,
        "version": SCHEMA_VERSION,
        "quorumlog_version": __version__,
        "command": argv,
        "started_at": started_at,
        "finished_at": finished_at,
        "host": {"hostname": socket.gethostname(), "cpus": os.cpu_count(),
                 "python": platform.python_version(), "platform": platform.platform()},
        "options": dataclasses.asdict(options),
        "references": references,
        "results": rows,
        "skipped": skipped,
        "errors": errors,
        "ok": ok,
    }


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_json(path: str, doc: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        write_json_stream(f, doc)
    os.replace(tmp, path)


def write_json_stream(f, doc: dict) -> None:
    json.dump(doc, f, indent=2, sort_keys=False)
    f.write("\n")
    f.flush()


# ------------------------------------------------------------------------------------------
# The summary table


def _us(v) -> str:
    if v is None:
        return "-"
    if v < 10:
        return f"{v:.2f}µs"
    if v < 1000:
        return f"{v:.0f}µs"
    if v < 1e6:
        return f"{v / 1e3:.3g}ms"
    return f"{v / 1e6:.3g}s"


def _size(n: int) -> str:
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def _num(v, fmt=",.0f") -> str:
    return "-" if v is None else format(v, fmt)


def references_line(refs: dict | None) -> str:
    if not refs:
        return "references: not measured (--no-references)"
    return (f"references (same run): memcpy {refs['memcpy_GBps']:.2f} GB/s · page-cache write "
            f"{refs['page_cache_write_GBps']:.2f} GB/s · fdatasync p50 "
            f"{refs['fdatasync_p50_ms']:.2f} ms · loopback TCP {refs['loopback_tcp_MBps']:,.0f}"
            f" MB/s · warm-up {refs['warm_bytes'] / (1 << 30):.2f} GiB in "
            f"{refs['warm_seconds']:.1f} s")


# (name, justify, cell(result, cells), in the default table): the default keeps a row within
# 120 columns; --wide shows every column (JSON holds everything)
_COLUMNS = (
    ("workload", "left", lambda r, c: r["workload"], True),
    ("op", "left", lambda r, c: r["op"], True),
    ("flush", "left", lambda r, c: r["options"].get("flush", "-"), True),
    ("size", "right", lambda r, c: _size(r["options"]["size"]), True),
    ("prod", "right", lambda r, c: str(r["options"].get("producers", 1)), True),
    ("msgs", "right", lambda r, c: _num(r["messages"]), True),
    ("msg/s", "right", lambda r, c: _num(r["msgs_per_s"]), True),
    ("MB/s", "right", lambda r, c: _num(r["MBps"], ",.1f"), True),
    ("latency of", "left", lambda r, c: r["latency"]["unit"], True),
    ("p50", "right", lambda r, c: c["lat"][0], True),
    ("p90", "right", lambda r, c: c["lat"][1], False),
    ("p99", "right", lambda r, c: c["lat"][2], True),
    ("p99.9", "right", lambda r, c: c["lat"][3], False),
    ("max", "right", lambda r, c: c["lat"][4], True),
    ("flushes", "right", lambda r, c: _num(r["flushes"]), False),
    ("msg/flush", "right", lambda r, c: _num(r["msgs_per_flush"], ",.1f"), False),
    ("CPU s", "right", lambda r, c: c["cpu"], False),
    ("vs reference", "left", lambda r, c: c["ref"], False),
    ("vs goal", "left", lambda r, c: c["goal"], False),
    ("check", "left", lambda r, c: c["check"], True),
)
DEFAULT_WIDTH = 120


def summary_table(doc: dict, wide: bool = True) -> Table:
    """Every column (wide), or the default's: throughput, latency p50 / p99 / max, check."""
    cols = [c for c in _COLUMNS if wide or c[3]]
    t = Table(title="quorumlog bench", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
              collapse_padding=True)
    for name, justify, _, _ in cols:
        t.add_column(name, justify=justify, no_wrap=True)
    for r in doc["results"]:
        c = _cells(r)
        t.add_row(*(cell(r, c) for _, _, cell, _ in cols))
    return t


def _cells(r) -> dict:
    o, lat, ref, integ = r["options"], r["latency"], r["reference"], r["integrity"]
    return {
        "run": f"{r['workload']} {r['op']} {o.get('flush', '-')} {_size(o['size'])} "
               f"x{o.get('producers', 1)}",
        "ref": "-" if not ref or ref["ratio"] is None else
               f"{ref['ratio']:.2f}x {REFERENCE_LABELS.get(ref['name'], ref['name'])}",
        "goal": goal_cell(r.get("goal")),
        "check": "-" if integ is None else ("ok" if integ["ok"] else "FAILED"),
        "cpu": "+".join(f"{v:.1f}" for v in r["cpu_seconds"].values()),
        "lat": [_us(lat[k]) for k in ("p50_us", "p90_us", "p99_us", "p99_9_us", "max_us")],
    }


def _cpu_per_text(r: dict) -> str:
    """'; all processes: 12.9 ms per MB, 410 µs per message' (what is known of it)."""
    per_mb, per_msg = r.get("cpu_ms_per_MB"), r.get("cpu_us_per_msg")
    parts = ([f"{per_mb:,.2f} ms per MB"] if per_mb is not None else []) + \
        ([f"{per_msg:,.1f} µs per message"] if per_msg is not None else [])
    return f"; all processes: {', '.join(parts)}" if parts else ""


def goal_cell(goal: dict | None) -> str:
    """'0.19x ≥500 MB/s' (19 % of the goal); '-' when no goal applies to the row's shape."""
    if not goal:
        return "-"
    sign = "≥" if goal["higher_is_better"] else "≤"
    ratio = "n/a" if goal["ratio"] is None else f"{goal['ratio']:.2f}x"
    return f"{ratio} {sign}{goal['target']:,g} {goal['unit']}"


def _print_blocks(console: Console, doc: dict) -> None:
    """The summary for a terminal too narrow for the table: three lines per result."""
    console.print("quorumlog bench", highlight=False)
    for r in doc["results"]:
        c = _cells(r)
        p50, p90, p99, p999, mx = c["lat"]
        console.print(f"{c['run']}: {r['messages']:,} msgs  {r['msgs_per_s']:,.0f} msg/s  "
                      f"{r['MBps']:,.1f} MB/s  {c['ref']}  {c['goal']}  check {c['check']}\n"
                      f"  latency per {r['latency']['unit']}: p50 {p50}  p90 {p90}  p99 {p99}  "
                      f"p99.9 {p999}  max {mx}\n"
                      f"  flushes {_num(r['flushes'])} ({_num(r['msgs_per_flush'], ',.1f')} "
                      f"msg/flush)  CPU {c['cpu']} s", highlight=False)


def print_summary(console: Console, doc: dict, wide: bool = False) -> None:
    """The references line, the table (the default's columns within 120 characters; every
    column with `wide`; three lines per result on a terminal too narrow), notes."""
    console.print(references_line(doc["references"]), highlight=False)
    table = summary_table(doc, wide)
    natural = Console(width=10_000, file=io.StringIO()).measure(table).maximum
    if natural > (10_000 if wide else console.width):
        _print_blocks(console, doc)
    else:
        console.print(table)
    printed = set()
    for r in doc["results"]:
        run = _cells(r)["run"]
        integ = r["integrity"]
        if integ is not None and not integ["ok"]:
            console.print(f"[bold red]integrity check FAILED[/] {run}: "
                          + ", ".join(f"{k}={v}" for k, v in integ.items() if k != "ok"),
                          highlight=False)
        if not wide and r.get("goal"):          # (a column of the --wide table)
            console.print(f"{run} vs goal: {goal_cell(r['goal'])}", highlight=False)
        if len(r["cpu_seconds"]) > 1:
            console.print(f"{run} CPU seconds: " + ", ".join(
                f"{k} {v:.1f}" for k, v in r["cpu_seconds"].items())
                + _cpu_per_text(r), highlight=False)
        for n in r["notes"]:
            line = f"{run}: {n}"
            if line not in printed:
                printed.add(line)
                console.print(line, highlight=False)
    for s in doc["skipped"]:
        console.print(f"skipped {s['workload']}: {s['reason']}", highlight=False)
    for e in doc["errors"]:
        console.print(f"[bold red]error[/] {e['workload']}: {e['error']}", highlight=False)
    console.print("result: " + ("ok" if doc["ok"] else "[bold red]FAILED[/]"))
