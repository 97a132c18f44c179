"""Which MESSAGE records a read returns, decided on header fields before any row is built:
topics, queue ids (a set and/or a range) and a store-timestamp range. Built from read_store's
topics and from the filters Spark pushes down (RecordFilter.java on the JVM)."""
from __future__ import annotations

import dataclasses
import datetime
from typing import Iterable

import numpy as np

from .. import format as fmt

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_US = datetime.timedelta(microseconds=1)


@dataclasses.dataclass(frozen=True)
class RowFilter:
    """The AND of everything pushed. None / the full range = no condition on that field."""
    topics: frozenset[bytes] | None = None       # UTF-8 topic names
    queue_ids: frozenset[int] | None = None
    queue_min: int = I64_MIN
    queue_max: int = I64_MAX
    store_ts_min_ms: int = I64_MIN               # inclusive, milliseconds (the header's unit)
    store_ts_max_ms: int = I64_MAX

    def with_topics(self, topics: Iterable[str] | None) -> RowFilter:
        """This filter AND topic in topics (None: no condition)."""
        if topics is None:
            return self
        ts = frozenset(t.encode("utf-8") for t in topics)
        return dataclasses.replace(self, topics=ts if self.topics is None else self.topics & ts)

    def narrowed(self, pushed: Iterable) -> RowFilter:
        """This filter AND every Spark filter in pushed (each one `pushable`)."""
        f = self
        for p in pushed:
            f = _and(f, p)
        return f

    def accepts(self, rec) -> bool:
        """Does one decoded MESSAGE record (quorumlog.format.Record) pass?"""
        return ((self.topics is None or rec.topic.encode("utf-8") in self.topics)
                and (self.queue_ids is None or rec.queue_id in self.queue_ids)
                and self.queue_min <= rec.queue_id <= self.queue_max
                and self.store_ts_min_ms <= rec.store_timestamp_ms <= self.store_ts_max_ms)

    @property
    def has_store_ts(self) -> bool:
        return self.store_ts_min_ms > I64_MIN or self.store_ts_max_ms < I64_MAX

    def may_hold_store_ts(self, lo_ms: int, hi_ms: int) -> bool:
        """Can a record with a store timestamp in [lo_ms, hi_ms] pass?"""
        return lo_ms <= self.store_ts_max_ms and hi_ms >= self.store_ts_min_ms

    def mask(self, seg: np.ndarray, h: np.ndarray, off: np.ndarray) -> np.ndarray:
        """Which of the records whose headers are h (at seg[off]) pass: header fields first,
        then (for the records left) only the topic bytes."""
        keep = h["type"] == fmt.TYPE_MESSAGE
        if self.queue_ids is not None:
            keep &= np.isin(h["queue_id"], np.fromiter(self.queue_ids, np.int64))
        if self.queue_min > I64_MIN or self.queue_max < I64_MAX:
            q = h["queue_id"].astype(np.int64)
            keep &= (q >= self.queue_min) & (q <= self.queue_max)
        if self.has_store_ts:
            ts = h["store_timestamp_ms"]
            keep &= (ts >= self.store_ts_min_ms) & (ts <= self.store_ts_max_ms)
        if self.topics is not None:
            keep &= _topic_mask(seg, h, off, keep, self.topics)
        return keep


def _topic_mask(seg, h, off, keep, topics) -> np.ndarray:
    """Which records' topic bytes equal one of topics (only those bytes are read)."""
    toff = off + fmt.HEADER_SIZE
    tlen = h["topic_len"].astype(np.int64)
    want = np.zeros(len(h), bool)
    for t in topics:
        m = keep & (tlen == len(t))
        if m.any():
            cand = np.flatnonzero(m)
            got = seg[toff[cand][:, None] + np.arange(len(t))[None, :]]
            want[cand[(got == np.frombuffer(t, np.uint8)[None, :]).all(axis=1)]] = True
    return want


def row_filter(topics: Iterable[str] | None = None, pushed: Iterable = ()) -> RowFilter:
    """The RowFilter of read_store's topics AND the Spark filters in pushed (those
    `pushable` accepted)."""
    return RowFilter().with_topics(topics).narrowed(pushed)


def pushable(flt) -> bool:
    """Whether a pyspark.sql.datasource filter narrows a RowFilter (a column we index on,
    compared with a constant)."""
    try:
        _and(RowFilter(), flt)
        return True
    except _NotPushable:
        return False


class _NotPushable(Exception):
    pass


def _and(f: RowFilter, flt) -> RowFilter:
    """f narrowed by one Spark filter (raises _NotPushable for any other kind)."""
    kind = type(flt).__name__
    col = getattr(flt, "attribute", ("",))
    col = col[0] if len(col) == 1 else ""
    values = tuple(flt.value) if kind == "In" else (getattr(flt, "value", None),)
    if col == "topic" and kind in ("EqualTo", "EqualNullSafe", "In") \
            and all(isinstance(v, str) for v in values):
        return f.with_topics(values)
    if col == "queue_id" and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        if kind in ("EqualTo", "EqualNullSafe", "In"):
            qs = frozenset(values)
            return dataclasses.replace(f, queue_ids=qs if f.queue_ids is None
                                       else f.queue_ids & qs)
        lo, hi = _int_bounds(kind, values[0])
        return dataclasses.replace(f, queue_min=max(f.queue_min, lo), queue_max=min(f.queue_max, hi))
    if col == "store_timestamp" and kind != "In" and isinstance(values[0], datetime.datetime) \
            and values[0].tzinfo is not None:
        lo, hi = _ms_bounds(kind, (values[0] - _EPOCH) // _US)
        return dataclasses.replace(f, store_ts_min_ms=max(f.store_ts_min_ms, lo),
                                   store_ts_max_ms=min(f.store_ts_max_ms, hi))
    raise _NotPushable(kind)


def _int_bounds(kind, v) -> tuple[int, int]:
    """[lo, hi] of the ints x with `x <kind> v`."""
    bounds = {"GreaterThan": (v + 1, I64_MAX), "GreaterThanOrEqual": (v, I64_MAX),
              "LessThan": (I64_MIN, v - 1), "LessThanOrEqual": (I64_MIN, v)}
    if kind not in bounds:
        raise _NotPushable(kind)
    return bounds[kind]


def _ms_bounds(kind, us: int) -> tuple[int, int]:
    """[lo, hi] of the store timestamps m (ms) with `m * 1000 <kind> us` (the column is in
    microseconds, the header in milliseconds): exact, never excluding a matching record."""
    floor_ms, ceil_ms = us // 1000, -(-us // 1000)
    bounds = {"EqualTo": (ceil_ms, floor_ms), "EqualNullSafe": (ceil_ms, floor_ms),
              "GreaterThan": (floor_ms + 1, I64_MAX), "GreaterThanOrEqual": (ceil_ms, I64_MAX),
              "LessThan": (I64_MIN, ceil_ms - 1), "LessThanOrEqual": (I64_MIN, floor_ms)}
    if kind not in bounds:
        raise _NotPushable(kind)
    return bounds[kind]
