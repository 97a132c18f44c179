"""Latency recording for `quorumlog bench`: an HDR histogram (the `hdrhistogram` package) fed in
bulk from a bounded numpy buffer, so a producer thread pays one array store per sample.

hdrhistogram's `record_value` is pure Python (microseconds per call); calling it per message
would cost more than a store append. Samples are kept as nanoseconds in a fixed buffer; when it
fills, they are rounded down to the histogram's own resolution (3 significant digits: the same
bucket the histogram would pick) and recorded once per distinct value with its count.
"""
from __future__ import annotations

import threading

import numpy as np
from hdrh.histogram import HdrHistogram

# One hour in nanoseconds: a longer wait is recorded as this value (and counted in `clamped`).
HIGHEST_NS = 3_600_000_000_000
SIGNIFICANT_DIGITS = 3
# 2 * 10**3 rounded up to a power of two: values below this are exact in the histogram, and
# above it the histogram keeps the top 11 bits (this many sub-buckets per power of two).
_SUB_BUCKET_BITS = 11
BUFFER_SAMPLES = 1 << 16
PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def quantize(ns: np.ndarray) -> np.ndarray:
    """Round each value down to its histogram bucket's lowest value (vectorized)."""
    ns = ns.astype(np.int64, copy=False)
    bits = np.zeros(ns.shape, dtype=np.int64)
    pos = ns > 0
    # bit_length of each value: frexp's exponent is exact for ints < 2**53
    bits[pos] = np.frexp(ns[pos].astype(np.float64))[1]
    shift = np.maximum(bits - _SUB_BUCKET_BITS, 0)
    return (ns >> shift) << shift


class LatencyRecorder:
    """Latencies in nanoseconds of one measured operation (a message or a batch).

    `unit` says what one sample is ("message" or "batch of 1000"): the summary and the JSON
    print it beside the percentiles. Thread-safe: producers of one phase share a recorder."""

    def __init__(self, unit: str):
        self.unit = unit
        self._hist = HdrHistogram(1, HIGHEST_NS, SIGNIFICANT_DIGITS)
        self._buf = np.empty(BUFFER_SAMPLES, dtype=np.int64)
        self._n = 0
        self._lock = threading.Lock()
        self.clamped = 0

    def record(self, ns: int) -> None:
        with self._lock:
            self._buf[self._n] = ns
            self._n += 1
            if self._n == BUFFER_SAMPLES:
                self._drain()

    def record_many(self, ns, counts=None) -> None:
        """Many samples at once; counts[i] (default 1) is how many operations took ns[i]
        (the messages of one acknowledged batch share its latency)."""
        arr = np.asarray(ns, dtype=np.int64)
        cnt = None if counts is None else np.asarray(counts, dtype=np.int64)
        with self._lock:
            self._drain()
            for lo in range(0, len(arr), BUFFER_SAMPLES):
                self._add(arr[lo:lo + BUFFER_SAMPLES],
                          None if cnt is None else cnt[lo:lo + BUFFER_SAMPLES])

    def local(self) -> "LocalRecorder":
        """A recorder for one thread: no lock per sample, merged in bulk."""
        return LocalRecorder(self)

    def _drain(self) -> None:
        if self._n:
            self._add(self._buf[:self._n])
            self._n = 0

    def _add(self, samples: np.ndarray, weights: np.ndarray | None = None) -> None:
        over = samples > HIGHEST_NS
        if over.any():
            self.clamped += int(over.sum() if weights is None else weights[over].sum())
            samples = np.minimum(samples, HIGHEST_NS)
        # the histogram's lowest trackable value is 1 ns: a 0 ns sample (a coarse clock)
        # is recorded as 1 ns
        q = quantize(np.maximum(samples, 1))
        if weights is None:
            values, counts = np.unique(q, return_counts=True)
        else:
            values, inverse = np.unique(q, return_inverse=True)
            counts = np.bincount(inverse, weights=weights).astype(np.int64)
        for v, c in zip(values.tolist(), counts.tolist()):
            self._hist.record_value(v, c)

    @property
    def count(self) -> int:
        with self._lock:
            self._drain()
            return self._hist.get_total_count()

    def summary(self) -> dict:
        """{"unit", "count", "p50_us", "p90_us", "p99_us", "p99_9_us", "max_us", "mean_us"};
        the percentiles are None when nothing was recorded."""
        with self._lock:
            self._drain()
            h = self._hist
            out = {"unit": self.unit, "count": h.get_total_count()}
            empty = out["count"] == 0
            for p in PERCENTILES:
                key = "p" + f"{p:g}".replace(".", "_") + "_us"
                out[key] = None if empty else h.get_value_at_percentile(p) / 1e3
            out["max_us"] = None if empty else h.get_max_value() / 1e3
            out["mean_us"] = None if empty else h.get_mean_value() / 1e3
            return out


class LocalRecorder:
    """One producer's samples: `record` is a list append; every BUFFER_SAMPLES samples (and at
    `flush`) they go into the shared histogram in one locked step. `record_n(ns, n)` records
    n operations that took ns each (kept apart, so plain samples stay one append)."""

    def __init__(self, parent: LatencyRecorder):
        self._parent = parent
        self._samples = []
        self._weighted = ([], [])
        self.record = self._record

    def _record(self, ns: int) -> None:
        s = self._samples
        s.append(ns)
        if len(s) >= BUFFER_SAMPLES:
            self.flush()

    def record_n(self, ns: int, n: int) -> None:
        values, counts = self._weighted
        values.append(ns)
        counts.append(n)
        if len(values) >= BUFFER_SAMPLES:
            self.flush()

    def flush(self) -> None:
        if self._samples:
            self._parent.record_many(self._samples)
            self._samples = []
        values, counts = self._weighted
        if values:
            self._parent.record_many(values, counts)
            self._weighted = ([], [])
