"""The numpy scan of one split (QuorumlogRecordReader on the JVM): record positions from the
raft index, headers gathered and validated as arrays, CRC32C per record, MESSAGE records
yielded as column dicts in bounded batches."""
from __future__ import annotations

import logging
import os
from typing import Iterator, Sequence

import numpy as np

from .. import format as fmt
from ..errors import CorruptLogError
from .columns import columns_from_headers, columns_from_records
from .crc import crc_records
from .filters import RowFilter
from .raft_index import RaftIndex
from .splits import Split
from .store_meta import numbered

log = logging.getLogger(__name__)

BATCH_MAX_RECORDS = 65536
BATCH_MAX_BYTES = 8 << 20


class _Bad(Exception):
    """Record args[0] (an index into the split's positions) failed validation: args[1]."""


def scan_split(split: Split, *, topics: Sequence[str] | None = None, on_corrupt: str = "fail",
               stats: dict | None = None, row_filter: RowFilter | None = None
               ) -> Iterator[dict]:
    """Yields column dicts (numpy arrays / lists) of the split's MESSAGE records in batches:
    those of `topics` (None: all) that pass row_filter, dropped before any column is built.

    Record positions come from the raft index; every record's header is validated against
    its index entry and against format.md, records are checked to be contiguous, and every
    CRC32C is computed. Bad records before the committed position raise CorruptLogError
    (path, offset) or are skipped and counted (on_corrupt="skip"); at or after it they end
    the segment (torn tail)."""
    stats = stats if stats is not None else {}
    stats.setdefault("skipped", 0)
    rows = (row_filter or RowFilter()).with_topics(topics)
    lo = split.base + split.start
    hi = min(split.base + split.end, split.limit)
    seg_end = split.base + os.path.getsize(split.segment)
    if hi <= lo:
        return
    if split.index_file_entries <= 0 or not numbered(os.path.join(split.root, "index")):
        yield from _scan_walk(split, rows)
        return
    positions, sizes, first_index, b = RaftIndex(split.root, split.index_file_entries
                                                 ).entries(lo, hi)
    if b == 0:
        return
    # Read the split's records (plus the next header, for the BLANK check) in one go: at most
    # split_bytes + one record; no mmap, so nothing pins the file after an error.
    rbase = int(positions[0])
    rend = min(seg_end, int(positions[b - 1]) + int(sizes[b - 1]) + fmt.HEADER_SIZE)
    with open(split.segment, "rb") as f:
        f.seek(rbase - split.base)
        seg = np.frombuffer(f.read(max(0, rend - rbase)), np.uint8)
    scan = _SplitScan(split, seg, rbase, positions, sizes, first_index, seg_end, rows)
    i = 0
    while i < b:
        # One batch: consecutive records, bounded in count and bytes.
        j = min(b, i + BATCH_MAX_RECORDS)
        cum = np.cumsum(sizes[i:j].astype(np.int64))
        j = i + max(1, int(np.searchsorted(cum, BATCH_MAX_BYTES, side="right")))
        try:
            batch = scan.batch(i, j)
            i = j
            if batch is not None:
                yield batch
        except _Bad as e:
            bad_i, reason = e.args
            # Records before the bad one in this batch are good: return them first.
            if bad_i > i:
                batch = scan.batch(i, bad_i)
                if batch is not None:
                    yield batch
            if not _bad_record(split, int(positions[bad_i]), reason, on_corrupt, stats):
                return
            i = bad_i + 1
    _check_tail_blank(split, seg, rbase, positions, sizes, b, hi, seg_end, on_corrupt, stats)


def _bad_record(split, bad_pos, reason, on_corrupt, stats) -> bool:
    """A record failed validation: False when it ends the split (torn tail past the
    committed position), True when it was skipped (on_corrupt="skip"); raises otherwise."""
    off = bad_pos - split.base
    if bad_pos >= split.committed:
        log.info("quorumlog: %s offset %d (%s) is past the committed position: torn tail",
                 split.segment, off, reason)
        return False
    if on_corrupt != "skip":
        raise CorruptLogError(f"quorumlog: corrupt data in {split.segment} at offset {off}: "
                              f"{reason}", split.segment, off)
    stats["skipped"] += 1
    log.warning("quorumlog: skipping corrupt record in %s at offset %d: %s",
                split.segment, off, reason)
    return True


def _check_tail_blank(split, seg, rbase, positions, sizes, b, hi, seg_end, on_corrupt, stats):
    """The BLANK after the segment's last record (if this split owns it) is CRC-checked too."""
    if b == 0:
        return
    end = int(positions[b - 1]) + int(sizes[b - 1])
    if not (split.base + split.start <= end < hi and end < seg_end):
        return
    if b < len(positions) and int(positions[b]) == end:
        return  # a record follows (it belongs to the next split)
    off = end - split.base
    roff = end - rbase
    if seg_end - end < fmt.HEADER_SIZE or len(seg) < roff + fmt.HEADER_SIZE \
            or not seg[roff:roff + fmt.HEADER_SIZE].any():
        return
    raw = seg[roff:roff + fmt.HEADER_SIZE]
    h = raw.view(fmt.header_dtype())[0]
    why = None
    if h["magic"] != fmt.MAGIC or h["version"] != fmt.FORMAT_VERSION:
        why = "bad magic/version"
    elif h["type"] != fmt.TYPE_BLANK:
        why = "unindexed record after the last indexed one"
    elif int(h["total_size"]) != seg_end - end or int(h["position"]) != end:
        why = "BLANK does not fill the segment tail"
    elif fmt.crc32c(raw[4:].tobytes()) != int(h["crc"]):  # a BLANK's CRC covers its header
        why = "CRC32C mismatch"
    if why is None or end >= split.committed:
        return
    if on_corrupt != "skip":
        raise CorruptLogError(f"quorumlog: corrupt data in {split.segment} at offset {off}: "
                              f"{why}", split.segment, off)
    stats["skipped"] += 1


class _SplitScan:
    """The records of one split, read into `seg` (log position rbase = seg[0]), checked and
    turned into column dicts a batch [i, j) of raft-index entries at a time."""

    def __init__(self, split, seg, rbase, positions, sizes, first_index, seg_end, rows):
        self.split, self.seg, self.rbase = split, seg, rbase
        self.positions, self.sizes, self.first_index = positions, sizes, first_index
        self.seg_end, self.rows = seg_end, rows

    def batch(self, i: int, j: int) -> dict | None:
        """Column dict of the MESSAGE records among entries [i, j) (None if there are none);
        _Bad names the first record that fails a check."""
        seg = self.seg
        pos = self.positions[i:j].astype(np.int64)
        size = self.sizes[i:j].astype(np.int64)
        off = pos - self.rbase
        h = self._headers(i, j, pos, size, off)
        sel = np.flatnonzero(self.rows.mask(seg, h, off))
        if len(sel) == 0:
            return None
        return columns_from_headers(seg, h[sel], off[sel], path=self.split.segment,
                                    rec_off=off[sel] + (self.rbase - self.split.base))

    def _headers(self, i, j, pos, size, off) -> np.ndarray:
        """The headers of entries [i, j), each checked against its index entry, format.md,
        its neighbour (contiguity) and its CRC32C."""
        seg, n = self.seg, j - i
        if int(pos[0]) < self.split.base or int(pos[-1] + size[-1]) > self.seg_end:
            raise _Bad(i if int(pos[0]) < self.split.base else j - 1,
                       "raft index points outside the segment")
        if int(off[-1] + size[-1]) > len(seg):
            raise _Bad(j - 1, "record runs past the end of the file")
        hdr_idx = off[:, None] + np.arange(fmt.HEADER_SIZE)[None, :]
        h = seg[hdr_idx].view(fmt.header_dtype()).reshape(n)
        raft = np.arange(i, j, dtype=np.int64) + self.first_index
        var = (h["topic_len"].astype(np.int64) + h["tags_len"] + h["keys_len"].astype(np.int64)
               + h["props_len"] + h["body_len"])
        ok = ((h["magic"] == fmt.MAGIC) & (h["version"] == fmt.FORMAT_VERSION)
              & (h["type"] >= fmt.TYPE_MESSAGE) & (h["type"] < fmt.TYPE_BLANK)
              & (h["total_size"].astype(np.int64) == size)
              & (h["position"].astype(np.int64) == pos)
              & (h["raft_index"].astype(np.int64) == raft) & (var + fmt.HEADER_SIZE == size)
              & ((h["type"] != fmt.TYPE_MESSAGE) | (h["topic_len"] > 0)))
        if n > 1:  # contiguous: no bytes between records that nobody accounted for
            ok[1:] &= pos[1:] == pos[:-1] + size[:-1]
        crc = crc_records(seg, off + 4, np.where(ok, size - 4, 4))
        ok &= crc == h["crc"]
        if not ok.all():
            k = int(np.argmin(ok))
            raise _Bad(i + k, _reason(h[k], int(pos[k]), int(size[k]), int(raft[k]),
                                      bool(crc[k] == h["crc"][k])))
        return h


def _reason(h, pos, size, raft, crc_ok) -> str:
    if h["magic"] != fmt.MAGIC:
        return "bad magic"
    if h["version"] != fmt.FORMAT_VERSION:
        return f"unknown version {h['version']}"
    if not fmt.TYPE_MESSAGE <= h["type"] < fmt.TYPE_BLANK:
        return f"invalid record type {h['type']}"
    if int(h["position"]) != pos:
        return f"position field {int(h['position'])} != {pos}"
    if int(h["total_size"]) != size:
        return f"total_size {int(h['total_size'])} != raft index size {size}"
    if int(h["raft_index"]) != raft:
        return f"raft index {int(h['raft_index'])} != {raft}"
    if not crc_ok:
        return "CRC32C mismatch"
    return "field lengths do not add up / record not contiguous with the previous one"


def _scan_walk(split, rows: RowFilter):
    """No raft index: a split covers a whole segment; walk it record by record (reference
    decoder), slower but exact."""
    with open(split.segment, "rb") as f:
        data = f.read()
    pos = split.base
    end = min(split.base + len(data), split.limit)
    out = []
    while pos < end and split.base + len(data) - pos >= fmt.HEADER_SIZE:
        off = pos - split.base
        if not any(data[off:off + fmt.HEADER_SIZE]):
            if pos < split.committed:
                raise CorruptLogError(f"quorumlog: corrupt data in {split.segment} at offset "
                                      f"{off}: unwritten bytes before the committed position",
                                      split.segment, off)
            break
        try:
            rec = fmt.decode_record(data, off, expected_position=pos, path=split.segment)
        except CorruptLogError:
            if pos >= split.committed:
                break
            raise
        if rec.type == fmt.TYPE_BLANK:
            break
        pos += rec.size
        if rec.type == fmt.TYPE_MESSAGE and rows.accepts(rec):
            out.append(rec)
    if out:
        yield columns_from_records(out)
