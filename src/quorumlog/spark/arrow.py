"""Arrow record batches (the quorumlog schema) from scan_split's column dicts, built from
offsets and buffers -- no Python object per row except keys and properties."""
from __future__ import annotations

import numpy as np

from .schema import arrow_schema


def _varlen(pa, typ, od, valid=None):
    offsets, data = od
    n = len(offsets) - 1
    vbuf = None
    if valid is not None and not valid.all():
        vbuf = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(typ, n, [vbuf, pa.py_buffer(offsets), pa.py_buffer(data)])


def _lists(pa, spec, typ, pairs):
    n, sparse = spec
    counts = np.zeros(n, np.int32)
    flat = []
    for r in sorted(sparse):
        counts[r] = len(sparse[r])
        flat.extend(sparse[r])
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    if pairs:
        return pa.MapArray.from_arrays(pa.array(offsets), pa.array([k for k, _ in flat], pa.string()),
                                       pa.array([v for _, v in flat], pa.string()), type=typ)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.string()), type=typ)


def to_arrow(cols: dict):
    """A pyarrow.RecordBatch (quorumlog schema) from scan_split's column dict."""
    import pyarrow as pa

    schema = arrow_schema()
    ts = schema.field("store_timestamp").type
    arrays = [
        _varlen(pa, pa.string(), cols["topic"]),
        pa.array(cols["queue_id"], pa.int32()),
        pa.array(cols["queue_offset"], pa.int64()),
        pa.array(cols["raft_index"], pa.int64()),
        pa.array(cols["term"], pa.int64()),
        pa.array(cols["position"], pa.int64()),
        pa.array(cols["born_timestamp"], pa.int64()).cast(ts),
        pa.array(cols["store_timestamp"], pa.int64()).cast(ts),
        _varlen(pa, pa.string(), cols["tags"][0], cols["tags"][1]),
        _lists(pa, cols["keys"], schema.field("keys").type, False),
        _lists(pa, cols["properties"], schema.field("properties").type, True),
        _varlen(pa, pa.binary(), cols["body"]),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
