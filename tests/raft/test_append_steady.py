"""The follower's steady-state APPEND fast path (replication.py `_append_steady`) against the
general path alone: random sequences of APPENDs (steady ones and every kind of deviation:
another sender or term, a gap, an overlap, a wrong prev_term, a probe, CONFIG entries, a
batch whose entries are not of its entry_term, a payload that does not continue the log),
heartbeats, flush reports and ticks go to two follower cores that differ only in
`append_fast_path`; after every input both must hold the same log, hard state and volatile
state, raise the same error, and hand out the same Ready (messages field by field)."""
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.raft import HardState, MemLog, RaftConfig, RaftCore
from quorumlog.raft.memlog import MemPayload
from quorumlog.raft.log import EntryKind
from quorumlog.raft.messages import Append, Heartbeat

IDS = ("n1", "n2", "n3")
STATE = ("term", "voted_for", "role", "leader_id", "commit_index", "persisted_index",
         "leader_match", "reported_match", "_leader_epoch", "_leader_commit",
         "last_leader_heartbeat_ms", "_log_gen", "configs", "known_max_term",
         "need_increase_term_immediately", "recovering_term", "quiesced")


def _fields(m) -> tuple:
    names = [n for k in type(m).__mro__ for n in getattr(k, "__slots__", ())]
    return (type(m).__name__,) + tuple((n, repr(getattr(m, n, None))) for n in names)


def _ready(core) -> tuple:
    r = core.ready()
    return (r.hard_state, r.flush_to, r.flush_gen, [_fields(m) for m in r.messages],
            r.commit_index, [repr(e) for e in r.events])


def _snapshot(core) -> tuple:
    lg = core.log
    terms = tuple(lg.term_at(i) for i in range(lg.first_index(), lg.last_index() + 1))
    return (tuple(repr(getattr(core, a)) for a in STATE), lg.first_index(), terms,
            core.hard_state, core.has_ready())


def _follower(fast: bool) -> RaftCore:
    c = RaftCore("n2", MemLog(), random.Random(7), RaftConfig(), voters=IDS, peers=IDS,
                 hard_state=HardState(term=2))
    c.append_fast_path = fast
    c.step(Heartbeat(2, "n1", "n2", 0, 1))     # follows n1 in term 2
    c.ready()
    return c


def _append(core, d: dict) -> Append:
    """An APPEND built from the draw `d` against `core`'s log (the reference's)."""
    lg = core.log
    last = lg.last_index()
    prev = max(0, last + d["prev_shift"])
    prev_term = (lg.term_at(prev) if prev <= last else core.term) + d["prev_term_shift"]
    n = d["count"]
    e = max(1, core.term + d["entry_term_shift"])
    terms = tuple(max(1, e + s) for s in d["payload_term_shifts"][:n])
    terms += (e,) * (n - len(terms))
    start = prev + 1 + d["payload_shift"]
    payload = MemPayload(start, terms, (EntryKind.DATA,) * n, (b"x",) * n, (100,) * n) \
        if n else None
    configs = ((prev + 1, IDS, ()),) if d["config"] and n else ()
    return Append(max(0, core.term + d["term_shift"]), d["src"], "n2", prev, max(0, prev_term),
                  prev + 1, prev + n, e, payload, 100 * n, max(0, last + d["commit_shift"]),
                  configs, d["epoch"])


steady = st.fixed_dictionaries({
    "src": st.just("n1"), "term_shift": st.just(0), "prev_shift": st.just(0),
    "prev_term_shift": st.just(0), "count": st.integers(1, 4), "entry_term_shift": st.just(0),
    "payload_term_shifts": st.just(()), "payload_shift": st.just(0), "config": st.just(False),
    "commit_shift": st.integers(-3, 3), "epoch": st.integers(0, 2), "kind": st.just("append")})
deviant = st.fixed_dictionaries({
    "src": st.sampled_from(("n1", "n1", "n3", "n2", "n9")), "term_shift": st.integers(-1, 1),
    "prev_shift": st.integers(-3, 1), "prev_term_shift": st.integers(-1, 1),
    "count": st.integers(0, 4), "entry_term_shift": st.integers(-1, 1),
    "payload_term_shifts": st.lists(st.integers(-1, 1), max_size=4),
    "payload_shift": st.sampled_from((0, 0, 0, -1, 1)), "config": st.booleans(),
    "commit_shift": st.integers(-3, 3), "epoch": st.integers(0, 2), "kind": st.just("append")})
other = st.one_of(
    st.fixed_dictionaries({"kind": st.just("persist"), "back": st.integers(0, 3),
                           "stale_gen": st.booleans()}),
    st.fixed_dictionaries({"kind": st.just("heartbeat"), "src": st.sampled_from(("n1", "n3")),
                           "term_shift": st.integers(-1, 1), "commit_shift": st.integers(-3, 1)}),
    st.fixed_dictionaries({"kind": st.just("tick"), "ms": st.integers(0, 400)}),
    st.fixed_dictionaries({"kind": st.just("ready")}))
ops = st.lists(st.one_of(steady, steady, deviant, other), min_size=1, max_size=40)


def _input(d: dict, ref):
    """The input `d` as a function of a core, its message built once from the reference's
    state before it (a draw is relative to the log's end and the term)."""
    k = d["kind"]
    if k == "append":
        m = _append(ref, d)
        return lambda c: c.step(m)
    if k == "heartbeat":
        m = Heartbeat(max(0, ref.term + d["term_shift"]), d["src"], "n2",
                      max(0, ref.log.last_index() + d["commit_shift"]), 1)
        return lambda c: c.step(m)
    if k == "persist":
        index, gen = max(0, ref.log.last_index() - d["back"]), ref._log_gen - d["stale_gen"]
        return lambda c: c.on_persisted(index, gen)
    if k == "tick":
        now = ref.now_ms + d["ms"]
        return lambda c: c.tick(now)
    return lambda c: None


def _outcome(core, fn):
    try:
        fn(core)
    except Exception as e:      # (the same error from both, compared below)
        return type(e).__name__, str(e)
    return None


@settings(max_examples=400, deadline=None)
@given(ops)
def test_the_fast_path_decides_as_the_general_path(seq):
    fast, ref = _follower(True), _follower(False)
    for d in seq:
        fn = _input(d, ref)
        assert _outcome(fast, fn) == _outcome(ref, fn), d
        assert _snapshot(fast) == _snapshot(ref), d
        if d["kind"] == "ready":
            assert _ready(fast) == _ready(ref), d
    assert _ready(fast) == _ready(ref)


def test_steady_appends_take_the_fast_path():
    # the sequences above exercise it: a steady APPEND must not reach the general path
    # (a fast path that always declined would pass the differential test)
    c = _follower(True)
    calls = []
    c._check_sender = lambda m: calls.append(m) or RaftCore._check_sender(c, m)
    d = {"src": "n1", "term_shift": 0, "prev_shift": 0, "prev_term_shift": 0, "count": 3,
         "entry_term_shift": 0, "payload_term_shifts": (), "payload_shift": 0,
         "config": False, "commit_shift": 0, "epoch": 1}
    for _ in range(5):
        c.step(_append(c, d))
    assert calls == [] and c.log.last_index() == 15 and c.leader_match == 15
