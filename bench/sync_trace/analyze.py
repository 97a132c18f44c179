"""Where a sync put's latency goes, from the traces bench/sync_trace/sitecustomize.py wrote
(see there): per replica the flush durations and waits, on the leader the time from a
proposal to its own flush report, to each follower's acknowledgement and to the commit, which
of them came last, the commit a rule counting any 2 of 3 durable copies would have given, and
the client's side (answer -> the same connection's next request).
Since branch sync20 the leader commits on any 2 of 3 durable copies; the script also gives the
commit the rule before (capped at the leader's own flush report) would have made.

    python bench/sync_trace/analyze.py TRACE_DIR
"""
import json, sys, glob, bisect, statistics as st
def pct(a, q):
    a = sorted(a); return a[min(len(a)-1, int(len(a)*q))] if a else float('nan')
def show(name, a):
    if a: print(f"  {name:28s} n={len(a):6d} p50={pct(a,.5)/1e6:7.2f} p90={pct(a,.9)/1e6:7.2f} mean={st.mean(a)/1e6:7.2f} ms")
files = sorted(glob.glob(sys.argv[1] + "/trace-*.json"))
tr = {f: json.load(open(f)) for f in files}
lead = [f for f in files if any(e[0] == "p" for e in tr[f])][0]
for f in files:
    ev = tr[f]
    print(f, "LEADER" if f == lead else "follower", len(ev))
    F = [e for e in ev if e[0] == "F"]
    t0 = min(e[1] for e in ev); t1 = max(e[1] for e in ev)
    busy = sum(e[2]-e[1] for e in F)
    print(f"  span {(t1-t0)/1e9:.2f}s flushes {len(F)} flusher busy {busy/(t1-t0)*100:.0f}%")
    show("flush duration (incl GIL)", [e[2]-e[1] for e in F])
    P = [e for e in ev if e[0] == "P"]
    # post latency: F end -> P (pair in order)
    show("flush end -> on_flushed", [p[1]-fe[2] for fe, p in zip(F[-len(P):], P) if p[1] >= fe[2]])
    R = [e for e in ev if e[0] == "R"]
    # request -> covered: first P with index >= r.index
    Pt = [p[1] for p in P]; Pi = [p[2] for p in P]
    mx = []; m = 0
    for i in Pi: m = max(m, i); mx.append(m)
    lat = []
    for r in R:
        j = bisect.bisect_left(Pt, r[1])
        while j < len(P) and mx[j] < r[2]: j += 1
        if j < len(P): lat.append(P[j][1] - r[1])
    show("flush request -> persisted", lat)
    a = [e for e in ev if e[0] == "a"]
    if a:
        lat = []
        for r in a:
            j = bisect.bisect_left(Pt, r[1])
            while j < len(P) and mx[j] < r[2]: j += 1
            if j < len(P): lat.append(P[j][1] - r[1])
        show("append recv -> persisted", lat)
ev = tr[lead]
props = [e for e in ev if e[0] == "p"]
def first_at(evs, t, idx, key=2):
    for e in evs:
        if e[1] >= t and e[key] >= idx: return e[1]
    return None
P = [e for e in ev if e[0] == "P"]; C = [e for e in ev if e[0] == "C"]
A = {}
for e in ev:
    if e[0] == "A": A.setdefault(e[2], []).append((e[0], e[1], e[3]))
import itertools
res = {"leader persisted": [], "commit": []}
for k in A: res["ack " + k] = []
# sample
for pr in props[::max(1, len(props)//2000)]:
    t, idx = pr[1], pr[2]
    x = first_at(P, t, idx);  y = first_at(C, t, idx)
    if x: res["leader persisted"].append(x - t)
    if y: res["commit"].append(y - t)
    for k, lst in A.items():
        z = first_at(lst, t, idx)
        if z: res["ack " + k].append(z - t)
print("leader: from propose to ...")
for k, v in res.items(): show(k, v)
# which is last before commit
last = {}
for pr in props[::max(1, len(props)//2000)]:
    t, idx = pr[1], pr[2]
    y = first_at(C, t, idx)
    if not y: continue
    cands = {"leader": first_at(P, t, idx)}
    for k, lst in A.items(): cands[k] = first_at(lst, t, idx)
    # commit needs leader + 1 follower: the critical one = max(leader, min(followers))
    fol = min((v, k) for k, v in cands.items() if k != "leader" and v)
    crit = "leader" if cands["leader"] >= fol[0] else "follower"
    last[crit] = last.get(crit, 0) + 1
print("critical:", last)
q = {(e[2], e[3]): e[1] for e in ev if e[0] == "q"}
rr = [e[1] - q[(e[2], e[3])] for e in ev if e[0] == "r" and (e[2], e[3]) in q]
show("leader: request in -> answer", rr)
# request in -> next propose
pt = [e[1] for e in props]
w = []
for e in ev:
    if e[0] == "q":
        j = bisect.bisect_left(pt, e[1])
        if j < len(pt): w.append(pt[j] - e[1])
show("leader: request in -> next propose", w)
# answers per request: gap between answer and next request from same conn
nxt = {}
byconn = {}
for e in ev:
    if e[0] in "qr": byconn.setdefault(e[2], []).append(e)
gaps = []
for c, l in byconn.items():
    for a, b in zip(l, l[1:]):
        if a[0] == "r" and b[0] == "q": gaps.append(b[1] - a[1])
show("leader: answer -> same conn's next request", gaps)
# the rule since sync20 commits on any 2 of 3 durable copies; the rule before capped that at
# the leader's own flush report (docs/raft.md deviation 19): both, from the same events
alt = []; act = []; capped = []; by = {"leader": 0, "follower": 0}
for pr in props[::max(1, len(props)//2000)]:
    t, idx = pr[1], pr[2]
    y = first_at(C, t, idx)
    own = first_at(P, t, idx)
    vals = [own] + [first_at(lst, t, idx) for lst in A.values()]
    if not y or None in vals: continue
    vals.sort(); alt.append(vals[1] - t); act.append(y - t); capped.append(max(vals[1], own) - t)
    by["leader" if own == vals[1] else "follower"] += 1
show("commit actual", act); show("commit if 2 of 3 (no leader cap)", alt)
show("commit if capped at own flush", capped)
print("  the second durable copy (what commits 2 of 3) was:", by)
