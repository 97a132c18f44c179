"""Message bodies of `quorumlog bench` and the integrity check that reads them back.

Body of sequence number s (0, 1, 2, ... across all producers of a phase):
    8 bytes  s, little-endian
    size - 8 bytes  ROWS[s % R], one of R rows of seeded random bytes
R divides the batch size, so a producer's batch buffer keeps its random rows in place and only
the 8-byte stamps change from one batch to the next (one numpy store per batch, no Python work
per message on the measured path). Random rather than repeated bytes: a reader that compresses
or dictionary-encodes (Parquet) must not get an unfair advantage.

The check compares what was read back with what was acknowledged: the count, an
order-independent checksum (sum of CRC32C of each body, mod 2**64), and per message: the stamp
is one that was acknowledged, it is seen once, and the rest of the body is the right row.
"""
from __future__ import annotations

import struct

import numpy as np

from ..commitlog import crc32c
from .options import MIN_SIZE_BYTES

# Random rows kept per producer: at most this many, and at most ROW_BUDGET_BYTES of them.
MAX_ROWS = 256
ROW_BUDGET_BYTES = 16 << 20
STAMP = struct.Struct("<Q")
_MASK64 = (1 << 64) - 1
# How many missing / wrong sequence numbers the report lists by number.
LIST_LIMIT = 10


def rows_for(size: int, batch: int) -> int:
    """R: the largest divisor of `batch` that keeps R rows of `size` bytes within budget."""
    limit = max(1, min(MAX_ROWS, ROW_BUDGET_BYTES // size))
    return max(d for d in range(1, min(batch, limit) + 1) if batch % d == 0)


class Payload:
    """The bodies of one phase: `size` bytes each, rows seeded by `seed`."""

    def __init__(self, size: int, batch: int, seed: int):
        if size < MIN_SIZE_BYTES:
            raise ValueError(f"body size {size} < {MIN_SIZE_BYTES} (the sequence stamp)")
        self.size = size
        self.batch = batch
        self.rows = rows_for(size, batch)
        rng = np.random.default_rng(seed)
        self.row_bytes = rng.integers(0, 256, size=(self.rows, size - 8), dtype=np.uint8)
        self._row_list = [r.tobytes() for r in self.row_bytes]
        self.row_crc = [crc32c(r) for r in self._row_list]

    def body(self, seq: int) -> bytes:
        return STAMP.pack(seq) + self._row_list[seq % self.rows]

    def crc_of(self, seq: int) -> int:
        return crc32c(self._row_list[seq % self.rows], crc32c(STAMP.pack(seq)))

    def buffer(self) -> "BatchBuffer":
        return BatchBuffer(self)


class BatchBuffer:
    """One producer's reusable batch: `fill(s0, n)` stamps sequence numbers s0..s0+n-1 and
    returns n memoryviews of the bodies. The engine copies bodies during the call, so the
    buffer is rewritten for the next batch only after the previous call returned."""

    def __init__(self, payload: Payload):
        size, batch, rows = payload.size, payload.batch, payload.rows
        self._arr = np.empty((batch, size), dtype=np.uint8)
        self._arr[:, 8:] = np.tile(payload.row_bytes, (batch // rows, 1))
        # the stamp column as one uint64 per row (a strided view into the same memory)
        self._stamps = self._arr[:, :8].view("<u8")[:, 0]
        flat = memoryview(self._arr.reshape(-1))
        self.views = [flat[i * size:(i + 1) * size] for i in range(batch)]
        self._flat = flat
        self._first = self.views[:1]

    def fill(self, s0: int, n: int) -> list:
        if n == 1:
            STAMP.pack_into(self._flat, 0, s0)
            return self._first
        self._stamps[:n] = np.arange(s0, s0 + n, dtype=np.uint64)
        return self.views[:n]


class Verifier:
    """Checks read-back bodies against the acknowledged sequence numbers of a phase."""

    def __init__(self, payload: Payload, acked_ranges):
        """acked_ranges: (first_seq, n) of every acknowledged batch."""
        self.payload = payload
        top = max((s + n for s, n in acked_ranges), default=0)
        self._expected = np.zeros(top, dtype=bool)
        for s, n in acked_ranges:
            self._expected[s:s + n] = True
        self._seen = np.zeros(top, dtype=bool)
        self.expected_count = int(self._expected.sum())
        self.retained_away = 0          # acknowledged, then deleted by retention
        self.read_count = 0
        self.duplicates = 0
        self.unknown = 0          # a stamp that was never acknowledged (or a bad length)
        self.wrong_body = []      # sequence numbers whose payload bytes differ
        self._checksum = 0

    def feed(self, body) -> None:
        """One read-back body (bytes-like)."""
        self.read_count += 1
        p = self.payload
        if len(body) != p.size:
            self.unknown += 1
            return
        seq = STAMP.unpack_from(body)[0]
        crc = crc32c(body)
        self._checksum = (self._checksum + crc) & _MASK64
        if seq >= len(self._expected) or not self._expected[seq]:
            self.unknown += 1
            return
        if self._seen[seq]:
            self.duplicates += 1
            return
        self._seen[seq] = True
        if crc32c(memoryview(body)[8:]) != p.row_crc[seq % p.rows]:
            self.wrong_body.append(seq)

    def retire(self, seqs) -> None:
        """Acknowledged messages retention deleted before the read-back (sequence numbers):
        no longer read back (nor in checksum_acknowledged), counted apart; `acknowledged`
        still counts them."""
        seqs = np.asarray(seqs, dtype=np.int64)
        seqs = seqs[self._expected[seqs]]
        self._expected[seqs] = False
        self.retained_away += len(seqs)

    def expected_checksum(self) -> int:
        total = 0
        crc_of = self.payload.crc_of
        for seq in np.flatnonzero(self._expected).tolist():
            total += crc_of(seq)
        return total & _MASK64

    def result(self) -> dict:
        """The integrity part of a result (see docs/benchmarks.md for the JSON schema)."""
        missing = np.flatnonzero(self._expected & ~self._seen)
        expected_sum = self.expected_checksum()
        out = {
            "method": "per message: stamp acknowledged and seen once, body bytes by CRC32C; "
                      "count; sum of CRC32C of the bodies",
            "acknowledged": self.expected_count,
            "read_back": self.read_count,
            "missing": int(len(missing)),
            "missing_first": [int(s) for s in missing[:LIST_LIMIT]],
            "duplicates": self.duplicates,
            "unknown": self.unknown,
            "wrong_body": len(self.wrong_body),
            "wrong_body_first": self.wrong_body[:LIST_LIMIT],
            "checksum_acknowledged": f"{expected_sum:016x}",
            "checksum_read_back": f"{self._checksum:016x}",
            "retained_away": self.retained_away,
        }
        out["ok"] = (out["missing"] == 0 and self.duplicates == 0 and self.unknown == 0
                     and not self.wrong_body
                     and self.read_count == self.expected_count - self.retained_away
                     and expected_sum == self._checksum)
        return out
