"""Where one single-message produce's latency goes (1 producer, window 1), from the traces
bench/sync_trace/sitecustomize.py wrote in every process of a `quorumlog bench cluster` run
(one timeline: perf_counter_ns is CLOCK_MONOTONIC, shared by the processes):

    QL_TRACE_DIR=/tmp/tr PYTHONPATH=bench/sync_trace:src quorumlog bench --no-references \\
        --warm-gib 0 cluster --duration 5 --producers 1 --batch 1 --window 1
    python bench/sync_trace/single.py /tmp/tr

Each request is followed from the client's write through the leader (read, request handed
to the service, proposal, the APPEND writes), each follower (read, acknowledgement written),
the leader again (the acknowledgements read, commit, answer written) to the client's read of
the answer; printed: the median (p90) of each step and the counts per request of reads,
writes, drains and applies in each process. A step's time includes the waits for a CPU.

    python bench/sync_trace/single.py TRACE_DIR
"""
import bisect
import glob
import json
import sys

BIG = 500           # bytes: a produce request or an APPEND of a 1 KiB message, not a heartbeat
PEER, CLIENT = 1, 2


def pct(a, q):
    a = sorted(a)
    return a[min(len(a) - 1, int(len(a) * q))] if a else float("nan")


class Proc:
    def __init__(self, ev):
        self.ev = ev
        self.id = next((e[2] for e in ev if e[0] == "N"), None)
        self.by = {}
        for e in ev:
            self.by.setdefault(e[0], []).append(e)
        for k in self.by:
            self.by[k].sort(key=lambda e: e[1])
        self.t = {k: [e[1] for e in v] for k, v in self.by.items()}

    def first(self, kind, t, pred=lambda e: True):
        """The first event of `kind` at or after t that satisfies pred."""
        lst = self.by.get(kind, [])
        for j in range(bisect.bisect_left(self.t.get(kind, []), t), len(lst)):
            if pred(lst[j]):
                return lst[j]
        return None

    def last_before(self, kind, t, pred=lambda e: True):
        lst = self.by.get(kind, [])
        for j in range(bisect.bisect_right(self.t.get(kind, []), t) - 1, -1, -1):
            if pred(lst[j]):
                return lst[j]
        return None


def main(d):
    procs = [Proc(json.load(open(f))) for f in sorted(glob.glob(d + "/trace-*.json"))]
    leader = next(p for p in procs if "p" in p.by)
    client = next(p for p in procs if p.id is None and "o" in p.by)
    followers = [p for p in procs if p is not leader and p is not client and p.id is not None]
    steps: dict = {}

    def add(name, a, b):
        if a is not None and b is not None:
            steps.setdefault(name, []).append(b - a)

    reqs = [e for e in leader.by["i"] if e[2] == CLIENT and not e[4] and e[5] > BIG]
    reqs = reqs[len(reqs) // 10:]       # (the first tenth: warm-up)
    n = 0
    for e in reqs:
        t_in = e[1]
        cw = client.last_before("o", t_in, lambda x: x[3] == CLIENT and x[5])
        q = leader.first("q", t_in)
        if cw is None or q is None:
            continue
        n += 1
        p = leader.first("p", q[1])
        add("client write start -> leader read", cw[1], t_in)
        add("client write (syscall)", cw[1], cw[2])
        add("leader read -> request to service", t_in, q[1])
        add("request to service -> proposed", q[1], p and p[1])
        acks = []
        for f in followers:
            lo = leader.first("o", q[1], lambda x, f=f: x[3] == PEER and x[4] == f.id and x[6] > BIG)
            if lo is None:
                continue
            add(f"proposed -> APPEND write start ({f.id})", p and p[1], lo[1])
            add(f"APPEND write syscall ({f.id})", lo[1], lo[2])
            fi = f.first("i", lo[1], lambda x: x[3] == leader.id and x[5] > BIG)
            if fi is None:
                continue
            add(f"leader write start -> follower read ({f.id})", lo[1], fi[1])
            fo = f.first("o", fi[1], lambda x: x[4] == leader.id)
            if fo is None:
                continue
            add(f"follower read -> ack write start ({f.id})", fi[1], fo[1])
            fa = f.first("Y", fi[1])
            if fa is not None and fa[1] < fo[1]:
                add(f"follower apply before its ack ({f.id})", fa[1], fa[2])
            la = leader.first("i", fo[1], lambda x, f=f: x[3] == f.id)
            if la is None:
                continue
            add(f"follower ack write start -> leader read ({f.id})", fo[1], la[1])
            acks.append(la[1])
        if not acks:
            continue
        first_ack = min(acks)
        add("APPEND write start (first) -> first ack read", min(
            (x[1] for x in [leader.first("o", q[1], lambda x, f=f: x[3] == PEER and x[4] == f.id
                                         and x[6] > BIG) for f in followers] if x), default=None),
            first_ack)
        c = leader.first("C", first_ack)
        add("first ack read -> commit", first_ack, c and c[1])
        r = leader.first("r", first_ack)
        add("first ack read -> answer built", first_ack, r and r[1])
        lo = leader.first("o", first_ack, lambda x: x[3] == CLIENT)
        if lo is None:
            continue
        add("answer built -> answer write start", r and r[1], lo[1])
        ci = client.first("i", lo[1], lambda x: x[2] == CLIENT)
        add("leader answer write start -> client read", lo[1], ci and ci[1])
        add("TOTAL client write start -> client read", cw[1], ci and ci[1])
        if ci is not None:
            nxt = client.first("o", ci[1], lambda x: x[3] == CLIENT and x[5])
            add("client read -> its next request written", ci[1], nxt and nxt[1])
    print(f"{n} requests followed (leader {leader.id}, followers "
          f"{', '.join(f.id for f in followers)})")
    for k, v in steps.items():
        print(f"  {k:55s} p50 {pct(v, .5) / 1e3:8.1f} us  p90 {pct(v, .9) / 1e3:8.1f} us  n={len(v)}")
    span = (reqs[-1][1] - reqs[0][1]) if reqs else 0
    print("per request, in the measured span (reads i, writes o, drains D, applies Y):")
    for p in [leader, *followers, client]:
        cnt = {k: sum(1 for e in p.by.get(k, []) if reqs[0][1] <= e[1] <= reqs[-1][1])
               for k in "ioDY"}
        busy = {k: sum(e[2] - e[1] for e in p.by.get(k, []) if reqs[0][1] <= e[1] <= reqs[-1][1])
                for k in "oDY"}
        print(f"  {p.id or 'client':8s} " + " ".join(f"{k} {cnt[k] / max(n, 1):5.2f}" for k in cnt)
              + "  time in: " + " ".join(f"{k} {busy[k] / max(n, 1) / 1e3:6.1f} us" for k in busy))
    print(f"span {span / 1e9:.2f} s")


if __name__ == "__main__":
    main(sys.argv[1])
