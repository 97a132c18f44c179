"""Column dicts (numpy arrays, offsets + bytes, sparse lists) of scanned records -- what
scan_split yields and to_arrow turns into an Arrow batch without a Python object per row."""
from __future__ import annotations

import struct

import numpy as np

from ..errors import CorruptLogError

_U16 = struct.Struct("<H")


def concat_slices(region: np.ndarray, starts: np.ndarray, lens: np.ndarray):
    """(offsets int32 [n+1], data uint8) of region[starts[i]:starts[i]+lens[i]] concatenated."""
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return offsets.astype(np.int32), np.zeros(0, np.uint8)
    nz = lens > 0
    s, l, o = starts[nz].astype(np.int64), lens[nz].astype(np.int64), offsets[:-1][nz]
    # Index of every output byte = its slice start + its rank in the slice.
    step = np.ones(total, np.int64)
    step[o[0]] = s[0]
    if len(s) > 1:
        step[o[1:]] = s[1:] - (s[:-1] + l[:-1] - 1)
    return offsets.astype(np.int32), region[np.cumsum(step)]


def decode_lists(seg, offs, lens, *, pairs, path, rec_off):
    """keys (lists of str) or properties (lists of (k, v)) as (n, {row: items}) -- only the
    records that have any are decoded (in Python); to_arrow builds the offsets in numpy."""
    out = {}
    for r in np.flatnonzero(lens):
        p, end = int(offs[r]), int(offs[r] + lens[r])
        items = []
        while p < end:
            if p + 2 > end:
                raise CorruptLogError("malformed keys/properties field", path, int(rec_off[r]))
            (k,) = _U16.unpack_from(seg, p)
            if p + 2 + k > end:
                raise CorruptLogError("malformed keys/properties field", path, int(rec_off[r]))
            items.append(bytes(seg[p + 2:p + 2 + k]).decode("utf-8"))
            p += 2 + k
        if pairs:
            if len(items) % 2:
                raise CorruptLogError("properties field with a key but no value", path,
                                      int(rec_off[r]))
            out[int(r)] = list(zip(items[0::2], items[1::2]))
        else:
            out[int(r)] = items
    return len(lens), out


def columns_from_headers(seg, h, off, *, path, rec_off) -> dict:
    """The column dict of the records whose headers are h (header_dtype rows) starting at
    seg[off]: fixed fields straight from the headers, variable parts gathered by offsets."""
    toff = off + h.dtype.itemsize
    tlen = h["topic_len"].astype(np.int64)
    glen = h["tags_len"].astype(np.int64)
    klen = h["keys_len"].astype(np.int64)
    plen = h["props_len"].astype(np.int64)
    blen = h["body_len"].astype(np.int64)
    koff = toff + tlen + glen
    poff = koff + klen
    boff = poff + plen
    return {
        "topic": concat_slices(seg, toff, tlen),
        "queue_id": h["queue_id"].astype(np.int32),
        "queue_offset": h["queue_offset"].astype(np.int64),
        "raft_index": h["raft_index"].astype(np.int64),
        "term": h["raft_term"].astype(np.int64),
        "position": h["position"].astype(np.int64),
        "born_timestamp": h["born_timestamp_ms"] * 1000,
        "store_timestamp": h["store_timestamp_ms"] * 1000,
        "tags": (concat_slices(seg, toff + tlen, glen), glen > 0),
        "keys": decode_lists(seg, koff, klen, pairs=False, path=path, rec_off=rec_off),
        "properties": decode_lists(seg, poff, plen, pairs=True, path=path, rec_off=rec_off),
        "body": concat_slices(seg, boff, blen),
    }


def columns_from_records(rows) -> dict:
    """The column dict of decoded Records (quorumlog.format.Record)."""
    def cat(bs):
        lens = np.array([len(b) for b in bs], np.int64)
        offs = np.zeros(len(bs) + 1, np.int64)
        np.cumsum(lens, out=offs[1:])
        return offs.astype(np.int32), np.frombuffer(b"".join(bs), np.uint8)
    return {
        "topic": cat([r.topic.encode() for r in rows]),
        "queue_id": np.array([r.queue_id for r in rows], np.int32),
        "queue_offset": np.array([r.queue_offset for r in rows], np.int64),
        "raft_index": np.array([r.index for r in rows], np.int64),
        "term": np.array([r.term for r in rows], np.int64),
        "position": np.array([r.position for r in rows], np.int64),
        "born_timestamp": np.array([r.born_timestamp_ms for r in rows], np.int64) * 1000,
        "store_timestamp": np.array([r.store_timestamp_ms for r in rows], np.int64) * 1000,
        "tags": (cat([(r.tags or "").encode() for r in rows]),
                 np.array([bool(r.tags) for r in rows])),
        "keys": (len(rows), {i: list(r.keys) for i, r in enumerate(rows) if r.keys}),
        "properties": (len(rows), {i: list(r.properties.items()) for i, r in enumerate(rows)
                                   if r.properties}),
        "body": cat([bytes(r.body) for r in rows]),
    }
