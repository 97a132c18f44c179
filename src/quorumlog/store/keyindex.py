"""The message-key index (RocketMQ's IndexFile): "where is the message with key order-42 of
topic orders?" without scanning the log.

Files `<dir>/keyindex/<20-digit log position of the first record the file indexes>`, each
preallocated (posix_fallocate, like every mapped file here) and mapped:

    header (64 bytes)  magic "QLKI" u32, version u16 (1), flags u16 (bit 0: closed cleanly),
                       slots u32, capacity u32, count u32, reserved u32,
                       begin_position i64, end_position i64 (every keyed MESSAGE record in
                       [begin, end) is indexed), 20 zero bytes, CRC32C of bytes [0, 60) u32
    slots              `slots` × u32: entry number + 1 of the newest entry of the bucket (0: none)
    entries            `capacity` × 24 bytes: key hash i64, log position i64, previous entry
                       of the bucket (number + 1, 0: none) u32, 4 zero bytes

The hash is FNV-1a 64 of `topic + "\\0" + key`; the bucket is hash mod slots. A lookup walks
the bucket's chain newest first in each file, newest file first, and confirms every hit by
reading the record (its topic and keys), so a hash collision never returns a wrong message.

Derived data, built behind dispatch (committed records only) by `catch_up`, on the store's
timer and before each lookup, never on the put path. The header (count, end_position) is
written after the entries it covers were msync'd, at each consume-queue checkpoint; after an
unclean close the last file's buckets are recomputed from its first `count` entries and the
log is indexed again from its end_position. A damaged file is rebuilt from the log (from its
begin position). Files whose records retention deleted are deleted with them.
"""
from __future__ import annotations

import logging
import mmap
import os
import shutil
import struct

import numpy as np

from .. import _consumequeue as _cq
from ..errors import DiskFullError
from ..format import TYPE_MESSAGE, segment_name

log = logging.getLogger(__name__)

KEYINDEX_DIR = "keyindex"
_MAGIC = 0x494B4C51        # bytes "QLKI"
_HEAD = struct.Struct("<IHHIIIIqq20x")   # the 60 bytes the CRC covers
HEADER_BYTES = 64
ENTRY = np.dtype([("hash", "<i8"), ("position", "<i8"), ("prev", "<u4"), ("pad", "<u4")])
FLAG_CLEAN = 1
MAX_CHAIN_VISITS = 1 << 20     # a lookup reads at most this many entries (collision bound)


def key_hash(topic: bytes, key: bytes) -> int:
    return _cq.fnv1a64(topic + b"\0" + key)


class KeyIndexFile:
    def __init__(self, path: str, slots: int, capacity: int, begin: int, *, create: bool,
                 read_only: bool):
        self.path = path
        nbytes = HEADER_BYTES + slots * 4 + capacity * ENTRY.itemsize
        self.mm = _map(path, nbytes, create, read_only)
        fresh = create and not any(self.mm[:HEADER_BYTES])
        self.read_only = read_only
        if fresh:
            self.slots_n, self.capacity, self.count = slots, capacity, 0
            self.begin = self.end = begin
            self.flags = 0
        else:
            self._read_header()
        self.slot_arr = np.frombuffer(self.mm, dtype="<u4", count=self.slots_n,
                                      offset=HEADER_BYTES)
        self.entries = np.frombuffer(self.mm, dtype=ENTRY, count=self.capacity,
                                     offset=HEADER_BYTES + self.slots_n * 4)

    def _read_header(self) -> None:
        from ..commitlog import crc32c
        raw = bytes(self.mm[:HEADER_BYTES])
        (magic, version, flags, slots, cap, count, _r, begin, end) = _HEAD.unpack_from(raw, 0)
        (crc,) = struct.unpack_from("<I", raw, 60)
        expect = HEADER_BYTES + slots * 4 + cap * ENTRY.itemsize
        if (magic != _MAGIC or version != 1 or crc != crc32c(raw[:60]) or count > cap
                or expect != len(self.mm) or end < begin):
            raise ValueError(f"{self.path}: damaged key-index header")
        self.flags, self.slots_n, self.capacity, self.count = flags, slots, cap, count
        self.begin, self.end = begin, end

    def write_header(self, clean: bool) -> None:
        from ..commitlog import crc32c
        if self.read_only:
            return
        self.flags = FLAG_CLEAN if clean else 0
        body = _HEAD.pack(_MAGIC, 1, self.flags, self.slots_n, self.capacity, self.count, 0,
                          self.begin, self.end)[:60]
        self.mm[:HEADER_BYTES] = body + struct.pack("<I", crc32c(body))

    def recompute_slots(self) -> None:
        """After an unclean close: buckets from the first `count` entries only (entries past
        it may be torn); later entries are zeroed."""
        n = self.count
        slots = np.zeros(self.slots_n, dtype="<u4")
        if n:
            h = self.entries["hash"][:n].view("<u8") % np.uint64(self.slots_n)
            np.maximum.at(slots, h.astype(np.int64), np.arange(1, n + 1, dtype="<u4"))
        self.slot_arr[:] = slots
        self.entries[n:] = 0

    def add(self, h: int, position: int) -> None:
        s = (h & 0xFFFFFFFFFFFFFFFF) % self.slots_n
        e = self.entries[self.count]
        e["hash"], e["position"], e["prev"] = h, position, self.slot_arr[s]
        self.count += 1
        self.slot_arr[s] = self.count

    def chain(self, h: int, budget: list):
        """Positions of entries with hash `h`, newest first (at most budget[0] visits)."""
        v = int(self.slot_arr[(h & 0xFFFFFFFFFFFFFFFF) % self.slots_n])
        ents = self.entries
        while 0 < v <= self.count and budget[0] > 0:
            budget[0] -= 1
            e = ents[v - 1]
            if int(e["hash"]) == h:
                yield int(e["position"])
            nxt = int(e["prev"])
            if nxt >= v:         # chains only go back: anything else is damage
                break
            v = nxt

    def flush(self) -> None:
        if not self.read_only:
            self.mm.flush()

    def close(self) -> None:
        self.slot_arr = self.entries = None
        try:
            self.mm.close()
        except BufferError:      # a numpy view still alive somewhere: leave it to the GC
            pass


def _map(path: str, nbytes: int, create: bool, read_only: bool):
    if read_only:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                raise
            return mmap.mmap(-1, nbytes)
        try:
            if os.fstat(fd).st_size != nbytes:
                raise ValueError(f"{path}: size is not {nbytes}")
            return mmap.mmap(fd, nbytes, access=mmap.ACCESS_COPY)
        finally:
            os.close(fd)
    fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0) | os.O_CLOEXEC, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size not in (0, nbytes):
            raise ValueError(f"{path}: size {size} is not {nbytes}")
        if size == 0:
            try:
                os.posix_fallocate(fd, 0, nbytes)
            except OSError as exc:
                os.unlink(path)
                raise DiskFullError(exc.errno, f"cannot preallocate {path}: {exc.strerror}")
        return mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)


class KeyIndex:
    """The key index of one store. Not thread-safe: called under the store's lock."""

    def __init__(self, root: str, commitlog, segment_for, *, slots: int, capacity: int,
                 read_only: bool = False):
        self.dir = os.path.join(root, KEYINDEX_DIR)
        self.log = commitlog
        self.segment_for = segment_for       # position -> SegmentView (the store's reader)
        self.slots = slots
        self.capacity = capacity
        self.read_only = read_only
        self.files: list[KeyIndexFile] = []
        self.position = commitlog.min_position   # indexed up to here
        self.indexed = 0                         # keys indexed since open (stats)
        self.rebuilt_files = 0

    # -- open ---------------------------------------------------------------------------------
    def load(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.dir) if len(n) == 20 and n.isdigit())
        except FileNotFoundError:
            names = []
        lg = self.log
        for i, name in enumerate(names):
            path = os.path.join(self.dir, name)
            try:
                f = KeyIndexFile(path, self.slots, self.capacity, int(name), create=False,
                                 read_only=self.read_only)
            except ValueError as exc:
                log.warning("%s; rebuilding the key index from position %s", exc, int(name))
                self._drop_from(names[i:])
                self.rebuilt_files += 1
                break
            if f.end > lg.end_position:          # the log was cut below what it indexes
                f.close()
                self._drop_from(names[i:])
                self.rebuilt_files += 1
                break
            self.files.append(f)
        if self.files:
            last = self.files[-1]
            if not last.flags & FLAG_CLEAN:
                last.recompute_slots()
            last.write_header(clean=False)      # open for writing until a clean close
            self.position = max(last.end, lg.min_position)
        else:
            self.position = self._start_position(names)
        self.drop_deleted(lg.min_position)

    def _start_position(self, names) -> int:
        """Where indexing starts without files: the first dropped file's begin, else the
        log's min position."""
        lg = self.log
        if names:
            return max(min(int(names[0]), lg.end_position), lg.min_position)
        return lg.min_position

    def _drop_from(self, names) -> None:
        if self.read_only:
            return
        for n in names:
            try:
                os.unlink(os.path.join(self.dir, n))
            except FileNotFoundError:
                pass

    # -- building -----------------------------------------------------------------------------
    def catch_up(self, upto: int, max_records: int = 65536) -> None:
        """Index every keyed MESSAGE record in [position, upto) (upto: what dispatch has
        placed, i.e. committed records)."""
        lg = self.log
        pos = max(self.position, lg.min_position)
        while pos < upto:
            info, nxt = lg.scan(pos, upto, max_records)
            if nxt == pos:
                break
            msg = info[info["type"] == TYPE_MESSAGE]
            if len(msg):
                self._index(msg["position"])
            pos = nxt
            if self.files:
                self.files[-1].end = pos
        self.position = max(self.position, pos)

    def _index(self, positions: np.ndarray) -> None:
        # topic_len u16 @76, tags_len u16 @78, keys_len u32 @80 of each header, in one pass
        # per segment; only records with keys get Python work
        S = self.log.segment_size_bytes
        starts = positions - positions % S
        for s in np.unique(starts).tolist():
            sel = positions[starts == s]
            mm = self.segment_for(int(s)).owner
            raw = np.frombuffer(mm, dtype=np.uint8)
            offs = sel - s
            lens = raw[offs[:, None] + np.arange(76, 84)].copy().view(
                [("topic_len", "<u2"), ("tags_len", "<u2"), ("keys_len", "<u4")]).reshape(-1)
            keyed = np.nonzero(lens["keys_len"] > 0)[0]
            for i in keyed.tolist():
                off = int(offs[i])
                tl, gl, kl = int(lens["topic_len"][i]), int(lens["tags_len"][i]), \
                    int(lens["keys_len"][i])
                topic = bytes(mm[off + 96:off + 96 + tl])
                p = off + 96 + tl + gl
                end = p + kl
                while p + 2 <= end:
                    n = mm[p] | (mm[p + 1] << 8)
                    self._add(key_hash(topic, bytes(mm[p + 2:p + 2 + n])), s + off)
                    p += 2 + n

    def _add(self, h: int, position: int) -> None:
        if not self.files or self.files[-1].count >= self.files[-1].capacity:
            self._new_file(position)
        self.files[-1].add(h, position)
        self.indexed += 1

    def _new_file(self, begin: int) -> None:
        if self.files:
            cur = self.files[-1]
            cur.end = begin
            cur.flush()
            cur.write_header(clean=True)        # sealed: never written again
            cur.flush()
        if not self.read_only:
            os.makedirs(self.dir, exist_ok=True)
        f = KeyIndexFile(os.path.join(self.dir, segment_name(begin)), self.slots,
                         self.capacity, begin, create=True, read_only=self.read_only)
        self.files.append(f)

    # -- durability, retention, close ---------------------------------------------------------
    def checkpoint(self) -> None:
        """Entries first, then the header that counts them."""
        if self.files and not self.read_only:
            f = self.files[-1]
            f.end = max(f.end, self.position)
            f.flush()
            f.write_header(clean=False)
            f.flush()

    def drop_deleted(self, min_position: int) -> None:
        """Delete sealed files whose every record retention deleted."""
        while len(self.files) > 1 and self.files[0].end <= min_position:
            f = self.files.pop(0)
            f.close()
            if not self.read_only:
                os.unlink(f.path)

    def close(self) -> None:
        for f in self.files:
            if f is self.files[-1] and not self.read_only:
                f.end = max(f.end, self.position)
                f.flush()
                f.write_header(clean=True)
                f.flush()
            f.close()
        self.files = []

    # -- lookup -------------------------------------------------------------------------------
    def find(self, topic: str, key: str, max_hits: int, begin_ms=None, end_ms=None) -> list:
        """Messages of `topic` carrying `key`, newest first, at most `max_hits`, optionally
        with begin_ms <= store timestamp < end_ms."""
        tb, kb = topic.encode(), key.encode()
        h = key_hash(tb, kb)
        out = []
        seen = set()
        budget = [MAX_CHAIN_VISITS]
        min_pos = self.log.min_position
        for f in reversed(self.files):
            for pos in f.chain(h, budget):
                if pos < min_pos or pos in seen:
                    continue
                seen.add(pos)
                m = _cq.message_at(self.segment_for(pos), pos)
                if m is None or m.topic != topic or key not in m.keys:
                    continue         # a hash collision (or a stale entry): not this key
                ts = m.store_timestamp_ms
                if (begin_ms is not None and ts < begin_ms) or (end_ms is not None
                                                                and ts >= end_ms):
                    continue
                out.append(m)
                if len(out) >= max_hits:
                    return out
        return out

    def remove_all(self) -> None:
        """Forget every file (tests and repair: the index is rebuilt from the log)."""
        self.close()
        if not self.read_only:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.position = self.log.min_position
