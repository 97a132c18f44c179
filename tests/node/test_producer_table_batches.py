"""The producer table's batches (node/producers.py): complete, partial, duplicate, out of order,
rebuilt from a native log's record properties (QL_PID/QL_SEQ/QL_N/QL_I) -- and, with
hypothesis, a table rebuilt from any window of a log written by whole and partial appends,
truncations and completions, checked against a model of which messages each entry holds."""
import tempfile

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from quorumlog.commitlog import CommitLog
from quorumlog.errors import DuplicateBatchError, ProducerSequenceError
from quorumlog.node.producers import KnownBatchError, ProducerTable
from quorumlog.store.nativelog import NativeRaftLog, producer_properties, producer_tag


class _RunsLog:
    """producers() gives the runs it was built with; every term is 1."""

    def __init__(self, runs):
        self.runs = runs

    def producer_snapshot(self):
        return []

    def producers(self, lo, hi):
        return [r for r in self.runs if lo <= r[1] <= hi]

    def term_at(self, index):
        return 1


def _table(runs, lo=1, hi=1 << 30):
    t = ProducerTable(16, 8)
    t.rebuild(_RunsLog(runs), lo, hi)
    return t


def test_a_prefix_is_an_incomplete_batch_and_its_completion_makes_it_whole():
    t = _table([(1, 2, 7, 5, 6, 0)])                 # ordinals 0..1 of 6
    with pytest.raises(KnownBatchError) as e:
        t.check(7, 5)
    b = e.value.batch
    assert (b.count, b.held, b.complete, b.prefix_known) == (6, 2, False, True)
    assert (e.value.first_index, e.value.last_index, e.value.term) == (1, 2, 1)
    assert t.latest(7) is b
    t.place(b, 10, 13, 2)
    assert b.complete and b.ranges == [[1, 2, 1], [10, 13, 2]]
    with pytest.raises(ProducerSequenceError, match="7 of 6"):
        t.place(b, 14, 14, 2)                        # never more than the batch
    assert b.ranges == [[1, 2, 1], [10, 13, 2]]
    t.check(7, 6)                                    # the next sequence is new


def test_runs_of_one_batch_merge_in_ordinal_order():
    t = _table([(1, 2, 7, 5, 6, 0), (4, 7, 7, 5, 6, 2)])
    b = t.lookup(7, 5)
    assert (b.held, b.complete, b.prefix_known) == (6, True, True)
    assert [r[:2] for r in b.ranges] == [[1, 2], [4, 7]]


def test_a_window_that_begins_inside_a_batch_does_not_know_its_first_entries():
    t = _table([(1, 2, 7, 5, 6, 0), (4, 7, 7, 5, 6, 2)], lo=4)
    b = t.lookup(7, 5)
    assert (b.held, b.complete, b.prefix_known) == (6, True, False)


def test_a_run_that_does_not_follow_is_not_guessed():
    t = _table([(1, 2, 7, 5, 6, 0), (4, 4, 7, 5, 6, 4)])   # ordinals 2, 3 missing
    b = t.lookup(7, 5)
    assert not b.prefix_known and b.held == 5


def test_records_without_a_count_are_batches_of_unknown_size():
    t = _table([(1, 3, 9, 1, None, None)])
    b = t.lookup(9, 1)
    assert (b.count, b.held, b.complete) == (None, 3, True)


def test_duplicates_out_of_order_and_reservations():
    t = ProducerTable(16, 4)
    t.record(1, 10, 5, 7, 1)
    with pytest.raises(DuplicateBatchError):
        t.check(1, 10)
    with pytest.raises(ProducerSequenceError, match="not above the last written"):
        t.check(1, 9)
    r = t.reserve(1, 11, 3)                          # queued: a retry meanwhile finds it
    with pytest.raises(KnownBatchError) as e:
        t.check(1, 11)
    assert e.value.batch is r and r.held == 0 and not r.complete
    with pytest.raises(ProducerSequenceError, match="recorded after"):
        t.reserve(1, 11, 3)
    t.forget(1, r)                                   # its proposal failed: nothing appended
    assert t.lookup(1, 11) is None
    t.check(1, 11)                                   # never appended: new again
    t.place(t.reserve(1, 11, 3), 8, 10, 1)
    assert t.lookup(1, 11).complete
    t.forget(1, t.lookup(1, 11))                     # (only a batch with nothing appended)
    assert t.lookup(1, 11) is not None


def test_producer_properties_and_tags_round_trip(tmp_path):
    with pytest.raises(Exception, match="reserved"):
        producer_properties(1, 2, 3, 0, {"QL_N": "x"})
    ps = producer_properties(5, 6, 4, 1, [{"a": "b"}, None, {"c": "d"}])
    assert [p["QL_I"] for p in ps] == ["1", "2", "3"] and ps[0]["a"] == "b"
    cl = CommitLog(str(tmp_path / "log"), segment_size_bytes=1 << 16)
    try:
        cl.append_batch("t", [b"x", b"y", b"z"], term=1, tags="tg", keys=[("k",)] * 3,
                        properties=ps)
        cl.append_batch("t", [b"w"], term=1, properties={"QL_PID": "8", "QL_SEQ": "2"})
        cl.append_batch("t", [b"v"], term=1, properties={"QL_PID": "8", "QL_SEQ": "x"})
        cl.append_batch("t", [b"u"], term=1)
        tags = [producer_tag(cl.record_at(cl.position_of(i))) for i in range(1, 7)]
        assert tags == [(5, 6, 4, 1), (5, 6, 4, 2), (5, 6, 4, 3), (8, 2, None, None), None, None]
    finally:
        cl.close()


def test_producers_reads_every_form_of_record(tmp_path):
    from quorumlog.commitlog import NOOP
    cl = CommitLog(str(tmp_path / "log"), segment_size_bytes=1 << 16)   # several segments
    try:
        lg = NativeRaftLog(cl)
        big = (1 << 63) - 1
        lg.append_producer_batch(1, ("t", [b"a"] * 3, {"tags": "x", "keys": [("k",)] * 3,
                                                       "properties": {"u": "v"}}), big, 1)
        cl.append_control(NOOP, b"", term=1)
        # a writer that put the reserved properties after its own (read the slow way)
        ps = [dict({"z": "1"}, **p) for p in producer_properties(5, 2, 2, 0)]
        cl.append_batch("t", [b"b", b"c"], term=1, properties=ps)
        cl.append_batch("t", [b"d", b"e"], term=1, properties={"QL_PID": "6", "QL_SEQ": "3"})
        cl.append_batch("t", [b"f"], term=1, properties={"other": "1"})
        cl.append_batch("t", [b"g"], term=1)
        cl.append_batch("t", [b"h" * 9000] * 12, term=1,    # crosses segments
                        properties=producer_properties(7, 4, 12, 0))
        want = [(1, 3, big, 1, 3, 0), (5, 6, 5, 2, 2, 0), (7, 8, 6, 3, None, None),
                (11, 22, 7, 4, 12, 0)]
        assert lg.producers(1, cl.last_index) == want
        assert lg.producers(2, 12) == [(2, 3, big, 1, 3, 1), (5, 6, 5, 2, 2, 0),
                                       (7, 8, 6, 3, None, None), (11, 12, 7, 4, 12, 0)]
        assert lg.producers(14, 13) == []
    finally:
        cl.close()


# -- a model: which (pid, seq, ordinal) each entry of a log holds ------------------------------
_op = st.one_of(
    st.tuples(st.just("new"), st.integers(1, 3), st.integers(1, 5), st.integers(0, 4)),
    st.tuples(st.just("complete"), st.integers(1, 3), st.integers(1, 5)),
    st.tuples(st.just("other"), st.integers(1, 2)),
    st.tuples(st.just("truncate"), st.integers(0, 6)),
)


def _runs(model, lo):
    """The expected runs [(first, last, pid, seq, count, first_ordinal)] at index >= lo."""
    out = []
    for i, e in enumerate(model, 1):
        if i < lo or e is None:
            continue
        pid, seq, count, o = e
        if out and out[-1][1] == i - 1 and out[-1][2:5] == [pid, seq, count] \
                and out[-1][5] + i - out[-1][0] == o:
            out[-1][1] = i
        else:
            out.append([i, i, pid, seq, count, o])
    return [tuple(r) for r in out]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_op, min_size=1, max_size=25), lo_frac=st.floats(0, 1),
       step=st.sampled_from([1, 2, 3, 7, None]))
def test_rebuilt_table_matches_a_model_of_the_log(ops, lo_frac, step):
    with tempfile.TemporaryDirectory() as d:
        cl = CommitLog(d + "/log", segment_size_bytes=1 << 16)
        try:
            lg = NativeRaftLog(cl)
            model = []                  # per entry: (pid, seq, count, ordinal) or None
            next_seq = {1: 0, 2: 0, 3: 0}

            def held(pid, seq):
                return max((e[3] + 1 for e in model if e and e[:2] == (pid, seq)), default=0)

            def append(pid, seq, count, first, n):
                cl.append_batch("t", [b"m"] * n, term=1,
                                properties=producer_properties(pid, seq, count, first)[:n])
                model.extend((pid, seq, count, first + i) for i in range(n))

            for op in ops:
                if op[0] == "new":
                    _, pid, count, cut = op
                    next_seq[pid] += 1
                    append(pid, next_seq[pid], count, 0, max(1, count - cut))
                elif op[0] == "complete":
                    # the newest batch of pid, if incomplete: some or all of what it misses
                    _, pid, n = op
                    last = [e for e in model if e and e[0] == pid]
                    if last:
                        seq, count = last[-1][1], last[-1][2]
                        h = held(pid, seq)
                        if h < count:
                            append(pid, seq, count, h, min(n, count - h))
                elif op[0] == "other":
                    cl.append_batch("t", [b"o"] * op[1], term=1)
                    model.extend([None] * op[1])
                else:
                    keep = max(0, len(model) - op[1])
                    cl.truncate_after(keep)
                    del model[keep:]
            assert cl.last_index == len(model)
            if not model:
                return
            lo = 1 + int(lo_frac * (len(model) - 1))
            assert lg.producers(lo, len(model)) == _runs(model, lo)
            t = ProducerTable(16, 64)
            t.rebuild(lg, lo, len(model))
            assert t.pending                                 # read later, not in the election
            steps = 0
            while step is not None and t.pending:            # a driver's slices (runs split)
                t.read_step(step)
                steps += 1
            assert step is None or steps == -(-(len(model) - lo + 1) // step)
            seen = {e[:2] for e in model[lo - 1:] if e}
            for pid in (1, 2, 3):
                for seq in range(1, next_seq[pid] + 1):
                    b = t.lookup(pid, seq)
                    if (pid, seq) not in seen:
                        assert b is None
                        continue
                    mine = [(i, e) for i, e in enumerate(model, 1) if e and e[:2] == (pid, seq)]
                    count = mine[0][1][2]
                    h = held(pid, seq)
                    assert (b.count, b.held, b.complete) == (count, h, h == count)
                    in_window = [i for i, _ in mine if i >= lo]
                    assert b.prefix_known == (in_window[0] == mine[0][0])
                    covered = [i for f, la, _ in b.ranges for i in range(f, la + 1)]
                    assert covered == in_window
                    with pytest.raises(KnownBatchError):
                        t.check(pid, seq)
                top = max((s for p, s in seen if p == pid), default=None)
                if top is not None:
                    t.check(pid, top + 1)                 # above the highest: new
        finally:
            cl.close()


def test_a_log_that_cannot_be_read_refuses_every_producer_batch():
    from quorumlog.errors import CorruptLogError

    class Damaged(_RunsLog):
        def producers(self, lo, hi):
            raise CorruptLogError("segment 0 offset 96: CRC mismatch", "segment", 96)

    t = ProducerTable(16, 8)
    t.rebuild(Damaged([]), 1, 10)
    with pytest.raises(ProducerSequenceError, match="could not read .* CRC mismatch"):
        t.check(1, 1)
    t.rebuild(_RunsLog([(1, 1, 1, 1)]), 1, 10)        # a later election reads it again
    with pytest.raises(DuplicateBatchError):
        t.check(1, 1)


# --- the rebuild records only the runs that can stay (producers._kept_runs) ---------------

def _state(t):
    return [(pid, [(b.seq, b.count, b.held, b.ranges, b.prefix_known) for b in batches])
            for pid, batches in t._by_pid.items()]


_run_ops = st.lists(st.tuples(st.integers(1, 3),            # pid
                              st.integers(0, 4),            # sequence step (0: same batch)
                              st.integers(1, 2),            # entries in the run
                              st.booleans(),                # a legacy run (no count)
                              st.integers(0, 3)),           # 0: the sequence goes back 3
                    max_size=40)


@settings(max_examples=500, deadline=None)
@given(ops=_run_ops, prior=_run_ops, keep=st.integers(1, 3), max_producers=st.integers(1, 3),
       step=st.sampled_from([1, 3, 8, 1000]))
@example(ops=[(1, 0, 1, False, 1), (1, 4, 1, False, 1), (1, 1, 1, False, 0),    # 5 9 7 8:
              (1, 1, 1, False, 1)], prior=[], keep=2, max_producers=3, step=8)    # disorder
@example(ops=[(3, 0, 1, False, 1), (2, 0, 1, False, 1), (3, 0, 1, False, 1),       # more
              (1, 0, 1, False, 1), (2, 2, 1, False, 1), (3, 0, 1, False, 1),       # producers
              (1, 1, 1, False, 1), (2, 0, 1, False, 1)],                           # than room
         prior=[], keep=1, max_producers=2, step=8)
def test_recording_the_kept_runs_equals_recording_every_run(ops, prior, keep, max_producers,
                                                            step):
    # differential: a table fed every run of a window (the reference: _record_runs) and one
    # fed through read_step's filter end equal, from the same earlier state, including
    # producers whose sequences go back and more producers than the table has room for
    def runs_of(ops, index):
        out, seq, held = [], {}, {}
        for pid, dseq, n, legacy, back in ops:
            s = seq.get(pid, 5) + dseq - (3 if back == 0 else 0)
            seq[pid] = s = max(s, 0)
            o = held.get((pid, s), 0) if dseq == 0 else 0
            held[(pid, s)] = o + n
            out.append((index, index + n - 1, pid, s) if legacy
                       else (index, index + n - 1, pid, s, 10, o))
            index += n + (back % 2)
        return out, index
    before, index = runs_of(prior, 1)
    window, end = runs_of(ops, index)
    log = _RunsLog(before + window)
    full = ProducerTable(max_producers, keep)
    full._record_runs(log, before)
    full._record_runs(log, window)
    got = ProducerTable(max_producers, keep)
    got._record_runs(log, before)
    got._source = (log, index, end)
    while not got.read_step(step):
        pass
    assert _state(got) == _state(full)
