"""The producer table's previous reading of a window (numpy over a scan of the records, the
first 96 property bytes of each gathered into rows): the reference the differential test
holds quorumlog.commitlog.producer_tags and NativeRaftLog.producers to."""
import numpy as np
from numpy.lib.stride_tricks import as_strided

from quorumlog.commitlog import MESSAGE
from quorumlog.store.nativelog import _window_runs, producer_tag

_FAST_KEYS = tuple(np.frombuffer(k, np.uint8) for k in (
    b"\x06\x00QL_PID", b"\x06\x00QL_SEQ", b"\x04\x00QL_N", b"\x04\x00QL_I"))


_PREFIX = 96          # bytes of a record's properties that hold the four reserved ones


def _prefixes(cl, view, base: int):
    """(index, position, props_len, prefix) of the MESSAGE records among the whole records
    `view` (log position `base` on); prefix: the first _PREFIX bytes of each record's
    properties field (what follows them where it is shorter), one row per record."""
    info, _ = cl.scan(base, base + len(view), 1 << 20)
    msg = info[(info["type"] == MESSAGE)]
    buf = np.frombuffer(view, np.uint8)
    rel = msg["position"].astype(np.int64) - base
    plen = np.zeros(len(rel), np.int64)
    for k in range(4):
        plen |= buf[rel + 84 + k].astype(np.int64) << (8 * k)
    start = rel + msg["body_offset"].astype(np.int64) - plen   # the properties end at the body
    return msg["index"].astype(np.int64), msg["position"], plen, _rows(buf, start)


def _rows(buf, start):
    """buf[start[i]:start[i] + _PREFIX] for each i, one row each; bytes past buf's end are
    its last byte. Whole rows are copied from a strided view of buf (a new leader reads its
    producer table this way: an element-wise gather of every byte was most of the time of a
    65,536-entry rebuild -- 0.1-0.3 s on a loaded machine, against 0.03 for the rows)."""
    out = np.empty((len(start), _PREFIX), np.uint8)
    limit = len(buf) - _PREFIX
    whole = (start >= 0) & (start <= limit)
    if limit >= 0 and whole.any():
        step = buf.strides[0]
        win = as_strided(buf, shape=(limit + 1, _PREFIX), strides=(step, step),
                         writeable=False)
        out[whole] = win[start[whole]]
    rest = ~whole
    if rest.any():          # (near the end of buf, or a record whose lengths disagree)
        out[rest] = buf[np.minimum(start[rest][:, None] + np.arange(_PREFIX), len(buf) - 1)]
    return out


def _tags(cl, index, positions, plen, pre):
    """(index, pid, seq, count, ordinal, legacy) arrays of the producer records among those
    _prefixes gave; legacy: no QL_N/QL_I (count and ordinal 0 then). The records
    producer_properties wrote start their properties with the four reserved ones in order:
    those are read with vector operations over every record at once; any other record
    with properties goes through producer_tag."""
    rows = np.arange(len(index))
    end = np.minimum(plen, _PREFIX)
    ok = plen >= 8
    o = np.zeros(len(index), np.int64)
    vals = []
    for key in _FAST_KEYS:
        klen = len(key)
        ok &= o + klen + 2 <= end
        at = np.where(ok, o, 0)
        ok &= (pre[rows[:, None], at[:, None] + np.arange(klen)] == key).all(axis=1)
        at = np.where(ok, at + klen, 0)
        vlen = pre[rows, at].astype(np.int64) | pre[rows, at + 1].astype(np.int64) << 8
        ok &= (vlen >= 1) & (vlen <= 19) & (at + 2 + vlen <= end)
        vlen = np.where(ok, vlen, 1)
        val = np.zeros(len(index), np.uint64)          # (19 decimal digits fit)
        for j in range(int(vlen.max()) if len(index) else 0):
            m = ok & (j < vlen)
            d = pre[rows, np.where(m, at + 2 + j, 0)].astype(np.int64) - 48
            ok &= ~m | ((d >= 0) & (d <= 9))
            val = np.where(m, val * np.uint64(10) + d.clip(0, 9).astype(np.uint64), val)
        vals.append(val)
        o = at + 2 + vlen
    keep = ok.copy()
    legacy = np.zeros(len(index), bool)
    for k in np.flatnonzero(~ok & (plen > 0)).tolist():     # other layouts: one by one
        tag = producer_tag(cl.record_at(int(positions[k])))
        if tag is None:
            continue
        keep[k] = True
        legacy[k] = tag[2] is None
        for a, v in zip(vals, tag):
            a[k] = 0 if v is None else v
    return (index[keep], *(v[keep] for v in vals), legacy[keep])


def _numpy_tags(cl, view, base: int, count: int):
    return _tags(cl, *_prefixes(cl, view, base))


def producers_numpy(log, lo: int, hi: int) -> list:
    """NativeRaftLog.producers as it read the window before producer_tags."""
    return _window_runs(log, lo, hi, _numpy_tags)
