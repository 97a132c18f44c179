"""The issue-20 sitting's table: medians over the rounds bench/sitting/round.sh wrote.

    python3 bench/sitting/summary.py OUT

Each quorumlog cell is the median of its rounds (rounds in brackets), beside the reference's
median in the same rounds and the ratio of the two medians; a quorumlog run whose integrity
check was not ok is reported and left out.
"""
import json
import pathlib
import re
import statistics
import sys


def _result(path):
    text = path.read_text() if path.exists() else ""
    m = re.search(r"RESULT (.*)", text)
    return dict(kv.split("=", 1) for kv in m.group(1).split()) if m else None


def _bare(path):
    text = path.read_text() if path.exists() else ""
    m = re.search(r"\|\s+(\d+) MB/s p50\s+([\d.]+) p99\s+([\d.]+) ms", text)
    return float(m.group(1)) if m else None


def _ql(path):
    if not path.exists():
        return None
    r = json.loads(path.read_text())["results"][0]
    if not r["integrity"]["ok"]:
        print(f"{path}: integrity check NOT ok -- left out")
        return None
    return r


def main(out):
    rounds = sorted(p for p in pathlib.Path(out).glob("r*") if p.is_dir())
    cells = {}

    def add(key, value):
        cells.setdefault(key, []).append(value)

    for r in rounds:
        for shape in ("async", "sync", "single", "p64"):
            q = _ql(r / f"ql_{shape}.json")
            add(f"ql_{shape}", q)
        add("bare_async", _bare(r / "bare_0.txt"))
        add("bare_sync", _bare(r / "bare_1.txt"))
        for name in ("async", "seq", "py64"):
            add(f"nats_{name}", _result(r / f"nats_{name}.txt"))
        add("etcd", _result(r / "etcd.txt"))
        times = (r / "times.txt").read_text().split("\n") if (r / "times.txt").exists() else []
        loads = [float(t.rsplit(" ", 1)[1]) for t in times if t.strip()]
        if loads:
            print(f"{r.name}: {times[0][:8]}-{times[-2][:8]} UTC, load {min(loads)}-{max(loads)}")

    def med(key, get):
        vals = [get(v) for v in cells.get(key, []) if v is not None]
        vals = [v for v in vals if v is not None]
        if not vals:
            return None, "n/a"
        m = statistics.median(vals)
        return m, " · ".join(f"{v:,.3g}" if v < 10 else f"{v:,.0f}" for v in vals)

    def row(label, qkey, qget, rkey, rget, unit, lower_is_better=False):
        q, qs = med(qkey, qget)
        ref, rs = med(rkey, rget)
        ratio = "n/a" if q is None or ref is None or ref == 0 else (
            f"{q / ref:.2f}x" if not lower_is_better else f"{q / ref:.2f}x (lower is better)")
        print(f"| {label} | {q if q is None else round(q, 3)} {unit} ({qs}) | {rkey} "
              f"{ref if ref is None else round(ref, 3)} ({rs}) | {ratio} |")

    mb = lambda r: r["MBps"]
    print("| shape | quorumlog | reference | ratio |\n|---|---|---|---|")
    row("batched async b256 w8, 2 producers", "ql_async", mb, "bare_async", lambda v: v, "MB/s")
    row("same vs NATS async", "ql_async", mb, "nats_async", lambda v: float(v["MB_per_s"]), "MB/s")
    row("batched sync", "ql_sync", mb, "bare_sync", lambda v: v, "MB/s")
    row("same vs etcd 1000 clients", "ql_sync", mb, "etcd", lambda v: float(v["MB_per_s"]), "MB/s")
    row("1 producer, 1 message, async: p50", "ql_single", lambda r: r["latency"]["p50_us"] / 1e3,
        "nats_seq", lambda v: float(v["p50_ms"]), "ms", True)
    row("same: p99", "ql_single", lambda r: r["latency"]["p99_us"] / 1e3,
        "nats_seq", lambda v: float(v["p99_ms"]), "ms", True)
    row("64 producers, 1 message, sync", "ql_p64", lambda r: r["msgs_per_s"],
        "nats_py64", lambda v: float(v["puts_per_s"]), "msg/s")
    for key, label in (("ql_async", "CPU per MB, async"), ("ql_sync", "CPU per MB, sync")):
        q, qs = med(key, lambda r: r["cpu_ms_per_MB"])
        print(f"| {label} | {q if q is None else round(q, 2)} ms ({qs}) | | |")
    q, qs = med("ql_single", lambda r: r["cpu_us_per_msg"])
    print(f"| CPU per single message | {q if q is None else round(q)} µs ({qs}) | | |")


if __name__ == "__main__":
    main(sys.argv[1])
