"""Read-only inspection of a store directory (`quorumlog info` / `quorumlog verify`).

Nothing here creates, locks or writes a file: it opens files O_RDONLY and maps them
read-only, so it works on a store another process has open (a live broker), on read-only
media, and never turns a mistyped path into a store. It reads the files docs/format.md
specifies, plus the store layer's and a replica's own files:

    checkpoint, commitlog/<20d>, index/<20d>          the log (format.md)
    consumequeue/<topic>/<queue>/<20d>, topics.json    the consume queues and the topic list
    delay_offsets.json, consumer_offsets.json          delay progress, consumer-group offsets
    keyindex/<20d>                                     the message-key index
    raft-state                                         a replica's term and vote

`describe(path)` -> a JSON-able dict (what `info` prints); `verify(path)` -> a Report of
problems (damage) and notes (states recovery repairs by itself, such as a torn tail). A path
that holds no store raises NotAStoreError; a file that cannot be read raises OSError.
"""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import mmap
import os
import stat
import struct
import time

import numpy as np

from ._consumequeue import CQ_DTYPE as CQ_ENTRY
from .errors import CorruptLogError, NotAStoreError
from .format import (CHECKPOINT_SIZE, HEADER_SIZE, HEADER_STRUCT, INDEX_ENTRY_SIZE, MAGIC,
                     TYPE_BLANK, TYPE_MESSAGE, TYPE_META, TYPE_NAMES, check_topic_name,
                     decode_checkpoint, header_dtype, index_entry_dtype,
                     segment_name)

__all__ = ["describe", "verify", "Report", "find_store", "raft_state"]

INDEX_ENTRY = index_entry_dtype()
_HDR = HEADER_STRUCT
HEADER_DTYPE = header_dtype()
assert HEADER_DTYPE.itemsize == HEADER_SIZE
_MAX_JSON_BYTES = 64 << 20     # a metadata file larger than this is not ours
_MAX_LISTED_PROBLEMS = 100     # verify keeps the first problems of each kind


def _numbered(d: str) -> list[int]:
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if len(n) == 20 and n.isdigit())


def find_store(path) -> str:
    """`path` as a str when it is a store directory; NotAStoreError otherwise. A store has a
    checkpoint, or segment files under commitlog/ (a log that never wrote a checkpoint)."""
    p = os.fspath(path)
    if not os.path.exists(p):
        raise NotAStoreError(f"not a quorumlog store: {p} (no such file or directory)")
    if not os.path.isdir(p):
        raise NotAStoreError(f"not a quorumlog store: {p} (not a directory)")
    if os.path.isfile(os.path.join(p, "checkpoint")) or _numbered(os.path.join(p, "commitlog")):
        return p
    raise NotAStoreError(f"not a quorumlog store: {p} (no checkpoint and no commitlog/ "
                         "segments)")


def _read_small(path: str, limit: int = _MAX_JSON_BYTES) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit + 1)
    except FileNotFoundError:
        return None


def _json_file(path: str):
    """(parsed or None, error or None); (None, None) when the file does not exist."""
    data = _read_small(path)
    if data is None:
        return None, None
    if len(data) > _MAX_JSON_BYTES:
        return None, f"{path}: larger than {_MAX_JSON_BYTES} bytes"
    try:
        return json.loads(data), None
    except ValueError as exc:
        return None, f"{path}: not valid JSON ({exc})"


def _map(path: str):
    """A read-only mapping of a whole file (None for an empty file)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL,
                          "not a regular file", path)
        if st.st_size == 0:
            return None
        try:
            return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None
    finally:
        os.close(fd)


def is_locked(path: str) -> bool | None:
    """True when a process holds the store's LOCK (it is open), False when not, None when it
    cannot tell (no LOCK file). A probe with a shared lock on a read-only descriptor: it
    creates nothing and is released at once."""
    try:
        fd = os.open(os.path.join(path, "LOCK"), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        return None
    finally:
        os.close(fd)       # closing the descriptor releases a lock we took
    return False


# --------------------------------------------------------------------------------------------
# a replica's raft-state (written by the replicated node; see its hard-state module)
_RS_HEAD = struct.Struct("<4sHHQH")


def raft_state(path: str) -> dict | None:
    """{"term", "voted_for"} from <dir>/raft-state, None when absent; CorruptLogError when
    damaged. Layout: magic b"QLRS", u16 version 1, u16 0, u64 term, u16 vote length, the
    vote's UTF-8 bytes, u32 CRC32C of everything before it."""
    from .commitlog import crc32c
    f = os.path.join(path, "raft-state")
    data = _read_small(f, 4096)
    if data is None:
        return None
    if len(data) < _RS_HEAD.size + 4:
        raise CorruptLogError(f"{f}: {len(data)} bytes is too short", f, 0)
    magic, version, reserved, term, vlen = _RS_HEAD.unpack_from(data, 0)
    end = _RS_HEAD.size + vlen
    if magic != b"QLRS" or version != 1 or reserved or len(data) != end + 4:
        raise CorruptLogError(f"{f}: not a raft-state file of version 1", f, 0)
    if struct.unpack_from("<I", data, end)[0] != crc32c(data[:end]):
        raise CorruptLogError(f"{f}: CRC mismatch", f, end)
    return {"term": term, "voted_for": data[_RS_HEAD.size:end].decode("utf-8", "replace") or None}


# --------------------------------------------------------------------------------------------
# the log
@dataclasses.dataclass
class LogScan:
    """What a walk over the records found."""
    first_index: int = 0
    last_index: int = 0
    last_term: int = 0
    records: int = 0
    messages: int = 0
    meta_records: int = 0
    end_position: int = 0
    stop_reason: str | None = None     # why the walk stopped before zeros (None: clean end)
    stop_position: int | None = None


class LogFiles:
    """Read-only mappings of the segments and raft-index files of a store."""

    def __init__(self, path: str, checkpoint, segment_size_bytes: int | None = None):
        self.path = path
        self.cp = checkpoint
        self.seg_dir = os.path.join(path, "commitlog")
        self.idx_dir = os.path.join(path, "index")
        self.seg_starts = _numbered(self.seg_dir)
        self.idx_firsts = _numbered(self.idx_dir)
        if checkpoint is not None:
            self.S = checkpoint.segment_size_bytes
            self.N = checkpoint.index_file_entries
        else:
            # no checkpoint: the size given, else the first segment file's length
            first = self.seg_starts[0]
            self.S = segment_size_bytes or os.path.getsize(
                os.path.join(self.seg_dir, segment_name(first)))
            self.N = 0
            if self.idx_firsts:
                self.N = os.path.getsize(os.path.join(
                    self.idx_dir, segment_name(self.idx_firsts[0]))) // INDEX_ENTRY_SIZE
        self._maps: dict[int, object] = {}

    @property
    def min_position(self) -> int:
        if self.seg_starts:
            return self.seg_starts[0]
        return self.cp.min_position if self.cp else 0

    def segment(self, start: int):
        m = self._maps.get(start)
        if m is None and start in self.seg_starts:
            m = self._maps[start] = _map(os.path.join(self.seg_dir, segment_name(start)))
        return m

    def segment_path(self, start: int) -> str:
        return os.path.join(self.seg_dir, segment_name(start))

    def header_at(self, pos: int):
        """The unpacked header of the record at `pos`, or None (no segment / past its end)."""
        start = pos - pos % self.S
        m = self.segment(start)
        off = pos - start
        if m is None or off + HEADER_SIZE > len(m):
            return None
        return _HDR.unpack_from(m, off)

    def check_record(self, pos: int, crc32c) -> tuple[str | None, tuple | None]:
        """(None, header) when the record at `pos` is intact, else (reason, header or None)."""
        start = pos - pos % self.S
        m = self.segment(start)
        off = pos - start
        if m is None or off + HEADER_SIZE > len(m):
            return "past the end of the segment files", None
        h = _HDR.unpack_from(m, off)
        crc, total, magic, version, rtype = h[0], h[1], h[2], h[3], h[4]
        if magic != MAGIC or version != 1 or rtype not in TYPE_NAMES:
            return "bad magic, version or type", h
        if not HEADER_SIZE <= total <= self.S - off:
            return f"total_size {total} out of bounds", h
        if h[8] != pos:
            return f"position field {h[8]} != {pos}", h
        end = off + (HEADER_SIZE if rtype == TYPE_BLANK else total)
        with memoryview(m) as mv:
            ok = crc32c(mv[off + 4:end]) == crc
        return (None if ok else "CRC mismatch"), h

    def scan(self, crc32c, from_position: int | None = None) -> LogScan:
        """Walk every record from `from_position` (default: the first segment) to the end of
        the written data, checking each one as recovery does (format, position, CRC, raft
        index continuity, terms never decreasing)."""
        out = LogScan()
        pos = self.min_position if from_position is None else from_position
        expect = 0
        S = self.S
        while True:
            start = pos - pos % S
            m = self.segment(start)
            if m is None:
                break
            off = pos - start
            if off + HEADER_SIZE > len(m) or not any(m[off:off + HEADER_SIZE]):
                if off + HEADER_SIZE <= len(m) or start + S not in self.seg_starts:
                    break
            reason, h = self.check_record(pos, crc32c)
            if reason is None and h[4] != TYPE_BLANK:
                if expect and h[6] != expect:
                    reason = f"raft index {h[6]} where {expect} was expected"
                elif h[7] < out.last_term:
                    reason = f"term {h[7]} after term {out.last_term}"
            if reason is not None:
                out.stop_reason, out.stop_position = reason, pos
                break
            if h[4] == TYPE_BLANK:
                pos = start + S
                continue
            if not out.first_index:
                out.first_index = h[6]
            out.records += 1
            out.messages += h[4] == TYPE_MESSAGE
            out.meta_records += h[4] == TYPE_META
            out.last_index, out.last_term = h[6], h[7]
            expect = h[6] + 1
            pos += h[1]
            out.end_position = pos
        if not out.end_position:
            out.end_position = self.min_position if from_position is None else from_position
        return out

    def index_entries(self) -> list[tuple[int, np.ndarray]]:
        """[(first raft index of the file, its entries)] as numpy arrays over the mappings."""
        out = []
        for first in self.idx_firsts:
            m = _map(os.path.join(self.idx_dir, segment_name(first)))
            if m is not None:
                out.append((first, np.frombuffer(m, dtype=INDEX_ENTRY,
                                                 count=len(m) // INDEX_ENTRY_SIZE)))
        return out

    def gather(self, positions: np.ndarray, rel: int, length: int) -> np.ndarray:
        """Bytes [pos + rel, pos + rel + length) of each position as an (n, length) uint8
        array; rows that fall outside the segment files are all zero."""
        out = np.zeros((len(positions), length), dtype=np.uint8)
        if not len(positions):
            return out
        starts = positions - positions % self.S
        for s in np.unique(starts).tolist():
            m = self.segment(s)
            if m is None:
                continue
            sel = np.nonzero(starts == s)[0]
            offs = positions[sel] - s + rel
            ok = (offs >= 0) & (offs + length <= len(m))
            raw = np.frombuffer(m, dtype=np.uint8)
            out[sel[ok]] = raw[offs[ok][:, None] + np.arange(length)]
        return out

    def headers(self, positions: np.ndarray) -> np.ndarray:
        """Record headers at `positions` (int64) as a structured array (HEADER_DTYPE)."""
        return self.gather(positions, 0, HEADER_SIZE).view(HEADER_DTYPE).reshape(-1)


def _checkpoint(path: str):
    f = os.path.join(path, "checkpoint")
    data = _read_small(f, CHECKPOINT_SIZE + 1)
    if data is None:
        return None
    return decode_checkpoint(data, f)


# --------------------------------------------------------------------------------------------
# consume queues
def _queues(path: str):
    """{topic: {queue id: [(first offset, file path)]}} from the consumequeue/ directory."""
    root = os.path.join(path, "consumequeue")
    out: dict[str, dict[int, list]] = {}
    try:
        topics = sorted(os.listdir(root))
    except FileNotFoundError:
        return out
    for t in topics:
        tdir = os.path.join(root, t)
        if not os.path.isdir(tdir):
            continue
        qs = out.setdefault(t, {})
        for q in os.listdir(tdir):
            if q.isdigit() and os.path.isdir(os.path.join(tdir, q)):
                d = os.path.join(tdir, q)
                qs[int(q)] = [(f, os.path.join(d, segment_name(f))) for f in _numbered(d)]
    return out


def _cq_entries(file_path: str) -> np.ndarray:
    m = _map(file_path)
    if m is None:
        return np.zeros(0, dtype=CQ_ENTRY)
    return np.frombuffer(m, dtype=CQ_ENTRY, count=len(m) // CQ_ENTRY.itemsize)


def _queue_range(files, min_position: int) -> tuple[int, int, int]:
    """(min offset, next offset, entries) of one queue's files: entries pointing below the
    log's min position are gone (retention), size-0 entries are holes."""
    lo = hi = None
    count = 0
    for first, f in files:
        e = _cq_entries(f)
        used = np.nonzero(e["size"] > 0)[0]
        if not len(used):
            continue
        live = used[e["position"][used] >= min_position]
        count += len(live)
        if len(live) and lo is None:
            lo = first + int(live[0])
        hi = first + int(used[-1]) + 1
    if hi is None:
        return 0, 0, 0
    return (hi if lo is None else lo), hi, count


def _disk_use(path: str) -> dict:
    """Allocated bytes (st_blocks) under each top-level entry, and the total."""
    out = {}
    total = 0
    with os.scandir(path) as it:
        for entry in it:
            n = 0
            stack = [entry.path]
            while stack:
                p = stack.pop()
                try:
                    st = os.lstat(p)
                except FileNotFoundError:
                    continue
                n += st.st_blocks * 512
                if os.path.isdir(p) and not os.path.islink(p):
                    stack.extend(os.path.join(p, c) for c in os.listdir(p))
            out[entry.name] = n
            total += n
    return {"total_bytes": total, "by_entry": dict(sorted(out.items()))}


def describe(path, *, segment_size_bytes: int | None = None) -> dict:
    """What an operator looks for, read-only: state, log, topics and queues (offsets),
    consumer offsets, delay progress, disk use, a replica's term. JSON-able."""
    from .commitlog import crc32c
    p = find_store(path)
    cp = _checkpoint(p)
    lf = LogFiles(p, cp, segment_size_bytes)
    # Only the tail after the checkpoint's flushed position is walked (the records before it
    # were durable and verified then); `verify` walks the whole log.
    start = cp.flushed_position if cp and cp.flushed_position >= lf.min_position else None
    scan = lf.scan(crc32c, start)
    first_index = scan.first_index if start is None else _first_index(lf, crc32c)
    last_index = scan.last_index or (cp.flushed_index if cp else 0)
    last_term = scan.last_term or _term_of(lf, last_index)
    out = {
        "path": os.path.abspath(p),
        "open_by_a_process": is_locked(p),
        "unclean_shutdown_marker": os.path.exists(os.path.join(p, "abort")),
        "log": {
            "segment_size_bytes": lf.S,
            "index_file_entries": lf.N,
            "segments": len(lf.seg_starts),
            "min_position": lf.min_position,
            "end_position": scan.end_position,
            "first_index": first_index,
            "last_index": last_index,
            "last_term": last_term,
        },
    }
    if cp is not None:
        out["checkpoint"] = {
            "clean_close": cp.clean, "flushed_position": cp.flushed_position,
            "flushed_index": cp.flushed_index, "committed_index": cp.committed_index,
            "committed_position": cp.committed_position,
            "dispatched_position": cp.dispatched_position,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z",
                                        time.localtime(cp.written_at_ms / 1000.0)),
        }
    meta, err = _json_file(os.path.join(p, "topics.json"))
    topics = {}
    registered = meta.get("topics", {}) if isinstance(meta, dict) else {}
    for name, qs in _queues(p).items():
        info = registered.get(name, {}) if isinstance(registered, dict) else {}
        queues = {}
        total = 0
        for q, files in sorted(qs.items()):
            lo, hi, n = _queue_range(files, lf.min_position)
            queues[str(q)] = {"min_offset": lo, "max_offset": hi, "files": len(files)}
            total += n
        topics[name] = {"queues": len(qs), "system": bool(info.get("system", False))
                        if isinstance(info, dict) else False,
                        "messages": total, "queue_offsets": queues}
    out["topics"] = topics
    if err:
        out["topics_json_error"] = err
    delay, err = _json_file(os.path.join(p, "delay_offsets.json"))
    if delay is not None or err:
        out["delay_progress"] = delay.get("offsets") if isinstance(delay, dict) else err
    groups, err = _json_file(os.path.join(p, "consumer_offsets.json"))
    if groups is not None or err:
        out["consumer_offsets"] = groups.get("offsets") if isinstance(groups, dict) else err
    try:
        rs = raft_state(p)
    except CorruptLogError as exc:
        rs = {"error": str(exc)}
    if rs is not None:
        out["replica"] = rs
    out["disk"] = _disk_use(p)
    return out


def _term_of(lf: LogFiles, index: int) -> int:
    """The term of raft index `index` from its raft-index entry (0 when not there)."""
    for first, entries in lf.index_entries():
        if first <= index < first + len(entries):
            return int(entries[index - first]["term"])
    return 0


def _first_index(lf: LogFiles, crc32c) -> int:
    """The raft index of the log's first record (read from the first segment's head)."""
    pos = lf.min_position
    reason, h = lf.check_record(pos, crc32c)
    if reason is None and h[4] != TYPE_BLANK:
        return h[6]
    return 0


# --------------------------------------------------------------------------------------------
# verify
@dataclasses.dataclass
class Report:
    problems: list[str] = dataclasses.field(default_factory=list)   # damage: exit code 1
    notes: list[str] = dataclasses.field(default_factory=list)      # recovery repairs these
    checked: dict = dataclasses.field(default_factory=dict)         # what was checked: counts

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(path, *, segment_size_bytes: int | None = None) -> Report:
    """Check every file the store owns, read-only. Damage (a record that fails its CRC with
    data after it or below the durable checkpoint, a raft-index entry below the checkpoint
    that disagrees with its record, a consume-queue entry below the dispatched position that
    does not point at its message, a metadata file that does not parse) is a problem;
    what recovery repairs on the next open (a torn tail, index entries past the checkpoint,
    queue entries past the dispatched position) is a note."""
    from .commitlog import crc32c
    p = find_store(path)
    rep = Report()
    try:
        cp = _checkpoint(p)
    except CorruptLogError as exc:
        rep.problems.append(str(exc))
        cp = None
    if cp is None and not _numbered(os.path.join(p, "commitlog")):
        return rep
    lf = LogFiles(p, cp, segment_size_bytes)
    _verify_segments(lf, rep)
    scan = lf.scan(crc32c)
    rep.checked["records"] = scan.records
    rep.checked["first_index"] = scan.first_index
    rep.checked["last_index"] = scan.last_index
    flushed = cp.flushed_position if cp else lf.min_position
    if scan.stop_reason is not None:
        where = (f"{lf.segment_path(scan.stop_position - scan.stop_position % lf.S)} offset "
                 f"{scan.stop_position % lf.S}")
        after = _intact_after(lf, scan, crc32c)
        if scan.stop_position < flushed:
            rep.problems.append(f"{where}: damaged record ({scan.stop_reason}) below the "
                                f"checkpoint's flushed position {flushed}: durable data lost")
        elif after:
            rep.problems.append(f"{where}: damaged record ({scan.stop_reason}) with intact "
                                f"data after it ({after})")
        else:
            rep.notes.append(f"{where}: the log ends in a torn record ({scan.stop_reason}); "
                             "the next open cuts it (nothing after it was acknowledged as "
                             "durable)")
    _verify_index(lf, scan, cp, rep, crc32c)
    _verify_queues(p, lf, scan, cp, rep)
    _verify_metadata(p, rep)
    return rep


def _verify_segments(lf: LogFiles, rep: Report) -> None:
    for a, b in zip(lf.seg_starts, lf.seg_starts[1:]):
        if b != a + lf.S:
            rep.problems.append(f"segment files are not contiguous: {segment_name(a)} then "
                                f"{segment_name(b)}")
    for s in lf.seg_starts:
        if s % lf.S:
            rep.problems.append(f"{lf.segment_path(s)}: not aligned to segment_size_bytes "
                                f"{lf.S}")
        size = os.path.getsize(lf.segment_path(s))
        if size != lf.S:
            rep.notes.append(f"{lf.segment_path(s)}: {size} bytes, not {lf.S}")
    rep.checked["segments"] = len(lf.seg_starts)


def _intact_after(lf: LogFiles, scan: LogScan, crc32c) -> str | None:
    """Where an intact record lies past the stop position: a later segment's first record, or
    the raft-index entry of the next index verifying at its position."""
    stop = scan.stop_position
    for s in lf.seg_starts:
        if s > stop and lf.check_record(s, crc32c)[0] is None:
            return f"segment {segment_name(s)} starts with an intact record"
    nxt = scan.last_index + 1
    for first, entries in lf.index_entries():
        if first <= nxt < first + len(entries):
            e = entries[nxt - first]
            if e["size"] and int(e["position"]) >= stop:
                reason, h = lf.check_record(int(e["position"]), crc32c)
                if reason is None and h[6] == nxt:
                    return f"raft index {nxt} at position {int(e['position'])} is intact"
    return None


def _verify_index(lf: LogFiles, scan: LogScan, cp, rep: Report, crc32c) -> None:
    """Every raft-index entry of the records up to the checkpoint's flushed index must name
    its record (recovery trusts them); later entries are rebuilt at open (notes)."""
    files = lf.index_entries()
    N = lf.N
    trusted = cp.flushed_index if cp else 0
    bad = later = checked = 0
    for first, entries in files:
        if N and (first - 1) % N:
            rep.problems.append(f"raft index file {segment_name(first)} is misaligned")
            continue
        lo = max(first, scan.first_index or first)
        hi = min(first + len(entries) - 1, scan.last_index)
        if hi < lo:
            continue
        e = entries[lo - first:hi - first + 1]
        h = lf.headers(e["position"].astype(np.int64))
        idx = np.arange(lo, hi + 1, dtype=np.uint64)
        wrong = ((h["raft_index"] != idx) | (h["position"] != e["position"]) |
                 (h["total_size"] != e["size"]) | (h["raft_term"] != e["term"]) |
                 (h["type"] != e["type"]) | (h["magic"] != MAGIC))
        checked += len(e)
        for i in np.nonzero(wrong)[0][:_MAX_LISTED_PROBLEMS].tolist():
            if lo + i <= trusted:
                bad += 1
                rep.problems.append(
                    f"{os.path.join(lf.idx_dir, segment_name(first))}: entry of raft index "
                    f"{lo + i} does not match its record")
            else:
                later += 1
    if later:
        rep.notes.append(f"{later} raft-index entries past the checkpoint disagree with the "
                         "log; the next open rewrites them")
    rep.checked["index_entries"] = checked


def _verify_queues(p: str, lf: LogFiles, scan: LogScan, cp, rep: Report) -> None:
    """Each consume-queue entry below the dispatched position must name a MESSAGE record of
    its topic and queue at its offset, with its size and tag hash."""
    limit = min(cp.dispatched_position if cp else 0, scan.end_position)
    meta, _err = _json_file(os.path.join(p, "topics.json"))
    registered = meta.get("topics", {}) if isinstance(meta, dict) else {}
    checked = 0
    for topic, qs in _queues(p).items():
        if isinstance(registered, dict) and topic not in registered:
            rep.notes.append(f"consumequeue/{topic} is not in topics.json; the next open "
                             "registers it again from the log")
        tb = topic.encode()
        tb_arr = np.frombuffer(tb, dtype=np.uint8)
        for q, files in qs.items():
            for first, f in files:
                e = _cq_entries(f)
                if os.path.getsize(f) % CQ_ENTRY.itemsize:
                    rep.problems.append(f"{f}: size is not a multiple of {CQ_ENTRY.itemsize}")
                used = np.nonzero((e["size"] > 0) & (e["position"] >= lf.min_position)
                                  & (e["position"] < limit))[0]
                if not len(used):
                    continue
                ent = e[used]
                h = lf.headers(ent["position"].astype(np.int64))
                names = lf.gather(ent["position"].astype(np.int64), HEADER_SIZE, len(tb))
                other_topic = (h["topic_len"] != len(tb)) | np.any(names != tb_arr, axis=1)
                wrong = ((h["magic"] != MAGIC) | (h["type"] != TYPE_MESSAGE) |
                         (h["position"] != ent["position"].astype(np.uint64)) |
                         (h["total_size"] != ent["size"].astype(np.uint32)) |
                         (h["queue_id"] != q) |
                         (h["queue_offset"] != (first + used).astype(np.uint64)) |
                         (h["tag_hash"] != ent["tag_hash"]) | other_topic)
                checked += len(ent)
                for i in np.nonzero(wrong)[0][:_MAX_LISTED_PROBLEMS].tolist():
                    rep.problems.append(f"{f}: entry of offset {first + int(used[i])} does not "
                                        f"point at its message (position "
                                        f"{int(ent['position'][i])})")
    rep.checked["queue_entries"] = checked


def _verify_metadata(p: str, rep: Report) -> None:
    """topics.json, delay_offsets.json, consumer_offsets.json, raft-state and the key index
    must parse (the store refuses to open on a damaged topics.json)."""
    meta, err = _json_file(os.path.join(p, "topics.json"))
    if err:
        rep.problems.append(err)
    elif meta is not None:
        topics = meta.get("topics") if isinstance(meta, dict) else None
        if meta.get("version") != 1 or not isinstance(topics, dict):
            rep.problems.append(f"{os.path.join(p, 'topics.json')}: not a version 1 topic list")
        else:
            for name, info in topics.items():
                try:
                    check_topic_name(name)
                    if type(info.get("queues")) is not int or not 1 <= info["queues"] <= 65536:
                        raise ValueError("queues")
                except (ValueError, TypeError, AttributeError) as exc:
                    rep.problems.append(f"topics.json: topic {name!r} is malformed ({exc})")
            rep.checked["topics"] = len(topics)
    for name in ("delay_offsets.json", "consumer_offsets.json"):
        data, err = _json_file(os.path.join(p, name))
        if err:
            rep.problems.append(err)
        elif data is not None and (not isinstance(data, dict) or data.get("version") != 1
                                   or not isinstance(data.get("offsets"), dict)):
            rep.problems.append(f"{os.path.join(p, name)}: not a version 1 offsets file")
    try:
        raft_state(p)
    except CorruptLogError as exc:
        rep.problems.append(str(exc))
    _verify_key_index(p, rep)


def _verify_key_index(p: str, rep: Report) -> None:
    """Each keyindex/ file's header (magic, version, CRC, size). The index is derived: a
    damaged file is rebuilt from the log at the next open, so it is a note."""
    from .commitlog import crc32c
    d = os.path.join(p, "keyindex")
    for first in _numbered(d):
        f = os.path.join(d, segment_name(first))
        raw = (_read_small(f, 64) or b"")[:64]      # (the header; the file is larger)
        ok = len(raw) == 64
        if ok:
            magic, version, _flags, slots, cap, count = struct.unpack_from("<IHHIII", raw, 0)
            ok = (magic == 0x494B4C51 and version == 1 and count <= cap
                  and struct.unpack_from("<I", raw, 60)[0] == crc32c(raw[:60])
                  and os.path.getsize(f) == 64 + slots * 4 + cap * 24)
        if not ok:
            rep.notes.append(f"{f}: damaged key-index file; the next open rebuilds it from "
                             "the log")
    rep.checked["key_index_files"] = len(_numbered(d))
