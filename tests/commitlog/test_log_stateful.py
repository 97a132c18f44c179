"""Hypothesis stateful test of the native CommitLog against a list model.

The model is the list of every record's exact bytes (built with the reference codec from the
index, term and store timestamp the log returned and a position predicted from format.md's
BLANK rule), plus the end position and the first index the log still holds. Steps: append,
append_batch, append_control, read by index range, record(i), truncate_after, retention
(delete_segments_before: the freed files are reused as new segments, so later segments hold
old records past the end), flush, close/reopen, and crash: `crash_for_testing()` drops
the log like kill -9, then the page cache is "lost": every segment byte after the durable
position reads as zeros, or as what a reused file held before (old records: the first held
segment's bytes at the same offsets), wholly-lost segments are deleted or zeroed, and stale
raft-index entries zeroed or kept; the model drops the records that were not durable.
Segments are 64 KiB so rollover and BLANK records happen often.

Flushes happen only on explicit flush()/close(): the background flusher runs once an hour.
"""
import os
import pathlib
import shutil

import pytest
from hypothesis import event, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule)

from quorumlog import errors, format as qf

from cl_support import (SEG, IDX_ENTRIES, controls, fast_mkdtemp, hsettings, messages, open_log,
                        topics)


LOG_KW = dict(flush="async", flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000,
              max_message_bytes=20000)


def message_bytes(index, term, position, ts, m):
    m = dict(m)
    if m.get("born_timestamp_ms") is None:
        m["born_timestamp_ms"] = ts
    return qf.encode_record(qf.TYPE_MESSAGE, index=index, term=term, position=position,
                            store_timestamp_ms=ts, **m)


class LogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = fast_mkdtemp("ql-stateful-")
        self.path = pathlib.Path(self.tmp) / "s"
        self.log = None
        self.raws = []          # raws[i-1]: the exact bytes of record i
        self.positions = []
        self.end = 0
        self.term = 1
        self.first = 1          # the first raft index the log holds (retention moves it)
        self.min_pos = 0        # ... and its first position

    @initialize()
    def open(self):
        self.log = open_log(self.path, **LOG_KW)

    def teardown(self):
        try:
            if self.log is not None and not self.log.closed:
                self.log.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -------------------------------------------------------------- model helpers

    def place(self, size):
        pos = self.end
        if not qf.fits_in_segment(pos, size, SEG):
            pos = pos - pos % SEG + SEG
        return pos

    def add(self, raw, pos):
        assert pos == self.place(len(raw)), f"record {len(self.raws) + 1} at {pos}"
        self.raws.append(raw)
        self.positions.append(pos)
        self.end = pos + len(raw)

    def drop_after(self, i):
        del self.raws[i:]
        del self.positions[i:]
        # nothing left the log holds: it ends where its first segment starts
        self.end = (self.positions[-1] + len(self.raws[-1]) if i >= self.first
                    else self.min_pos)

    @property
    def last(self):
        return len(self.raws)

    def term_of(self, i):
        return qf.decode_record(self.raws[i - 1]).term

    # -------------------------------------------------------------- appends

    @rule(m=messages(max_body=12000), bump=st.booleans(), default_born=st.booleans())
    def append(self, m, bump, default_born):
        self.term += bump
        m = dict(m)
        if default_born:
            m["born_timestamp_ms"] = None
        args = {k: v for k, v in m.items() if k not in ("topic", "body")}
        if args["born_timestamp_ms"] is None:
            del args["born_timestamp_ms"]
        idx, pos, ts = self.log.append(m["topic"], m["body"], term=self.term, **args)
        assert idx == self.last + 1
        self.add(message_bytes(idx, self.term, pos, ts, m), pos)

    @rule(topic=topics, bodies=st.lists(st.binary(max_size=6000), min_size=1, max_size=25),
          qid=st.integers(0, qf.MAX_QUEUE_ID), qoff=st.integers(0, 1 << 40),
          tags=st.none() | st.text(max_size=10), bump=st.booleans())
    def append_batch(self, topic, bodies, qid, qoff, tags, bump):
        self.term += bump
        first, positions, ts = self.log.append_batch(topic, bodies, queue_ids=qid,
                                                     queue_offsets=qoff, term=self.term,
                                                     tags=tags)
        assert first == self.last + 1 and len(positions) == len(bodies)
        for i, body in enumerate(bodies):
            m = dict(topic=topic, body=body, queue_id=qid, queue_offset=qoff + i, tags=tags)
            self.add(message_bytes(first + i, self.term, int(positions[i]), ts, m),
                     int(positions[i]))

    @rule(n=st.integers(1, 4), fill=st.integers(1, 255))
    def append_big(self, n, fill):
        # drawn bodies are mostly small: this makes segments roll over (BLANKs, retention
        # and reused segment files) within a run's steps
        bodies = [bytes([fill]) * 19000] * n
        first, positions, ts = self.log.append_batch("big", bodies, term=self.term)
        for i, body in enumerate(bodies):
            m = dict(topic="big", body=body, queue_id=0, queue_offset=i, tags=None)
            self.add(message_bytes(first + i, self.term, int(positions[i]), ts, m),
                     int(positions[i]))

    @rule(c=controls(max_body=3000), bump=st.booleans())
    def append_control(self, c, bump):
        self.term += bump
        idx, pos = self.log.append_control(c["type"], c["payload"], term=self.term)
        assert idx == self.last + 1
        ts = qf.decode_record(bytes(self.log.record_at(pos))).store_timestamp_ms
        self.add(qf.encode_record(c["type"], index=idx, term=self.term, position=pos,
                                  born_timestamp_ms=ts, store_timestamp_ms=ts,
                                  body=c["payload"]), pos)

    # -------------------------------------------------------------- reads

    @precondition(lambda self: self.last >= self.first)
    @rule(data=st.data(), max_bytes=st.integers(1, 3 * SEG))
    def read_range(self, data, max_bytes):
        lo = data.draw(st.integers(self.first, self.last + 1))
        hi = data.draw(st.integers(lo, self.last + 3))
        view, count = self.log.read(lo, hi, max_bytes)
        if lo > self.last or hi == lo:
            assert count == 0
            return
        assert 1 <= count <= min(hi, self.last + 1) - lo
        want = b"".join(self.raws[lo - 1:lo - 1 + count])
        assert bytes(view) == want
        assert count == 1 or len(want) <= max_bytes
        seg = self.positions[lo - 1] // SEG
        assert all(p // SEG == seg for p in self.positions[lo - 1:lo - 1 + count])
        # maximal: the next record would have crossed a segment, max_bytes or hi
        nxt = lo - 1 + count
        if nxt < min(hi - 1, self.last):
            assert (self.positions[nxt] // SEG != seg
                    or len(want) + len(self.raws[nxt]) > max_bytes)

    @precondition(lambda self: self.last >= self.first)
    @rule(data=st.data())
    def record(self, data):
        i = data.draw(st.integers(self.first, self.last))
        ref = qf.decode_record(self.raws[i - 1])
        assert self.log.record(i) == ref
        assert bytes(self.log.record_at(self.positions[i - 1])) == self.raws[i - 1]
        assert (self.log.term_at(i), self.log.position_of(i), self.log.size_of(i)) == \
            (ref.term, self.positions[i - 1], len(self.raws[i - 1]))

    @rule(i=st.integers(-2, 0) | st.integers(10 ** 6, 10 ** 7))
    def out_of_range(self, i):
        i = i if i <= 0 else self.last + 1 + i % 3
        for call in (self.log.record, self.log.term_at, self.log.position_of):
            with pytest.raises(errors.IndexOutOfRangeError):
                call(i)

    # -------------------------------------------------------------- mutations

    @precondition(lambda self: self.last >= self.first)
    @rule(data=st.data())
    def truncate_after(self, data):
        i = data.draw(st.integers(self.first - 1, self.last))
        self.log.truncate_after(i)
        self.drop_after(i)
        if self.raws:
            self.term = max(self.term, self.term_of(self.last))

    @precondition(lambda self: self.last >= self.first
                  and self.positions[-1] // SEG > self.positions[self.first - 1] // SEG)
    @rule(data=st.data())
    def retention(self, data):
        # whole segments below a record's position; the last record's segment stays
        i = data.draw(st.integers(self.first + 1, self.last))
        self.log.delete_segments_before(self.positions[i - 1])
        lo = self.min_pos = self.log.min_position
        self.first = next(j for j in range(self.first, self.last + 1)
                          if self.positions[j - 1] >= lo)
        event(f"retention (pool {self.log.stats()['recycle_pool']})")

    @rule()
    def flush(self):
        assert self.log.flush() == self.end == self.log.flushed_position

    @rule()
    def close_reopen(self):
        self.log.close()
        self.log = open_log(self.path, **LOG_KW)
        assert not self.log.unclean_open
        self.check_everything()

    @rule(delete_lost_segments=st.booleans(), zero_index=st.booleans(),
          garbage=st.booleans(), old_records=st.booleans())
    def crash(self, delete_lost_segments, zero_index, garbage, old_records):
        durable = self.log.flushed_position
        assert durable <= self.end
        if self.log.stats()["segments_recycled"]:
            event("crash with a reused segment file in the log")
        self.log.crash_for_testing()
        self.log = None
        cp_path = self.path / "checkpoint"
        if cp_path.exists():
            # the checkpoint never claims more than is durable (also after truncate_after:
            # a stale checkpoint beyond the truncation point would make recovery trust
            # bytes that are gone)
            cp = qf.decode_checkpoint(cp_path.read_bytes())
            assert cp.flushed_position <= durable, (cp.flushed_position, durable)
        # keep the records that end at or before the durable position
        keep = sum(1 for p, r in zip(self.positions, self.raws) if p + len(r) <= durable)
        event(f"crash lost {'no' if keep == self.last else 'some'} records")
        self.drop_after(keep)
        lost_from = durable
        names = sorted(n for n in os.listdir(self.path / "commitlog") if n.isdigit())
        old = (self.path / "commitlog" / names[0]).read_bytes() if names else bytes(SEG)
        for name in names:
            start = int(name)
            f = self.path / "commitlog" / name
            if start + SEG <= lost_from:
                continue
            if start >= lost_from and start > 0 and delete_lost_segments:
                f.unlink()
                continue
            cut = max(0, lost_from - start)
            # lost page cache reads back as zeros, or in a reused file as its old records
            # (an older segment's); "garbage" models a torn sector write
            lost = old[cut:] if old_records and start > int(names[0]) else bytes(SEG - cut)
            with open(f, "r+b") as fh:
                fh.seek(cut)
                fh.write((os.urandom(min(64, SEG - cut)) if garbage and cut < SEG else b"")
                         + lost[64 if garbage else 0:])
        if zero_index:
            for name in sorted(os.listdir(self.path / "index")):
                first = int(name)
                f = self.path / "index" / name
                lo = max(0, keep + 1 - first)
                if lo < IDX_ENTRIES:
                    with open(f, "r+b") as fh:
                        fh.seek(lo * qf.INDEX_ENTRY_SIZE)
                        fh.write(bytes((IDX_ENTRIES - lo) * qf.INDEX_ENTRY_SIZE))
        self.log = open_log(self.path, **LOG_KW)
        assert self.log.unclean_open
        if self.raws:
            self.term = max(self.term, self.term_of(self.last))
        self.check_everything()

    # -------------------------------------------------------------- checks

    @invariant()
    def positions_agree(self):
        if self.log is None:
            return
        assert self.log.last_index == self.last
        assert self.log.first_index == (self.first if self.last >= self.first or self.last
                                        else 0)
        assert self.log.end_position == self.end
        if self.last >= self.first:
            assert self.log.last_term == self.term_of(self.last)
        elif not self.raws:
            assert self.log.last_term == 0
        # (else every record is below retention's cut: the log no longer holds a term)

    def check_everything(self):
        for lo in range(self.first, self.last + 1):
            if lo == self.first or self.positions[lo - 1] // SEG != self.positions[lo - 2] // SEG:
                view, count = self.log.read(lo, self.last + 1, 4 * SEG)
                assert bytes(view) == b"".join(self.raws[lo - 1:lo - 1 + count])
        n = 0
        for start, seg_path in self.log.segments():
            with open(seg_path, "rb") as f:
                data = f.read()
            assert len(data) == SEG
            if start + SEG > self.end:      # past the end: zeros, or old records until reopen
                data = data[:max(0, self.end - start)] + bytes(SEG - max(0, self.end - start))
            n += sum(1 for _ in qf.iter_records(data, start))
        assert n == max(0, self.last - self.first + 1)


TestLogStateful = LogMachine.TestCase
TestLogStateful.settings = hsettings(100, stateful_step_count=40)
