"""Installing a follower from the leader's retained segment files: the native commit log's side
of docs/raft.md "Installing a follower" (the snapshot equivalent of this design: the log *is*
the state).

Leader: `describe_image(cl, ...)` names the image -- the bytes of the retained segment files
from the first retained record (a segment start) to the end of the last record, BLANK tails
included, so positions stay identical -- with a CRC32C of those bytes; `read_image_chunk`
returns a zero-copy view of whole records of one segment (what CommitLog.read returns) and how
far it advances the image (a BLANK tail before the chunk is counted, never sent: the follower
writes the same BLANK, as append_replicated does in normal replication).

Follower: `Stager` stages the chunks in <dir>/install/, itself a CommitLog directory whose
checkpoint makes it start empty at the image's first position and index, so every chunk goes
through CommitLog.append_replicated: CRC, index continuity, positions, terms and the format's
limits checked in Cython, all or nothing, into preallocated segment files. `finish()` checks
the whole image (its end, its last term, the CRC32C of every byte), flushes and closes the
staged log, and writes install/READY atomically: the commit point. `complete_install(path)`
then replaces the live log's files by the staged ones; it runs again at the next open when a
crash cut it short (READY present: roll forward; no READY: the staging is dropped and the old
log stays), so a crash at any point leaves the old log or the new one.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time

from ..errors import (CorruptLogError, IndexOutOfRangeError, InstallError, ReplicationError,
                      StorageError)
from ..commitlog import CONFIG, CommitLog, crc32c
from ..format import Checkpoint, encode_checkpoint
from ..raft.errors import InstallRefusedError, NotSupportedByLogError
from ..raft.log import InstallImage
from .files import fsync_dir, read_checked_json, write_checked_json

log = logging.getLogger(__name__)

INSTALL_DIR = "install"             # <dir>/install/: the staging directory
READY_FILE = "READY"                # <dir>/install/READY: the staged image is complete
HEAD_FILE = "log_head.json"         # <dir>/log_head.json: the head state of an installed log
MAX_INSTALL_CHUNK_BYTES = 64 << 20  # one chunk (a leader's chunk is max_batch_bytes)
MAX_INSTALL_META_BYTES = 1 << 20    # the image description with the store's metadata
DEFAULT_MAX_INSTALL_BYTES = 1 << 40  # a whole image (a follower's limit; configurable)
_CRC_BLOCK = 4 << 20                # bytes per read when checksumming segment files
_LOG_FILES = ("index", "checkpoint", "commitlog")   # moved in this order; commitlog last


# -- the image description ------------------------------------------------------------------
def _image_meta(start: int, segment_size: int, crc: int, store_meta: dict) -> bytes:
    return json.dumps({"v": 1, "start": start, "segment_size": segment_size, "crc32c": crc,
                       "store": store_meta}, sort_keys=True, separators=(",", ":")).encode()


def parse_image_meta(image: InstallImage) -> dict:
    """The native image description carried in image.meta; InstallError if it is not one."""
    if not isinstance(image, InstallImage):
        raise InstallError(f"an install image is an InstallImage, not {type(image).__name__}")
    meta = image.meta
    if len(meta) > MAX_INSTALL_META_BYTES:
        raise InstallError(f"install image description of {len(meta)} bytes > "
                           f"{MAX_INSTALL_META_BYTES}")
    try:
        d = json.loads(bytes(meta))
    except ValueError as exc:
        raise InstallError(f"install image description is not JSON: {exc}") from None
    if not isinstance(d, dict) or d.get("v") != 1:
        raise InstallError("install image description is not a version-1 object")
    for k in ("start", "segment_size", "crc32c"):
        if type(d.get(k)) is not int or d[k] < 0:
            raise InstallError(f"install image description: {k!r} is not an int >= 0")
    if not isinstance(d.get("store"), dict):
        raise InstallError("install image description: 'store' is not an object")
    return d


def _segment_path(segdir: str, start: int) -> str:
    return os.path.join(segdir, f"{start:020d}")


def segment_bytes_crc(segdir: str, segment_size: int, start: int, end: int, crc: int = 0
                      ) -> int:
    """CRC32C of the log's bytes [start, end) read from its segment files (continuing `crc`,
    the CRC32C of the bytes before `start`)."""
    pos = start
    while pos < end:
        seg = pos - pos % segment_size
        with open(_segment_path(segdir, seg), "rb") as fh:
            fh.seek(pos - seg)
            stop = min(end, seg + segment_size)
            while pos < stop:
                block = fh.read(min(_CRC_BLOCK, stop - pos))
                if not block:
                    raise CorruptLogError(f"{fh.name}: ends before position {stop}", fh.name,
                                          pos - seg)
                crc = crc32c(block, crc)
                pos += len(block)
    return crc


def describe_image(cl, store_meta: dict, producers=(), crc_cache: list | None = None
                   ) -> InstallImage:
    """Leader: the log [first_index .. last_index] as an image (see the module docstring).

    The CRC32C covers every byte of the image. `crc_cache` (a list the caller keeps, [] at
    first) remembers (start, last index, its term, end, crc) of the previous image, so a new
    image of the same head only checksums the bytes appended since (a leader only appends;
    a changed last entry or head starts over)."""
    try:
        return _describe(cl, store_meta, producers, crc_cache)
    except (OSError, IndexOutOfRangeError, CorruptLogError) as exc:
        # retention (another thread) deleted a segment while it was read: a later probe of
        # the follower takes a new image
        log.warning("%s: no install image now (the log's head moved while it was read: %s)",
                    cl.path, exc)
        raise NotSupportedByLogError(f"install_image: the log's head moved: {exc}") from None


def _describe(cl, store_meta: dict, producers, crc_cache) -> InstallImage:
    first, last = cl.first_index, cl.last_index
    if first < 1 or last < first:
        raise NotSupportedByLogError("install_image: the log is empty")
    S = cl.segment_size_bytes
    start = cl.position_of(first)
    if start % S or start != cl.min_position:
        raise NotSupportedByLogError(f"install_image: the first record (position {start}) does "
                                     f"not start the first segment ({cl.min_position})")
    end = cl.position_of(last) + cl.size_of(last)
    last_term = cl.term_at(last)
    segdir = os.path.join(cl.path, "commitlog")
    crc, done = 0, start
    if crc_cache:
        c_start, c_last, c_term, c_end, c_crc = crc_cache
        try:
            if (c_start == start and first <= c_last <= last and cl.term_at(c_last) == c_term
                    and cl.position_of(c_last) + cl.size_of(c_last) == c_end):
                crc, done = c_crc, c_end
        except IndexOutOfRangeError:
            pass
    crc = segment_bytes_crc(segdir, S, done, end, crc)
    if crc_cache is not None:
        crc_cache[:] = [start, last, last_term, end, crc]
    meta = _image_meta(start, S, crc, store_meta)
    if len(meta) > MAX_INSTALL_META_BYTES:
        # (every chunk carries it: the follower would refuse it, the codec too)
        raise NotSupportedByLogError(f"install_image: the store's state is {len(meta)} bytes "
                                     f"> {MAX_INSTALL_META_BYTES}")
    return InstallImage(first, None, last, last_term, end - start, meta, tuple(producers))


def read_image_chunk(cl, image: InstallImage, offset: int, max_bytes: int):
    """Leader: (view, n) -- whole records of one segment from image byte `offset` (a record
    boundary, or the start of a BLANK tail: then the records of the next segment), at most
    max_bytes but at least one record; n is how far the image advances (BLANK included).
    ReplicationError when the log no longer holds the image (retention moved its head)."""
    d = parse_image_meta(image)
    try:
        return _read_chunk(cl, image, d["start"], offset, max_bytes)
    except IndexOutOfRangeError:        # retention (another thread) moved the head meanwhile
        raise ReplicationError("read_image: the log no longer holds this image") from None


def _read_chunk(cl, image: InstallImage, start: int, offset: int, max_bytes: int):
    if (cl.first_index != image.first_index or cl.min_position != start
            or cl.last_index < image.last_index
            or cl.term_at(image.last_index) != image.last_term):
        raise ReplicationError("read_image: the log no longer holds this image")
    if not 0 <= offset < image.total_bytes:
        raise ReplicationError(f"read_image: offset {offset} outside [0, {image.total_bytes})")
    pos = start + offset
    lo, hi = image.first_index, image.last_index
    while lo < hi:                      # the first index whose record starts at or after pos
        mid = (lo + hi) // 2
        if cl.position_of(mid) < pos:
            lo = mid + 1
        else:
            hi = mid
    p = cl.position_of(lo)
    if p != pos:
        S = cl.segment_size_bytes
        prev_end = cl.position_of(lo - 1) + cl.size_of(lo - 1) if lo > image.first_index else -1
        if p < pos or prev_end != pos or p % S or p // S == pos // S:
            raise ReplicationError(f"read_image: offset {offset} is not a record boundary")
    view, count = cl.read(lo, image.last_index + 1, max_bytes)
    if count < 1:
        raise ReplicationError("read_image: the log no longer holds this image")
    return view, p + len(view) - pos


# -- the follower's staging -------------------------------------------------------------------
def _fsync_dir(d: str) -> None:
    fsync_dir(d)


def _write_json(path: str, obj: dict) -> None:
    write_checked_json(path, obj)


def _read_json(path: str) -> dict | None:
    return read_checked_json(path)


def check_image(image: InstallImage, segment_size_bytes: int, max_install_bytes: int) -> dict:
    """A follower's checks of an image before staging it -> its description; InstallRefused
    Error (the follower answers UNSUPPORTED: this log can never install it)."""
    try:
        d = parse_image_meta(image)
    except InstallError as exc:
        raise InstallRefusedError(str(exc)) from None
    if d["segment_size"] != segment_size_bytes:
        raise InstallRefusedError(f"install image of segment size {d['segment_size']}; this "
                                  f"log's is {segment_size_bytes}")
    if d["start"] % segment_size_bytes:
        raise InstallRefusedError(f"install image starts at position {d['start']}, not a "
                                  "segment start")
    if not 1 <= image.first_index <= image.last_index:
        raise InstallRefusedError(f"install image [{image.first_index}..{image.last_index}] is "
                                  "empty")
    if not 0 < image.total_bytes <= max_install_bytes:
        raise InstallRefusedError(f"install image of {image.total_bytes} bytes outside "
                                  f"1..{max_install_bytes} (max_install_bytes)")
    return d


class Stager:
    """Stages one image in <path>/install/ (see the module docstring). Not thread-safe."""

    def __init__(self, path: str, image: InstallImage, head_config, *, segment_size_bytes: int,
                 index_file_entries: int, max_message_bytes: int,
                 max_install_bytes: int = DEFAULT_MAX_INSTALL_BYTES):
        d = check_image(image, segment_size_bytes, max_install_bytes)
        self.image = image
        self.desc = d
        self.start = d["start"]
        self.head_config = (tuple(head_config[0]), tuple(head_config[1]))
        self.next_offset = 0
        self.dir = os.path.join(path, INSTALL_DIR)
        if os.path.exists(os.path.join(self.dir, READY_FILE)):
            raise StorageError(f"{self.dir}: a finished install has not replaced the log yet "
                               "(reopen the log to complete it)", self.dir)
        discard_staging(path)
        os.makedirs(os.path.join(self.dir, "commitlog"))
        # an empty log at the image's first position and index (recovery's "empty after
        # retention" case: flushed position = min position, flushed index = first - 1)
        cp = Checkpoint(1, self.start, image.first_index - 1, 0, self.start, self.start,
                        self.start, segment_size_bytes, index_file_entries,
                        int(time.time() * 1000))
        with open(os.path.join(self.dir, "checkpoint"), "wb") as fh:
            fh.write(encode_checkpoint(cp))
        self.cl = CommitLog(self.dir, segment_size_bytes=segment_size_bytes,
                            index_file_entries=index_file_entries, flush="async",
                            max_message_bytes=max_message_bytes, preallocate_next=False)
        if self.cl.end_position != self.start or self.cl.last_index != image.first_index - 1:
            self.abort()
            raise StorageError(f"{self.dir}: the staging log did not open empty at position "
                               f"{self.start}, index {image.first_index}", self.dir)

    def write_chunk(self, offset: int, chunk) -> int:
        """Stage `chunk` at image byte `offset` -> the next offset. InstallError (a
        ReplicationError) for anything wrong, with nothing staged."""
        if offset != self.next_offset:
            raise InstallError(f"write_chunk: offset {offset}, expected {self.next_offset}")
        try:
            n = memoryview(chunk).nbytes
        except TypeError:
            raise InstallError(f"write_chunk: a chunk is bytes-like, not "
                               f"{type(chunk).__name__}") from None
        if not 0 < n <= MAX_INSTALL_CHUNK_BYTES:
            raise InstallError(f"write_chunk: chunk of {n} bytes outside "
                               f"1..{MAX_INSTALL_CHUNK_BYTES}")
        cl = self.cl
        before = cl.last_index
        try:
            last = cl.append_replicated(chunk)     # validates every record; all or nothing
        except ReplicationError as exc:
            raise InstallError(f"write_chunk at offset {offset}: {exc}") from None
        nxt = cl.end_position - self.start
        if last > self.image.last_index or nxt > self.image.total_bytes:
            cl.truncate_after(before)
            raise InstallError(f"write_chunk at offset {offset}: the chunk goes past the image "
                               f"(index {last} > {self.image.last_index} or offset {nxt} > "
                               f"{self.image.total_bytes})")
        self.next_offset = nxt
        crash_point("chunk-staged")
        return nxt

    def finish(self) -> dict:
        """Check the whole image, make it durable and write READY (the commit point) -> the
        READY record. InstallError (the staging dropped) if the image does not check out."""
        im, cl = self.image, self.cl
        try:
            if self.next_offset != im.total_bytes:
                raise InstallError(f"finish_install: the image is incomplete ({self.next_offset} "
                                   f"of {im.total_bytes} bytes)")
            if cl.last_index != im.last_index or cl.term_at(im.last_index) != im.last_term:
                raise InstallError("finish_install: the staged log does not end at the image's "
                                   "last entry and term")
            cl.flush()
            crc = segment_bytes_crc(os.path.join(self.dir, "commitlog"),
                                    cl.segment_size_bytes, self.start,
                                    self.start + im.total_bytes)
            if crc != self.desc["crc32c"]:
                raise InstallError(f"finish_install: image CRC32C {crc:#010x}, the leader's is "
                                   f"{self.desc['crc32c']:#010x}")
        except BaseException:
            self.abort()
            raise
        cl.close()            # flushed, clean checkpoint, raft index synced
        ready = {"first_index": im.first_index, "prev_term": im.prev_term,
                 "last_index": im.last_index, "last_term": im.last_term,
                 "total_bytes": im.total_bytes, "start": self.start,
                 "voters": list(self.head_config[0]), "learners": list(self.head_config[1]),
                 "producers": [list(p) for p in im.producers], "store": self.desc["store"]}
        for name in ("LOCK", "abort"):
            try:
                os.unlink(os.path.join(self.dir, name))
            except FileNotFoundError:
                pass
        _fsync_dir(os.path.join(self.dir, "commitlog"))
        _fsync_dir(self.dir)
        crash_point("before-ready")
        _write_json(os.path.join(self.dir, READY_FILE), ready)   # the commit point
        return ready

    def abort(self) -> None:
        """Drop the staging (nothing of it was visible)."""
        try:
            if not self.cl.closed:
                self.cl.close()
        except AttributeError:
            pass
        discard_staging(os.path.dirname(self.dir))


def discard_staging(path: str) -> None:
    """Remove <path>/install/ unless it holds a complete image (READY)."""
    d = os.path.join(path, INSTALL_DIR)
    if os.path.isdir(d) and not os.path.exists(os.path.join(d, READY_FILE)):
        shutil.rmtree(d)
        _fsync_dir(path)


# -- replacing the log ------------------------------------------------------------------------
def crash_point(name: str) -> None:
    """Test hook: SIGKILL this process at the named step when QUORUMLOG_INSTALL_CRASH_AT
    names it."""
    if os.environ.get("QUORUMLOG_INSTALL_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def complete_install(path: str, derived=(), write_store_meta=None) -> dict | None:
    """Run while no log is open on `path`: finish (READY) or drop (no READY) an install the
    directory holds -> the READY record when the log was replaced, else None.

    Every step can run again after a crash: the entries named in `derived` (state derived
    from the old log) are removed, then each of index/, checkpoint, commitlog/ still in
    install/ replaces the live one (commitlog/ last), then log_head.json is written and
    `write_store_meta(path, ready["store"])` restores the store's metadata, then READY and
    install/ go."""
    d = os.path.join(path, INSTALL_DIR)
    if not os.path.isdir(d):
        return None
    ready_path = os.path.join(d, READY_FILE)
    ready = _read_json(ready_path)          # (written atomically: damage is CorruptLogError)
    if ready is None:
        log.warning("%s: dropping an unfinished install (the log stays as it was)", path)
        discard_staging(path)
        return None
    log.warning("%s: replacing the log by the installed image [%d..%d]", path,
                ready["first_index"], ready["last_index"])
    for name in derived:
        _remove(os.path.join(path, name))
    crash_point("derived-removed")
    for name in _LOG_FILES:
        src = os.path.join(d, name)
        if os.path.exists(src):
            _remove(os.path.join(path, name))
            crash_point(f"before-move-{name}")
            os.rename(src, os.path.join(path, name))
            _fsync_dir(path)
            crash_point(f"moved-{name}")
    _write_json(os.path.join(path, HEAD_FILE),
                {k: ready[k] for k in ("first_index", "prev_term", "voters", "learners",
                                       "producers")})
    if write_store_meta is not None:
        write_store_meta(path, ready["store"])
    crash_point("meta-written")
    os.unlink(ready_path)
    crash_point("ready-removed")
    _fsync_dir(d)
    shutil.rmtree(d)
    _fsync_dir(path)
    return ready


def _remove(p: str) -> None:
    if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p)
    elif os.path.lexists(p):
        os.unlink(p)


def read_head(path: str) -> dict | None:
    """The head state an install or retention left (log_head.json), or None. An install's
    names the configuration as "voters" and "learners"; retention's as "config", the body of
    the last CONFIG record it deleted (the store does not decode CONFIG bodies: consensus
    does, node/driver.py config_history)."""
    try:
        return _read_json(os.path.join(path, HEAD_FILE))
    except CorruptLogError as exc:
        log.error("%s", exc)
        return None


def keep_head(cl: CommitLog, position: int) -> None:
    """Before the segments below `position` (a segment start) go: when they hold a CONFIG
    record, make durable a head saying the configuration in force before the log's new first
    index (the last CONFIG record below it), so the configurations rebuilt at the next start
    stay the same from there on. Without one the old head (or the initial voters) still says
    it. The head also carries `position`: it is the deletion's intent, which
    finish_head_drop completes when a crash came between this write and the deletion."""
    end = cl.end_position
    first = (int(cl.scan(position, end, 1)[0]["index"][0]) if position < end
             else cl.last_index + 1)
    below = cl.indexes_of_type(CONFIG, cl.first_index, first - 1).tolist()   # (those going)
    if not below:
        return
    p = cl.position_of(below[-1])
    info, _ = cl.scan(p, p + cl.size_of(below[-1]), 1)
    off, n = int(info["body_offset"][0]), int(info["body_len"][0])
    old = read_head(cl.path) or {}
    _write_json(os.path.join(cl.path, HEAD_FILE),
                {"first_index": first, "prev_term": int(cl.term_at(first - 1)),
                 "config": bytes(cl.record_at(p)[off:off + n]).decode(),
                 "producers": old.get("producers", []), "position": position})
    crash_point("retention-head-written")


def finish_head_drop(cl: CommitLog) -> None:
    """At a writable open: complete a deletion whose head keep_head wrote but which a crash
    cut short (the log still starts below the head's first index)."""
    head = read_head(cl.path)
    if head is not None and "position" in head and cl.first_index < head["first_index"]:
        log.warning("%s: completing a retention cut short (log head %d)", cl.path,
                    head["first_index"])
        cl.delete_segments_before(head["position"])
