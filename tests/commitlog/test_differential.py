"""Differential tests: the native (Cython) codec against the pure-Python reference codec.

Hypothesis generates messages (topics, tags, keys, properties, bodies, timestamps, flags);
they go through the native log (append, append_batch, append_control) and the bytes it
wrote (record_at) must equal the reference encoding with the index, term, position and store
timestamp the log assigned; the native decoder (decode_at, record) must equal the reference
decoder; and the reference decoder must accept the native bytes. Positions are predicted
independently (format.md's BLANK rule) rather than trusted.
"""
import contextlib
import pathlib
import shutil

import numpy as np
from hypothesis import given, strategies as st

from quorumlog import format as qf

from cl_support import (SEG, controls, fast_mkdtemp, hsettings, messages, open_log, topics,
                        tags as tags_st, keys as keys_st, properties as props_st, timestamps)



@contextlib.contextmanager
def cleanup(path):
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Predictor:
    """Where the next record goes, from format.md alone."""

    def __init__(self):
        self.end = 0

    def place(self, size):
        pos = self.end
        if not qf.fits_in_segment(pos, size, SEG):
            pos = pos - pos % SEG + SEG
        self.end = pos + size
        return pos


def check_against_reference(log, index, rtype, *, term, position, ts, m=None, payload=b""):
    raw = bytes(log.record_at(position))
    if rtype == qf.TYPE_MESSAGE:
        m = dict(m)
        born = m.pop("born_timestamp_ms")
        want = qf.encode_record(qf.TYPE_MESSAGE, index=index, term=term, position=position,
                                store_timestamp_ms=ts,
                                born_timestamp_ms=ts if born is None else born, **m)
    else:
        want = qf.encode_record(rtype, index=index, term=term, position=position,
                                born_timestamp_ms=ts, store_timestamp_ms=ts, body=payload)
    assert raw == want
    ref = qf.decode_record(raw, expected_position=position)
    assert log.decode_at(position) == ref
    assert log.record(index) == ref
    assert (log.position_of(index), log.size_of(index), log.term_at(index)) == \
        (position, len(raw), term)
    return ref


@given(st.lists(st.one_of(messages(max_body=6000).map(lambda m: ("m", m)),
                          controls().map(lambda c: ("c", c))), min_size=1, max_size=30),
       st.lists(st.booleans(), min_size=30, max_size=30))
@hsettings(80)
def test_append_matches_reference(tmp_path_factory, ops, term_bumps):
    path = pathlib.Path(fast_mkdtemp("ql-diff-"))
    pred = Predictor()
    term = 1
    with cleanup(path), open_log(path / "s", max_message_bytes=8000) as log:
        for i, ((kind, a), bump) in enumerate(zip(ops, term_bumps), start=1):
            term += bump
            if kind == "m":
                m = dict(a)
                if i % 3 == 0:
                    m["born_timestamp_ms"] = None          # default: the store timestamp
                args = {k: v for k, v in m.items() if k not in ("topic", "body")}
                if args["born_timestamp_ms"] is None:
                    del args["born_timestamp_ms"]
                idx, pos, ts = log.append(m["topic"], m["body"], term=term, **args)
                size = len(qf.encode_record(qf.TYPE_MESSAGE, index=1, term=0, position=0,
                                            **{k: v for k, v in m.items()
                                               if k != "born_timestamp_ms"}))
                assert (idx, pos) == (i, pred.place(size))
                check_against_reference(log, idx, qf.TYPE_MESSAGE, term=term, position=pos,
                                        ts=ts, m=m)
            else:
                idx, pos = log.append_control(a["type"], a["payload"], term=term)
                size = qf.HEADER_SIZE + len(a["payload"])
                assert (idx, pos) == (i, pred.place(size))
                ts = log.record(idx).store_timestamp_ms
                check_against_reference(log, idx, a["type"], term=term, position=pos, ts=ts,
                                        payload=a["payload"])
        assert log.end_position == pred.end
        # every segment parses with the reference codec, BLANK tails included
        n = 0
        for start, seg_path in log.segments():
            with open(seg_path, "rb") as f:
                n += sum(1 for _ in qf.iter_records(f.read(), start))
        assert n == len(ops)


@st.composite
def batches(draw):
    n = draw(st.integers(1, 40))
    topic = draw(topics)
    bodies = draw(st.lists(st.binary(max_size=3000), min_size=n, max_size=n))
    kw = {}
    qid = draw(st.sampled_from(["int", "list", "array"]))
    ids = draw(st.lists(st.integers(0, qf.MAX_QUEUE_ID), min_size=n, max_size=n))
    kw["queue_ids"] = ids[0] if qid == "int" else (ids if qid == "list" else np.array(ids, dtype=np.int64))
    qo = draw(st.sampled_from(["int", "array"]))
    first = draw(st.integers(0, 1 << 40))
    offs = draw(st.lists(st.integers(0, 1 << 62), min_size=n, max_size=n))
    kw["queue_offsets"] = first if qo == "int" else np.array(offs, dtype=np.int64)
    t = draw(st.sampled_from(["none", "one", "list"]))
    if t == "one":
        kw["tags"] = draw(tags_st)
    elif t == "list":
        kw["tags"] = draw(st.lists(tags_st, min_size=n, max_size=n))
    if draw(st.booleans()):
        kw["keys"] = draw(st.lists(keys_st, min_size=n, max_size=n))
    p = draw(st.sampled_from(["none", "one", "list"]))
    if p == "one":
        kw["properties"] = draw(props_st)
    elif p == "list":
        kw["properties"] = draw(st.lists(props_st, min_size=n, max_size=n))
    if draw(st.booleans()):
        kw["born_timestamps_ms"] = np.array(
            draw(st.lists(timestamps, min_size=n, max_size=n)), dtype=np.int64)
    kw["flags"] = draw(st.integers(0, (1 << 32) - 1))
    return topic, bodies, kw


def expand(n, kw, i):
    """The per-message arguments message i of a batch stands for (architecture.md)."""
    def pick(v, default):
        if v is None:
            return default
        if isinstance(v, (list, np.ndarray)):
            return v[i].item() if isinstance(v, np.ndarray) else v[i]
        return v
    qo = kw["queue_offsets"]
    return dict(
        queue_id=int(pick(kw["queue_ids"], 0)),
        queue_offset=int(qo[i]) if isinstance(qo, np.ndarray) else qo + i,
        tags=pick(kw.get("tags"), None), keys=pick(kw.get("keys"), ()),
        properties=pick(kw.get("properties"), None),
        born_timestamp_ms=pick(kw.get("born_timestamps_ms"), None), flags=kw["flags"])


@given(st.lists(batches(), min_size=1, max_size=4))
@hsettings(40)
def test_append_batch_matches_reference(tmp_path_factory, batch_list):
    path = pathlib.Path(fast_mkdtemp("ql-diffb-"))
    pred = Predictor()
    index = 0
    with cleanup(path), open_log(path / "s") as log:
        for term, (topic, bodies, kw) in enumerate(batch_list, start=1):
            first, positions, ts = log.append_batch(topic, bodies, term=term, **kw)
            assert first == index + 1
            assert isinstance(positions, np.ndarray) and positions.dtype == np.int64
            assert len(positions) == len(bodies)
            for i, body in enumerate(bodies):
                m = expand(len(bodies), kw, i)
                m.update(topic=topic, body=body)
                size = len(qf.encode_record(qf.TYPE_MESSAGE, index=1, term=0, position=0,
                                            **{k: v for k, v in m.items()
                                               if k != "born_timestamp_ms"}))
                assert int(positions[i]) == pred.place(size)
                check_against_reference(log, first + i, qf.TYPE_MESSAGE, term=term,
                                        position=int(positions[i]), ts=ts, m=m)
            index += len(bodies)
        assert log.last_index == index and log.end_position == pred.end


@given(st.lists(messages(max_body=500), min_size=1, max_size=20))
@hsettings(20)
def test_scan_matches_reference(tmp_path_factory, msgs):
    """scan()'s RECORD_INFO rows carry the header fields the reference decoder reads."""
    path = pathlib.Path(fast_mkdtemp("ql-diffs-"))
    with cleanup(path), open_log(path / "s") as log:
        for m in msgs:
            m = dict(m)
            log.append(m.pop("topic"), m.pop("body"), term=1, **m)
        log.append_control(qf.TYPE_NOOP, term=1)
        info, nxt = log.scan(0, log.end_position)
        assert nxt == log.end_position and len(info) == len(msgs) + 1
        for row in info:
            ref = qf.decode_record(bytes(log.record_at(int(row["position"]))))
            assert (int(row["index"]), int(row["term"]), int(row["type"])) == \
                (ref.index, ref.term, ref.type)
            assert (int(row["queue_id"]), int(row["queue_offset"]), int(row["flags"])) == \
                (ref.queue_id, ref.queue_offset, ref.flags)
            assert (int(row["born_ts"]), int(row["store_ts"]), int(row["tag_hash"])) == \
                (ref.born_timestamp_ms, ref.store_timestamp_ms, ref.tag_hash)
            assert int(row["topic_hash"]) == qf.topic_hash_of(ref.topic)
            assert int(row["size"]) == log.size_of(ref.index)
            raw = bytes(log.record_at(ref.position))
            off, n = int(row["body_offset"]), int(row["body_len"])
            assert raw[off:off + n] == bytes(ref.body) and off + n == len(raw)


@given(st.lists(st.one_of(messages(max_body=6000).map(lambda m: ("m", m)),
                          controls().map(lambda c: ("c", c))), min_size=1, max_size=25),
       st.integers(1, 1 << 40), st.integers(-(1 << 40), 1 << 40))
@hsettings(30)
def test_reference_encoded_records_replicate_into_native(ops, term, ts):
    """The other direction: records encoded by the reference codec (positions by format.md's
    BLANK rule) are accepted by the native follower path verbatim, and the native decoder
    reads them back as the reference decoder does."""
    path = pathlib.Path(fast_mkdtemp("ql-diffr-"))
    pred = Predictor()
    raws = []
    for i, (kind, a) in enumerate(ops, start=1):
        if kind == "m":
            m = dict(a)
            size = len(qf.encode_record(qf.TYPE_MESSAGE, index=i, term=term, position=0,
                                        store_timestamp_ms=ts, **m))
            raws.append(qf.encode_record(qf.TYPE_MESSAGE, index=i, term=term,
                                         position=pred.place(size), store_timestamp_ms=ts, **m))
        else:
            size = qf.HEADER_SIZE + len(a["payload"])
            raws.append(qf.encode_record(a["type"], index=i, term=term, position=pred.place(size),
                                         born_timestamp_ms=ts, store_timestamp_ms=ts,
                                         body=a["payload"]))
    with cleanup(path), open_log(path / "s") as log:
        k = 0
        while k < len(raws):
            # one range per segment: BLANKs are never shipped, the follower writes them
            seg = qf.decode_record(raws[k]).position // SEG
            j = k
            while j < len(raws) and qf.decode_record(raws[j]).position // SEG == seg:
                j += 1
            assert log.append_replicated(b"".join(raws[k:j])) == j
            k = j
        assert log.end_position == pred.end
        for i, raw in enumerate(raws, start=1):
            ref = qf.decode_record(raw)
            assert bytes(log.record_at(ref.position)) == raw
            assert log.record(i) == ref


@st.composite
def big_batches(draw):
    """A batch big enough for the writer thread's pieces and the staging buffer's refills:
    record sizes around the fold CRC's 256 B, the staged/apart 2 KiB line and 4 KiB, with
    bodies made from drawn seeds (drawing MBs of bytes would be slow)."""
    sizes = draw(st.lists(st.one_of(st.integers(0, 300), st.integers(2030, 2070),
                                    st.sampled_from([4096, 4097, 65000])),
                          min_size=1, max_size=60))
    reps = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 250))
    props = draw(st.one_of(st.none(), props_st))
    tag = draw(st.one_of(st.none(), tags_st))
    sizes = (sizes * reps)[:3000]
    bodies = [bytes([(seed + k + j) % 251 for j in range(min(s, 97))]) * (s // 97) +
              bytes([(seed + k) % 251]) * (s % 97) for k, s in enumerate(sizes)]
    return draw(topics), bodies, props, tag, draw(st.booleans())


@given(big_batches())
@hsettings(12)
def test_big_append_batch_matches_reference(tmp_path_factory, batch):
    """Big batches (writer thread or inline, staged and apart bodies, CRCs set one record
    late) are byte for byte the reference encoding."""
    topic, bodies, props, tag, inline = batch
    path = pathlib.Path(fast_mkdtemp("ql-diffbig-"))
    pred = Predictor()
    with cleanup(path), open_log(path / "s", segment_size_bytes=1 << 20) as log:
        log._write_inline(inline)
        pred_seg = 1 << 20
        first, positions, ts = log.append_batch(topic, bodies, queue_ids=5, queue_offsets=9,
                                                term=2, tags=tag, properties=props)
        for i, body in enumerate(bodies):
            want = qf.encode_record(qf.TYPE_MESSAGE, index=first + i, term=2,
                                    position=int(positions[i]), topic=topic, body=body,
                                    queue_id=5, queue_offset=9 + i, tags=tag,
                                    properties=props, born_timestamp_ms=ts,
                                    store_timestamp_ms=ts)
            pos = pred.end if qf.fits_in_segment(pred.end, len(want), pred_seg) else \
                pred.end - pred.end % pred_seg + pred_seg
            pred.end = pos + len(want)
            assert int(positions[i]) == pos
            assert bytes(log.record_at(pos)) == want
        log.verify()
