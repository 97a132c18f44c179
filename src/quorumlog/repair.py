"""Repair of a store whose commit log refuses to open: explicit, saving what it removes, reported.

The log never drops data it cannot prove was torn: damage inside records the checkpoint calls
durable, damage with intact records after it (before the checkpoint's flushed position), a
missing durable segment, a damaged checkpoint or a foreign file among the log's files make
the open fail with CorruptLogError (or StorageError) naming the file and offset. `repair(path)`
is the operator's decision to go on without what is damaged:

    report = repair("/var/lib/broker")            # `quorumlog repair /var/lib/broker`
    report.dropped_indexes                        # raft indexes no longer in the log

It opens the log (the native CommitLog: the same checks as any open), and for each error it
meets applies one fix, then opens again, until the log opens:

- damage in a segment (a bad record, a short file): the log is cut at the end of the last
  intact record before the damage -- the rest of that segment is saved to the backup
  directory and zeroed, later segments are moved there whole -- and the checkpoint is
  rewritten so that it claims nothing past the cut;
- a missing segment: the log is cut at its start (a missing first segment instead moves the
  log's min position past it, as retention would have);
- a damaged checkpoint, the raft-index files (derived data, rebuilt at open), a directory or
  a file that does not belong where a log file is: moved to the backup directory.

Everything removed goes to `<dir>/repair-<UTC time>/` with `report.json`; nothing is deleted.
`dry_run=True` reports the first problem and the fix it would apply, changing nothing. The
consume queues, topics.json and the delay progress are derived from the log and follow the
cut when the store opens (quorumlog.open).

The replica hook (the replicated node's later work): on a Raft replica the records a repair
drops were usually acknowledged, perhaps committed, so the node must not simply go on. It
calls `diagnose(path)` (the same plan, nothing changed) before opening its log; if the log
needs a repair it runs `repair(path)` and then treats `report.dropped_indexes` as entries
it no longer has: it does not vote or acknowledge anything at or below the highest dropped
index (its log end is now lower than what it promised) until the leader has replicated the
range back (COMPARE -> APPEND from its new end). Fetching the damaged range from a peer into
place, instead of cutting, is not implemented.
"""
from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import logging
import mmap
import os
import shutil
import struct

import numpy as np

from .errors import CorruptLogError, LockedError, QuorumlogError, StorageError
from .format import (CHECKPOINT_SIZE, HEADER_SIZE, HEADER_STRUCT, MAGIC, TYPE_BLANK,
                     Checkpoint, decode_checkpoint, encode_checkpoint, index_entry_dtype,
                     parse_file_name, segment_name)

log = logging.getLogger(__name__)

MAX_STEPS = 32                 # fixes applied in one repair before giving up
_MAGIC_BYTES = struct.pack("<H", MAGIC)
COPY_CHUNK = 1 << 20           # bytes zeroed / saved per write


@dataclasses.dataclass
class RepairReport:
    path: str
    problems: list = dataclasses.field(default_factory=list)   # each open error met
    actions: list = dataclasses.field(default_factory=list)    # each fix (planned, dry run)
    cut_position: int | None = None     # the log ends here now (None: not cut)
    last_kept_index: int | None = None  # raft index of the last record kept
    dropped_indexes: tuple | None = None  # (first, last) raft indexes removed, best known
    backup_dir: str | None = None       # where removed files and bytes went
    opens: bool = False                 # the log opened at the end
    last_index: int | None = None       # the log's last index once it opens
    dry_run: bool = False

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class _Plan:
    """One fix: a description and what it does."""

    def __init__(self, what: str, apply):
        self.what = what
        self.apply = apply


def diagnose(path, **log_settings) -> RepairReport:
    """What repair() would do first, changing nothing (a log that opens is opened and closed,
    as any reader would)."""
    return repair(path, dry_run=True, **log_settings)


def repair(path, *, dry_run: bool = False, **log_settings) -> RepairReport:
    """Open the log at `path`, fixing what keeps it from opening (see the module docstring).
    `log_settings` are passed to CommitLog (segment_size_bytes: default from the checkpoint,
    else from the segment files). LockedError when the store is open elsewhere."""
    path = os.fspath(path)
    report = RepairReport(path=path, dry_run=dry_run)
    for _ in range(MAX_STEPS):
        err = _open_error(path, report, log_settings)
        if err is None:
            return report
        report.problems.append(f"{type(err).__name__}: {err}")
        plan = _plan(path, err, log_settings)
        if plan is None:
            raise QuorumlogError(f"{path}: no repair known for: {err}") from err
        report.actions.append(plan.what)
        if dry_run:
            return report
        with _locked(path):
            if report.backup_dir is None:
                report.backup_dir = _new_backup_dir(path)
            plan.apply(report)
            _write_report(report)
    raise QuorumlogError(f"{path}: still not openable after {MAX_STEPS} fixes: "
                         f"{report.problems[-1]}")


# ------------------------------------------------------------------ opening

def _segment_size(path: str, log_settings: dict) -> int:
    if "segment_size_bytes" in log_settings:
        return log_settings["segment_size_bytes"]
    cp = _read_checkpoint(path)
    if cp is not None:
        return cp.segment_size_bytes
    d = os.path.join(path, "commitlog")
    sizes = sorted({os.path.getsize(os.path.join(d, n)) for n in _numbered(d)
                    if os.path.isfile(os.path.join(d, n))})
    return sizes[-1] if sizes else 1 << 30


def _open_error(path: str, report: RepairReport, log_settings: dict):
    """None when the log opens (it is closed again), else the error that stops it."""
    from .commitlog import CommitLog
    kw = dict(log_settings)
    kw["segment_size_bytes"] = _segment_size(path, log_settings)
    try:
        lg = CommitLog(path, **kw)
    except (CorruptLogError, StorageError) as exc:
        return exc
    report.opens = True
    report.last_index = lg.last_index
    lg.close()
    return None


class _locked:
    """The store's LOCK, held while files are changed (no process may open it meanwhile)."""

    def __init__(self, path: str):
        self.file = os.path.join(path, "LOCK")

    def __enter__(self):
        self.fd = -1
        if os.path.isdir(self.file):
            return self         # no process can open the store while LOCK is a directory
        try:
            self.fd = os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StorageError(f"{self.file}: cannot open the lock file: {exc.strerror}",
                               self.file, exc.errno) from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise LockedError(f"{os.path.dirname(self.file)} is open elsewhere "
                              "(LOCK is held)") from None
        return self

    def __exit__(self, *exc):
        if self.fd >= 0:
            os.close(self.fd)


# ------------------------------------------------------------------ planning

def _plan(path: str, err, log_settings: dict) -> _Plan | None:
    epath = getattr(err, "path", None)
    if not epath:
        return None
    epath = os.path.abspath(epath)
    root = os.path.abspath(path)
    segdir = os.path.join(root, "commitlog")
    idxdir = os.path.join(root, "index")
    parent, name = os.path.split(epath)
    if epath == os.path.join(root, "checkpoint"):
        return _Plan(f"move the damaged checkpoint {epath} aside (the log is then scanned "
                     "from its first segment)", lambda r: _move_aside(r, epath))
    if parent == idxdir or epath == idxdir:
        return _Plan(f"move the raft-index files ({idxdir}) aside: they are rebuilt from the "
                     "log at open", lambda r: _move_aside(r, idxdir))
    if parent == segdir:
        S = _segment_size(path, log_settings)
        start = parse_file_name(name)
        if start is None or start % S or (os.path.lexists(epath) and
                                          not os.path.isfile(epath)):
            return _Plan(f"move {epath} aside: it does not belong among the segment files",
                         lambda r: _move_aside(r, epath))
        if not os.path.exists(epath):
            first = _first_segment(segdir)
            if first is not None and start < first:
                return _Plan(f"the log's first segments up to {epath} are missing: move the "
                             f"log's min position to {first} (the records before it are lost)",
                             lambda r: _advance_min(r, root, first, S))
            return _Plan(f"segment {epath} is missing: cut the log at position {start}",
                         lambda r: _cut(r, root, start, S))
        size = os.path.getsize(epath)
        off = err.offset if isinstance(err.offset, int) and 0 <= err.offset <= S else 0
        at = start + min(off, size)
        return _Plan(f"cut the log at the last intact record before position {at} "
                     f"({epath} offset {at - start})", lambda r: _cut(r, root, at, S))
    if parent == root or epath.startswith(root + os.sep):
        if os.path.lexists(epath) and not os.path.isfile(epath):
            return _Plan(f"move {epath} aside: a file of the store belongs there",
                         lambda r: _move_aside(r, epath))
    return None


# ------------------------------------------------------------------ fixes

def _new_backup_dir(path: str) -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    d = os.path.join(path, f"repair-{stamp}")
    os.makedirs(d)
    return d


def _write_report(report: RepairReport) -> None:
    data = json.dumps(report.as_dict(), indent=1, default=list).encode()
    with open(os.path.join(report.backup_dir, "report.json"), "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    _fsync_dir(report.backup_dir)


def _move_aside(report: RepairReport, src: str) -> None:
    """Rename `src` into the backup directory (same filesystem: nothing is copied)."""
    dst = os.path.join(report.backup_dir, os.path.relpath(src, report.path).replace(os.sep, "__"))
    os.rename(src, dst)
    _fsync_dir(os.path.dirname(src))
    _fsync_dir(report.backup_dir)
    log.warning("repair %s: moved %s to %s", report.path, src, dst)


def _numbered(d: str) -> list[str]:
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if parse_file_name(n) is not None)


def _first_segment(segdir: str) -> int | None:
    starts = [parse_file_name(n) for n in _numbered(segdir)]
    return min(starts) if starts else None


def _read_checkpoint(path: str) -> Checkpoint | None:
    f = os.path.join(path, "checkpoint")
    try:
        with open(f, "rb") as fh:
            return decode_checkpoint(fh.read(CHECKPOINT_SIZE + 1), f)
    except (OSError, CorruptLogError):
        return None


def _write_checkpoint(path: str, cp: Checkpoint) -> None:
    f = os.path.join(path, "checkpoint")
    tmp = f + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(encode_checkpoint(cp))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, f)
    _fsync_dir(path)


def _fsync_dir(d: str) -> None:
    from .store.files import fsync_dir     # (the store's helpers need the native build)
    fsync_dir(d)


def _records(data, base: int, limit: int):
    """(position, end, raft index, type) of the consecutive well-formed records of one
    segment's bytes from its start, up to `limit` (headers only: magic, version, position
    field, size inside the segment; the caller checks the CRC of what it keeps)."""
    off = 0
    while off + HEADER_SIZE <= min(len(data), limit - base):
        (crc, size, magic, version, rtype, _fl, index, _term, position,
         *_rest) = HEADER_STRUCT.unpack_from(data, off)
        if (magic != MAGIC or version != 1 or position != base + off or size < HEADER_SIZE
                or off + size > len(data)):
            return
        if rtype == TYPE_BLANK:
            return
        yield base + off, base + off + size, index, rtype
        off += size


def _intact(data, off: int, end: int) -> bool:
    from .commitlog import crc32c
    (crc,) = struct.unpack_from("<I", data, off)
    return crc == crc32c(memoryview(data)[off + 4:end])


def _last_record_before(root: str, at: int, S: int):
    """(end position, raft index) of the last intact record ending at or before `at`, walking
    the segment holding `at` and, when it has none, the ones before it; (min position, 0)
    when there is none."""
    segdir = os.path.join(root, "commitlog")
    k = at // S
    first = _first_segment(segdir)
    while first is not None and k >= first // S:
        f = os.path.join(segdir, segment_name(k * S))
        if os.path.isfile(f) and os.path.getsize(f) > 0:
            limit = at if k == at // S else k * S + S
            best = None
            with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0,
                                                access=mmap.ACCESS_READ) as data:
                for pos, end, index, _t in _records(data, k * S, limit):
                    if end > at or not _intact(data, pos - k * S, end - k * S):
                        break
                    best = (end, index)
            if best is not None:
                return best
        k -= 1
    return (first if first is not None else 0), 0


def _max_index_after(root: str, at: int, S: int) -> int:
    """The highest raft index of an intact record at or after `at` (in the bytes a cut
    removes), or 0. Damaged bytes may come first, so record starts are searched for (a
    header names its own position) rather than walked by size."""
    segdir = os.path.join(root, "commitlog")
    best = 0
    for n in _numbered(segdir):
        start = parse_file_name(n)
        f = os.path.join(segdir, n)
        if start + S <= at or not os.path.isfile(f) or os.path.getsize(f) == 0:
            continue
        with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            p = data.find(_MAGIC_BYTES, max(0, at - start) + 8)
            while p >= 0:
                r = p - 8                       # the magic is at byte 8 of a header
                if r + HEADER_SIZE <= len(data):
                    (_crc, size, _m, version, rtype, _fl, index, _term, position,
                     *_rest) = HEADER_STRUCT.unpack_from(data, r)
                    if (position == start + r and version == 1 and rtype != TYPE_BLANK
                            and HEADER_SIZE <= size <= len(data) - r
                            and _intact(data, r, r + size)):
                        best = max(best, index)
                p = data.find(_MAGIC_BYTES, p + 1)
    return best


def _max_indexed_after(root: str, at: int) -> int:
    """The highest raft index whose raft-index entry names a record at or after `at` (the
    entries are durable up to the checkpoint's flushed index: they name what a damaged
    record was), or 0."""
    idxdir = os.path.join(root, "index")
    dtype = index_entry_dtype()
    best = 0
    for n in _numbered(idxdir):
        f = os.path.join(idxdir, n)
        if not os.path.isfile(f) or os.path.getsize(f) < dtype.itemsize:
            continue
        entries = np.fromfile(f, dtype=dtype, count=os.path.getsize(f) // dtype.itemsize)
        hit = np.flatnonzero((entries["size"] > 0) & (entries["position"] >= at))
        if len(hit):
            best = max(best, parse_file_name(n) + int(hit[-1]))
    return best


def _cut(report: RepairReport, root: str, at: int, S: int) -> None:
    """Cut the log at the end of the last intact record before `at`: save and zero the rest
    of its segment, move later segments aside, lower the checkpoint to the cut."""
    segdir = os.path.join(root, "commitlog")
    end, last_index = _last_record_before(root, at, S)
    dropped_hi = max(_max_index_after(root, end, S), _max_indexed_after(root, end))
    k = end // S           # a record never ends at its segment's end (a BLANK follows)
    seg = os.path.join(segdir, segment_name(k * S))
    moved = []
    for n in reversed(_numbered(segdir)):           # later segments, newest first
        if parse_file_name(n) > k * S:
            _move_aside(report, os.path.join(segdir, n))
            moved.append(n)
    if os.path.isfile(seg):
        _save_and_zero(report, seg, end - k * S)
    cp = _read_checkpoint(root)
    if cp is not None:
        ci, cpos = cp.committed_index, cp.committed_position
        if ci > last_index or cpos > end:
            ci, cpos = last_index, end
        fp, fi = cp.flushed_position, cp.flushed_index
        if fp > end:
            fp, fi = end, last_index
        _write_checkpoint(root, dataclasses.replace(
            cp, flags=0, flushed_position=fp, flushed_index=fi, committed_index=ci,
            committed_position=cpos, dispatched_position=min(cp.dispatched_position, fp)))
    report.cut_position = end
    report.last_kept_index = last_index
    if dropped_hi > last_index:
        lo = last_index + 1
        if report.dropped_indexes:
            lo = min(lo, report.dropped_indexes[0])
            dropped_hi = max(dropped_hi, report.dropped_indexes[1])
        report.dropped_indexes = (lo, dropped_hi)
    log.warning("repair %s: log cut at position %d after raft index %d (segments moved "
                "aside: %s)", root, end, last_index, moved or "none")


def _save_and_zero(report: RepairReport, seg: str, off: int) -> None:
    """Copy bytes [off, last non-zero byte] of `seg` to the backup directory, then zero
    [off, end) in place and fsync."""
    size = os.path.getsize(seg)
    dst = os.path.join(report.backup_dir, f"{os.path.basename(seg)}@{off}")
    with open(seg, "r+b") as src, open(dst, "wb") as out:
        src.seek(off)
        pos = off
        while pos < size:
            chunk = src.read(min(COPY_CHUNK, size - pos))
            if not chunk:
                break
            out.write(chunk)
            pos += len(chunk)
        out.flush()
        os.fsync(out.fileno())
        pos = off
        zeros = bytes(COPY_CHUNK)
        while pos < size:
            n = min(COPY_CHUNK, size - pos)
            src.seek(pos)
            src.write(zeros[:n])
            pos += n
        src.flush()
        os.fsync(src.fileno())
    shutil.copystat(seg, dst)
    log.warning("repair %s: saved %s bytes %d.. to %s and zeroed them", report.path, seg,
                off, dst)


def _advance_min(report: RepairReport, root: str, first: int, S: int) -> None:
    """The first segments are gone: the log now starts at `first` (as after retention)."""
    cp = _read_checkpoint(root)
    if cp is not None:
        fp, fi = cp.flushed_position, cp.flushed_index
        if fp < first:
            fp, fi = first, 0
        _write_checkpoint(root, dataclasses.replace(
            cp, flags=0, min_position=first, flushed_position=fp, flushed_index=fi,
            committed_position=max(cp.committed_position, first) if cp.committed_index else
            first, dispatched_position=max(cp.dispatched_position, first)))
    log.warning("repair %s: log min position moved to %d", root, first)
