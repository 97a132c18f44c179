"""Timeline tracing of a sync-flush cluster run (docs/benchmarks.md, "sync64"): on the import
path of `quorumlog bench cluster` (PYTHONPATH=bench/sync_trace) with QL_TRACE_DIR set, every
process of the run wraps a few driver, core, flusher and client-service calls and writes the
events (perf_counter_ns) to QL_TRACE_DIR/trace-<pid>.json at exit; analyze.py turns them into
where a sync put's latency goes. Events: R flush request, F one CommitLog.flush (start, end),
P flush report run on the loop, C commit, A AppendResponse received (src, match), a Append
received (last index), p propose (last index), q / r a client request in / answered; and for
the single-message path (bench/sync_trace/single.py): i a read's bytes handed to a connection
(buffer_updated: role, peer, outbound, bytes), o a write to a socket (start, end, role, peer,
outbound, bytes), Y the driver's apply (start, end), D a drain of the core (start, end).

    QL_TRACE_DIR=/tmp/tr PYTHONPATH=bench/sync_trace quorumlog bench cluster --duration 5 \\
        --no-references --warm-gib 0 --producers 64 --batch 1 --window 1 --flush sync
    python bench/sync_trace/analyze.py /tmp/tr
"""
import os, sys, time, atexit
D = os.environ.get("QL_TRACE_DIR")
PD = os.environ.get("QL_PROFILE_DIR")
if PD:
    # QL_PROFILE_DIR=dir: every process of the run also writes a cProfile (thread CPU time)
    # to dir/prof-<pid>.out at exit (the leader's and the bench client's split per call)
    import cProfile
    import signal as _signal
    _prof = cProfile.Profile(time.thread_time)
    _prof.enable()

    def _dump_prof():
        _prof.disable()
        _prof.dump_stats(os.path.join(PD, f"prof-{os.getpid()}.out"))
    atexit.register(_dump_prof)
    if not D:
        _signal.signal(_signal.SIGTERM, lambda *a: (_dump_prof(), os._exit(0)))
if D:
    ev = []
    ids = []
    T = time.perf_counter_ns
    import json
    import signal
    from quorumlog.node import flusher as F, driver as Dr, service as S
    from quorumlog.raft import core as C
    from quorumlog.net import transport as Tr

    def _install():
        class Proxy:
            def __init__(s, cl): s._cl = cl
            def __getattr__(s, k): return getattr(s._cl, k)
            def flush(s):
                t0 = T(); r = s._cl.flush(); ev.append(("F", t0, T())); return r
        o_start = F.Flusher.start
        def start(self, cl, loop, on_flushed, on_error):
            return o_start(self, Proxy(cl), loop, on_flushed, on_error)
        F.Flusher.start = start
        o_req = F.Flusher.request
        def request(self, index, gen):
            ev.append(("R", T(), index)); return o_req(self, index, gen)
        F.Flusher.request = request
        o_of = Dr.Node._on_flushed
        def _on_flushed(self, index, gen):
            ev.append(("P", T(), index)); return o_of(self, index, gen)
        Dr.Node._on_flushed = _on_flushed
        o_commit = Dr.Node._commit
        def _commit(self, ci):
            ev.append(("C", T(), ci)); return o_commit(self, ci)
        Dr.Node._commit = _commit
        o_step = C.RaftCore.step
        def step(self, m):
            n = type(m).__name__
            if n == "AppendResponse":
                ev.append(("A", T(), m.src, m.match_index if hasattr(m, "match_index") else getattr(m, "index", 0)))
            elif n == "Append":
                ev.append(("a", T(), m.last_index))
            return o_step(self, m)
        C.RaftCore.step = step
        o_prop = C.RaftCore.propose
        def propose(self, batch, count, nbytes):
            r = o_prop(self, batch, count, nbytes); ev.append(("p", T(), r[1])); return r
        C.RaftCore.propose = propose
        o_req2 = S.ClientService._on_request
        def _on_request(self, conn, rid, msg):
            ev.append(("q", T(), id(conn), rid)); return o_req2(self, conn, rid, msg)
        S.ClientService._on_request = _on_request
        o_ans = S.ClientService._answer
        def _answer(self, fut, conn, rid, req):
            ev.append(("r", T(), id(conn), rid)); return o_ans(self, fut, conn, rid, req)
        S.ClientService._answer = _answer
        o_bu = Tr._Conn.buffer_updated
        def buffer_updated(self, n):
            ev.append(("i", T(), int(self.role), self.peer_id, self.outbound, n))
            return o_bu(self, n)
        Tr._Conn.buffer_updated = buffer_updated
        o_w = Tr._Conn._write
        def _write(self, parts, n=-1):
            t0 = T(); r = o_w(self, parts, n)
            ev.append(("o", t0, T(), int(self.role), self.peer_id, self.outbound,
                       n if n >= 0 else sum(len(p) for p in parts)))
            return r
        Tr._Conn._write = _write
        o_ap = Dr.Node._apply
        def _apply(self):
            t0 = T(); r = o_ap(self); ev.append(("Y", t0, T())); return r
        Dr.Node._apply = _apply
        o_dr = Dr.Node._drain
        def _drain(self):
            if not ids:
                ids.append(self.id); ev.append(("N", T(), self.id))
            t0 = T(); r = o_dr(self); ev.append(("D", t0, T())); return r
        Dr.Node._drain = _drain
    _install()
    def dump():
        if not ev: return
        with open(os.path.join(D, f"trace-{os.getpid()}.json"), "w") as fh:
            json.dump(ev, fh)
    atexit.register(dump)
    def _term(*a):
        dump()
        if PD:
            _dump_prof()
        os._exit(0)
    signal.signal(signal.SIGTERM, _term)
