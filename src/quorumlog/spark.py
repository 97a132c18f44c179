"""Read a quorumlog store directory into a Spark DataFrame, with no broker running.

    spark = quorumlog.spark.session()                     # local session, jar on spark.jars
    df = quorumlog.spark.read_store(spark, "/data/store", topics=["orders"])

Two readers with the same schema and the same rows:

* the JVM reader (default when the jar is on the session's classpath): the Hadoop
  InputFormat/RecordReader in quorumlog-spark.jar (spark/), driven by a DataSource V2 that
  builds columnar batches on the JVM -- records never pass through Python;
* the fallback, a Spark 4 Python Data Source (`spark.read.format("quorumlog")`), which scans
  segment files with numpy (record positions from the raft index, headers gathered and
  checked as arrays, CRC32C computed lane-parallel in numpy) and yields Arrow batches. It
  needs no jar and no native extension, only local (POSIX) paths.

Both stop at the checkpoint's committed position, skip BLANK/NOOP/CONFIG/META records, check
every record's CRC32C and fail with the file and offset of a bad record (or skip and count it
with on_corrupt="skip").
"""
from __future__ import annotations

import bisect
import logging
import os
import pathlib
import struct
import sys
from typing import Iterable, Iterator, Sequence

import numpy as np

from . import format as fmt
from .errors import CorruptLogError, InvalidArgumentError, InvalidTopicError

log = logging.getLogger(__name__)

JAR_NAME = "quorumlog-spark.jar"
JVM_SOURCE = "io.quorumlog.spark.QuorumlogSource"
PY_SOURCE_NAME = "quorumlog"
DEFAULT_SPLIT_BYTES = 32 << 20       # Hadoop's local block size: the JVM reader's default too
MIN_SPLIT_BYTES = 4096               # QuorumlogInputFormat.MIN_SPLIT_BYTES
BATCH_MAX_RECORDS = 65536
BATCH_MAX_BYTES = 8 << 20

COLUMNS = ("topic", "queue_id", "queue_offset", "raft_index", "term", "position",
           "born_timestamp", "store_timestamp", "tags", "keys", "properties", "body")

__all__ = ["read_store", "session", "jar_path", "scan_split", "plan_splits", "Split",
           "QuorumlogDataSource", "spark_schema", "COLUMNS"]


def spark_schema():
    """The DataFrame schema both readers produce (QuorumlogSource.SCHEMA on the JVM)."""
    from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, MapType,
                                   StringType, StructField, StructType, TimestampType)

    return StructType([
        StructField("topic", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("raft_index", LongType(), False),
        StructField("term", LongType(), False),
        StructField("position", LongType(), False),
        StructField("born_timestamp", TimestampType(), False),
        StructField("store_timestamp", TimestampType(), False),
        StructField("tags", StringType(), True),
        StructField("keys", ArrayType(StringType(), False), False),
        StructField("properties", MapType(StringType(), StringType(), False), False),
        StructField("body", BinaryType(), False),
    ])


def jar_path() -> pathlib.Path | None:
    """The jar shipped inside the package (built at install time), or None."""
    p = pathlib.Path(__file__).resolve().parent / JAR_NAME
    return p if p.is_file() else None


# --------------------------------------------------------------------------------------------
# Sessions and the public entry point


def session(app_name: str = "quorumlog", *, master: str = "local[*]", conf: dict | None = None,
            jar: bool = True):
    """A SparkSession with the quorumlog jar on spark.jars and the Python source registered.

    The jar must be on the classpath when the JVM starts: if a session already exists in this
    process it is returned as is (Spark reuses it), with a warning when it lacks the jar."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers (the fallback reader) must run this interpreter: it has quorumlog.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.appName(app_name).master(master)
               .config("spark.ui.showConsoleProgress", "false"))
    j = jar_path() if jar else None
    if j is not None:
        builder = builder.config("spark.jars", str(j))
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if j is not None and not _jvm_reader_available(spark):
        log.warning("quorumlog: the active Spark session was started without %s; "
                    "read_store will use the Python data source", j)
    register(spark)
    return spark


def register(spark) -> None:
    """Registers the Python data source as spark.read.format("quorumlog")."""
    spark.dataSource.register(_datasource_class())


def _datasource_class():
    cls = globals().get("QuorumlogDataSource")
    if cls is None:
        cls = globals()["QuorumlogDataSource"] = _lazy_datasource()
    return cls


def _jvm_reader_available(spark) -> bool:
    try:
        jvm = spark.sparkContext._jvm
        return str(jvm.io.quorumlog.spark.QuorumlogSpark.version()) == "1"
    except Exception:  # py4j raises its own errors for a class that is not there
        return False


def _check_topics(topics) -> list[str] | None:
    if topics is None:
        return None
    if isinstance(topics, (str, bytes)):
        raise InvalidArgumentError("topics must be a sequence of topic names, not one string")
    out = []
    for t in topics:
        if not isinstance(t, str) or not t or "/" in t or "\0" in t \
                or len(t.encode("utf-8")) > fmt.MAX_TOPIC_BYTES:
            raise InvalidTopicError(f"invalid topic name {t!r}")
        out.append(t)
    return out


def read_store(spark, path, *, topics: Sequence[str] | None = None, committed_only: bool = True,
               split_bytes: int | None = None, on_corrupt: str = "fail", engine: str = "auto"):
    """DataFrame of the MESSAGE records of the store at `path`, in log order per split.

    topics: only these topics (filtered inside the reader). committed_only: stop at the
    checkpoint's committed position (False: read to the end of the intact log).
    split_bytes: bytes of segment per Spark partition (default 32 MiB). on_corrupt: "fail"
    (default; CorruptLogError / a failed task naming file and offset) or "skip".
    engine: "jvm", "python" or "auto" (the jar's reader when the session has it)."""
    topics = _check_topics(topics)
    if on_corrupt not in ("fail", "skip"):
        raise InvalidArgumentError("on_corrupt must be 'fail' or 'skip'")
    if engine not in ("auto", "jvm", "python"):
        raise InvalidArgumentError("engine must be 'auto', 'jvm' or 'python'")
    if split_bytes is not None and (not isinstance(split_bytes, int) or split_bytes <= 0):
        raise InvalidArgumentError("split_bytes must be a positive int")
    path = os.fspath(path)
    use_jvm = engine == "jvm" or (engine == "auto" and _jvm_reader_available(spark))
    if use_jvm:
        from pyspark.sql import DataFrame

        jvm = spark.sparkContext._jvm
        jtopics = None
        if topics is not None:
            jtopics = jvm.java.util.ArrayList()
            for t in topics:
                jtopics.add(t)
        jdf = jvm.io.quorumlog.spark.QuorumlogSpark.readStore(
            spark._jsparkSession, path, jtopics, bool(committed_only),
            int(split_bytes or DEFAULT_SPLIT_BYTES), on_corrupt)
        return DataFrame(jdf, spark)
    register(spark)
    r = (spark.read.format(PY_SOURCE_NAME)
         .option("committedOnly", str(bool(committed_only)).lower())
         .option("splitBytes", str(int(split_bytes or DEFAULT_SPLIT_BYTES)))
         .option("onCorrupt", on_corrupt))
    if topics is not None:
        r = r.option("topics", "/".join(topics))
    return r.load(path)


# --------------------------------------------------------------------------------------------
# Store metadata and split planning (the same rules as QuorumlogInputFormat.planSplits)


class Split:
    """A byte range [start, end) of one segment file plus the read limits frozen at planning."""

    __slots__ = ("root", "segment", "base", "start", "end", "limit", "committed",
                 "index_file_entries")

    def __init__(self, root, segment, base, start, end, limit, committed, index_file_entries):
        self.root, self.segment, self.base = root, segment, base
        self.start, self.end = start, end
        self.limit, self.committed, self.index_file_entries = limit, committed, index_file_entries

    def __repr__(self):
        return f"Split({self.segment}, {self.start}, {self.end}, limit={self.limit})"


def _read_checkpoint(root: str):
    p = os.path.join(root, "checkpoint")
    try:
        with open(p, "rb") as f:
            data = f.read(fmt.CHECKPOINT_SIZE + 1)
    except FileNotFoundError:
        return None
    return fmt.decode_checkpoint(data, path=p)


def _numbered(dirpath: str) -> list[int]:
    try:
        names = os.listdir(dirpath)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if len(n) == 20 and n.isdigit())


def plan_splits(root, *, committed_only: bool = True, split_bytes: int = DEFAULT_SPLIT_BYTES
                ) -> list[Split]:
    root = os.fspath(root)
    cp = _read_checkpoint(root)
    committed = cp.committed_position if cp is not None else 0
    limit = committed if committed_only else (1 << 63) - 1
    entries = cp.index_file_entries if cp is not None else 0
    have_index = cp is not None and bool(_numbered(os.path.join(root, "index")))
    size = max(split_bytes, MIN_SPLIT_BYTES) if have_index else (1 << 63) - 1
    out = []
    for base in _numbered(os.path.join(root, "commitlog")):
        if base >= limit:
            break
        seg = os.path.join(root, "commitlog", fmt.segment_name(base))
        n = min(os.path.getsize(seg), limit - base)
        off = 0
        while off < n:
            out.append(Split(root, seg, base, off, min(off + size, n), limit, committed, entries))
            off += size
    return out


_INDEX_DTYPE = np.dtype([("position", "<u8"), ("term", "<u8"), ("size", "<u4"), ("type", "u1"),
                         ("pad", "V3")])


class _RaftIndex:
    """All raft index entries of a store as one (lazily concatenated) numpy view."""

    def __init__(self, root: str, entries_per_file: int):
        self.root = root
        self.n = entries_per_file
        self.firsts = _numbered(os.path.join(root, "index"))
        self._arrays = {}

    def entries(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, int, int]:
        """(positions, sizes, raft index of positions[0], count) of the used entries from the
        first at or after log position lo; `count` of them lie before hi, and one more (the
        record that follows, if any) is included. Files are memory-mapped and bisected, so a
        split reads O(log n) index pages plus its own entries."""
        pos_parts, size_parts = [], []
        first_index = None
        count = 0
        expect = self.firsts[0] if self.firsts else 1
        done = False
        for f in self.firsts:
            if f != expect or done:
                break  # a missing index file: entries after the gap cannot be numbered
            expect = f + self.n
            p = os.path.join(self.root, "index", fmt.index_file_name(f))
            if os.path.getsize(p) < _INDEX_DTYPE.itemsize:
                break
            mm = np.memmap(p, dtype=_INDEX_DTYPE, mode="r")
            sizes = mm["size"]
            # used entries form a prefix: bisect for its end
            used = bisect.bisect_left(range(len(mm)), True, key=lambda i: sizes[i] == 0)
            if used == 0:
                break
            posv = mm["position"][:used]
            if int(posv[used - 1]) < lo:
                if used < len(mm):
                    break
                continue
            a = bisect.bisect_left(posv, lo) if first_index is None else 0
            b = bisect.bisect_left(posv, hi, lo=a)
            take = min(used, b + 1)  # plus the record that follows
            if first_index is None:
                first_index = f + a
            pos_parts.append(np.array(posv[a:take], dtype=np.uint64))
            size_parts.append(np.array(sizes[a:take], dtype=np.uint32))
            count += b - a
            del mm, sizes, posv
            if take > b or used < self.n:
                done = True
        if first_index is None:
            return np.zeros(0, np.uint64), np.zeros(0, np.uint32), 1, 0
        return np.concatenate(pos_parts), np.concatenate(size_parts), first_index, count


# --------------------------------------------------------------------------------------------
# CRC32C in numpy, many records at once


def _crc_tables():
    t0 = np.zeros(256, np.uint32)
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t0[b] = c
    tabs = [t0]
    for _ in range(3):  # slicing-by-4 tables
        prev = tabs[-1]
        tabs.append((prev >> np.uint32(8)) ^ t0[prev & np.uint32(0xFF)])
    return tabs


_T0, _T1, _T2, _T3 = _crc_tables()
_LANE = 256  # bytes per lane; a record is split into ceil(n / _LANE) lanes


def _shift_tables(nbytes: int):
    """4 × 256 tables applying 'feed nbytes zero bytes' to a raw (init 0) CRC register."""
    cols = np.array([1 << i for i in range(32)], np.uint32)
    v = cols.copy()
    words, rest = divmod(nbytes, 4)
    for _ in range(words):
        v = _T3[v & 0xFF] ^ _T2[(v >> 8) & 0xFF] ^ _T1[(v >> 16) & 0xFF] ^ _T0[v >> 24]
    for _ in range(rest):
        v = _T0[v & 0xFF] ^ (v >> np.uint32(8))
    # v[i] = image of bit i; table k maps byte b of the register to xor of its bits' images.
    bits = ((np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1).astype(bool)
    out = []
    for k in range(4):
        img = v[8 * k:8 * k + 8]
        out.append(np.bitwise_xor.reduce(np.where(bits, img[None, :], np.uint32(0)), axis=1))
    return out


_SHIFT_LANE = _shift_tables(_LANE)


def crc32c_many(region: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """CRC32C of region[starts[i] : starts[i] + lengths[i]] for every i (lengths >= 4).

    Each message is cut into 256-byte lanes (the first one short and zero-padded in front,
    which leaves a raw CRC unchanged); all lanes of all messages run through a slicing-by-4
    table loop together, then each message's lanes are folded with a 'shift by 256 zero
    bytes' operator. The 0xFFFFFFFF initial value is applied by inverting the first 4 data
    bytes (equivalent for the reflected CRC), the final XOR at the end."""
    n = len(starts)
    if n == 0:
        return np.zeros(0, np.uint32)
    starts = starts.astype(np.int64)
    lengths = lengths.astype(np.int64)
    nlanes = (lengths + _LANE - 1) // _LANE
    pad = nlanes * _LANE - lengths                        # zero bytes in front of lane 0
    lane_first = np.zeros(n + 1, np.int64)
    np.cumsum(nlanes, out=lane_first[1:])
    total_lanes = int(lane_first[-1])
    rec_of_lane = np.repeat(np.arange(n), nlanes)
    k_in_rec = np.arange(total_lanes) - lane_first[:-1][rec_of_lane]
    lane_start = starts[rec_of_lane] - pad[rec_of_lane] + k_in_rec * _LANE
    # Padded source so that a first lane reaching before region[0] reads zeros.
    src = np.concatenate([np.zeros(_LANE, np.uint8), region])
    # The 4 first bytes of each message take the 0xFFFFFFFF initial value (messages never
    # overlap, so this can be done on the copy in place).
    src[(starts + _LANE)[:, None] + np.arange(4)[None, :]] ^= 0xFF
    win = np.lib.stride_tricks.sliding_window_view(src, _LANE)
    lanes = win[lane_start + _LANE].copy()                # (total_lanes, 256)
    first = lane_first[:-1]
    col = np.arange(_LANE)
    lanes[first] = np.where(col[None, :] < pad[:, None], 0, lanes[first])
    words = lanes.view("<u4").T.copy()                     # (64, total_lanes), contiguous rows
    c = np.zeros(total_lanes, np.uint32)
    for w in words:
        c ^= w
        c = _T3[c & 0xFF] ^ _T2[(c >> 8) & 0xFF] ^ _T1[(c >> 16) & 0xFF] ^ _T0[c >> 24]
    # Fold lanes per record: reg = shift(reg) ^ lane, records ordered by lane count (desc) so
    # the active ones form a growing prefix.
    order = np.argsort(-nlanes, kind="stable")
    nl_sorted = nlanes[order]
    maxn = int(nl_sorted[0])
    reg = np.zeros(n, np.uint32)
    S0, S1, S2, S3 = _SHIFT_LANE
    for t in range(maxn):
        # record order[j] is active from step maxn - nl_sorted[j]
        active = int(np.searchsorted(-nl_sorted, -(maxn - t), side="right"))
        idx = order[:active]
        r = reg[:active]
        r = S0[r & 0xFF] ^ S1[(r >> 8) & 0xFF] ^ S2[(r >> 16) & 0xFF] ^ S3[r >> 24]
        lane = first[idx] + (t - (maxn - nl_sorted[:active]))
        reg[:active] = r ^ c[lane]
    out = np.empty(n, np.uint32)
    out[order] = reg ^ np.uint32(0xFFFFFFFF)
    return out


def _native_crc32c():
    """The engine's CRC32C (SSE4.2) when the native extension is built, else None."""
    if os.environ.get("QUORUMLOG_SPARK_NUMPY_CRC"):
        return None
    try:
        from .commitlog import crc32c
    except ImportError:
        return None
    return crc32c


def _crc_records(region: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """CRC32C per record: the native function in a loop when it is built (one C call per
    record beats 64 numpy passes), else crc32c_many -- same results, tested both ways."""
    native = _native_crc32c()
    if native is None:
        return crc32c_many(region, starts, lengths)
    mv = memoryview(region)
    return np.fromiter((native(mv[s:s + n]) for s, n in zip(starts.tolist(), lengths.tolist())),
                       np.uint32, len(starts))


# --------------------------------------------------------------------------------------------
# The numpy scan of one split

_HDR = np.dtype([("crc", "<u4"), ("total_size", "<u4"), ("magic", "<u2"), ("version", "u1"),
                 ("type", "u1"), ("flags", "<u4"), ("raft_index", "<u8"), ("raft_term", "<u8"),
                 ("position", "<u8"), ("queue_offset", "<u8"), ("born_ts", "<i8"),
                 ("store_ts", "<i8"), ("tag_hash", "<i8"), ("queue_id", "<u4"),
                 ("topic_len", "<u2"), ("tags_len", "<u2"), ("keys_len", "<u4"),
                 ("props_len", "<u4"), ("body_len", "<u4"), ("reserved", "<u4")])
assert _HDR.itemsize == fmt.HEADER_SIZE


def _concat_slices(region: np.ndarray, starts: np.ndarray, lens: np.ndarray):
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


class _Bad(Exception):
    pass


def scan_split(split: Split, *, topics: Sequence[str] | None = None, on_corrupt: str = "fail",
               stats: dict | None = None) -> Iterator[dict]:
    """Yields column dicts (numpy arrays / lists) of the split's MESSAGE records in batches.

    Record positions come from the raft index; every record's header is validated against
    its index entry and against format.md, records are checked to be contiguous, and every
    CRC32C is computed. Bad records before the committed position raise CorruptLogError
    (path, offset) or are skipped and counted (on_corrupt="skip"); at or after it they end
    the segment (torn tail)."""
    stats = stats if stats is not None else {}
    stats.setdefault("skipped", 0)
    topic_set = None if topics is None else {t.encode("utf-8") for t in topics}
    lo = split.base + split.start
    hi = min(split.base + split.end, split.limit)
    seg_size = os.path.getsize(split.segment)
    seg_end = split.base + seg_size
    if hi <= lo:
        return
    if split.index_file_entries <= 0 or not _numbered(os.path.join(split.root, "index")):
        yield from _scan_walk(split, topic_set, on_corrupt, stats)
        return
    positions, sizes, first_index, b = _RaftIndex(split.root, split.index_file_entries
                                                  ).entries(lo, hi)
    a = 0
    if b == 0:
        return
    # Read the split's records (plus the next header, for the BLANK check) in one go: at most
    # split_bytes + one record; no mmap, so nothing pins the file after an error.
    rbase = int(positions[a])
    rend = min(seg_end, int(positions[b - 1]) + int(sizes[b - 1]) + fmt.HEADER_SIZE)
    with open(split.segment, "rb") as f:
        f.seek(rbase - split.base)
        seg = np.frombuffer(f.read(max(0, rend - rbase)), np.uint8)
    i = a
    while i < b:
        # One batch: consecutive records, bounded in count and bytes.
        j = min(b, i + BATCH_MAX_RECORDS)
        cum = np.cumsum(sizes[i:j].astype(np.int64))
        j = i + max(1, int(np.searchsorted(cum, BATCH_MAX_BYTES, side="right")))
        try:
            batch = _scan_batch(split, seg, rbase, positions, sizes, first_index, i, j, seg_end,
                                topic_set)
            i = j
            if batch is not None:
                yield batch
        except _Bad as e:
            bad_i, reason = e.args
            bad_pos = int(positions[bad_i])
            # Records before the bad one in this batch are good: return them first.
            if bad_i > i:
                batch = _scan_batch(split, seg, rbase, positions, sizes, first_index, i, bad_i,
                                    seg_end, topic_set)
                if batch is not None:
                    yield batch
            if bad_pos >= split.committed:
                log.info("quorumlog: %s offset %d (%s) is past the committed position: "
                         "torn tail", split.segment, bad_pos - split.base, reason)
                return
            if on_corrupt != "skip":
                raise CorruptLogError(
                    f"quorumlog: corrupt data in {split.segment} at offset "
                    f"{bad_pos - split.base}: {reason}", split.segment, bad_pos - split.base)
            stats["skipped"] += 1
            log.warning("quorumlog: skipping corrupt record in %s at offset %d: %s",
                        split.segment, bad_pos - split.base, reason)
            i = bad_i + 1
    _check_tail_blank(split, seg, rbase, positions, sizes, b, hi, seg_end, on_corrupt, stats)


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
    h = seg[roff:roff + fmt.HEADER_SIZE].tobytes()
    crc, total, magic, version, rtype = struct.unpack_from("<IIHBB", h)
    (field_pos,) = struct.unpack_from("<Q", h, 32)
    why = None
    if magic != fmt.MAGIC or version != fmt.FORMAT_VERSION:
        why = "bad magic/version"
    elif rtype != fmt.TYPE_BLANK:
        why = "unindexed record after the last indexed one"
    elif total != seg_end - end or field_pos != end:
        why = "BLANK does not fill the segment tail"
    elif fmt.crc32c(h[4:]) != crc:  # a BLANK's CRC covers its header only
        why = "CRC32C mismatch"
    if why is None or end >= split.committed:
        return
    if on_corrupt != "skip":
        raise CorruptLogError(f"quorumlog: corrupt data in {split.segment} at offset {off}: "
                              f"{why}", split.segment, off)
    stats["skipped"] += 1


def _scan_batch(split, seg, rbase, positions, sizes, first_index, i, j, seg_end, topic_set):
    pos = positions[i:j].astype(np.int64)
    size = sizes[i:j].astype(np.int64)
    off = pos - rbase
    n = j - i
    if int(pos[0]) < split.base or int(pos[-1] + size[-1]) > seg_end:
        raise _Bad(i if int(pos[0]) < split.base else j - 1, "raft index points outside the segment")
    hdr_idx = off[:, None] + np.arange(fmt.HEADER_SIZE)[None, :]
    if int(off[-1] + size[-1]) > len(seg):
        raise _Bad(j - 1, "record runs past the end of the file")
    h = seg[hdr_idx].view(_HDR).reshape(n)
    raft = np.arange(i, j, dtype=np.int64) + first_index
    var = (h["topic_len"].astype(np.int64) + h["tags_len"] + h["keys_len"].astype(np.int64)
           + h["props_len"] + h["body_len"])
    ok = ((h["magic"] == fmt.MAGIC) & (h["version"] == fmt.FORMAT_VERSION)
          & (h["type"] >= fmt.TYPE_MESSAGE) & (h["type"] < fmt.TYPE_BLANK)
          & (h["total_size"].astype(np.int64) == size) & (h["position"].astype(np.int64) == pos)
          & (h["raft_index"].astype(np.int64) == raft) & (var + fmt.HEADER_SIZE == size)
          & ((h["type"] != fmt.TYPE_MESSAGE) | (h["topic_len"] > 0)))
    if n > 1:  # contiguous: no bytes between records that nobody accounted for
        ok[1:] &= pos[1:] == pos[:-1] + size[:-1]
    crc = _crc_records(seg, off + 4, np.where(ok, size - 4, 4))
    ok &= crc == h["crc"]
    if not ok.all():
        k = int(np.argmin(ok))
        raise _Bad(i + k, _reason(h[k], int(pos[k]), int(size[k]), int(raft[k]),
                                  bool(crc[k] == h["crc"][k])))
    keep = h["type"] == fmt.TYPE_MESSAGE
    toff = off + fmt.HEADER_SIZE
    tlen = h["topic_len"].astype(np.int64)
    if topic_set is not None:
        want = np.zeros(n, bool)
        for t in topic_set:
            m = keep & (tlen == len(t))
            if m.any():
                cand = np.flatnonzero(m)
                got = seg[toff[cand][:, None] + np.arange(len(t))[None, :]]
                want[cand[(got == np.frombuffer(t, np.uint8)[None, :]).all(axis=1)]] = True
        keep &= want
    sel = np.flatnonzero(keep)
    if len(sel) == 0:
        return None
    h = h[sel]
    off, toff, tlen = off[sel], toff[sel], tlen[sel]
    glen = h["tags_len"].astype(np.int64)
    klen = h["keys_len"].astype(np.int64)
    plen = h["props_len"].astype(np.int64)
    blen = h["body_len"].astype(np.int64)
    koff = toff + tlen + glen
    poff = koff + klen
    boff = poff + plen
    return {
        "topic": _concat_slices(seg, toff, tlen),
        "queue_id": h["queue_id"].astype(np.int32),
        "queue_offset": h["queue_offset"].astype(np.int64),
        "raft_index": h["raft_index"].astype(np.int64),
        "term": h["raft_term"].astype(np.int64),
        "position": h["position"].astype(np.int64),
        "born_timestamp": h["born_ts"] * 1000,
        "store_timestamp": h["store_ts"] * 1000,
        "tags": (_concat_slices(seg, toff + tlen, glen), glen > 0),
        "keys": _decode_lists(seg, koff, klen, pairs=False, path=split.segment,
                              rec_off=off + (rbase - split.base)),
        "properties": _decode_lists(seg, poff, plen, pairs=True, path=split.segment,
                                    rec_off=off + (rbase - split.base)),
        "body": _concat_slices(seg, boff, blen),
    }


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


def _decode_lists(seg, offs, lens, *, pairs, path, rec_off):
    """keys (lists of str) or properties (lists of (k, v)) as (n, {row: items}) -- only the
    records that have any are decoded (in Python); to_arrow builds the offsets in numpy."""
    out = {}
    for r in np.flatnonzero(lens):
        p, end = int(offs[r]), int(offs[r] + lens[r])
        items = []
        while p < end:
            if p + 2 > end:
                raise CorruptLogError("malformed keys/properties field", path, int(rec_off[r]))
            (k,) = struct.unpack_from("<H", seg, p)
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


def _scan_walk(split, topic_set, on_corrupt, stats):
    """No raft index: a split covers a whole segment; walk it record by record (reference
    decoder), slower but exact."""
    with open(split.segment, "rb") as f:
        data = f.read()
    pos = split.base
    end = min(split.base + len(data), split.limit)
    rows = []
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
        if rec.type == fmt.TYPE_MESSAGE and (topic_set is None
                                             or rec.topic.encode() in topic_set):
            rows.append(rec)
    if rows:
        yield _columns_from_records(rows)


def _columns_from_records(rows) -> dict:
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


# --------------------------------------------------------------------------------------------
# Arrow and the Python Data Source


def _arrow_schema():
    import pyarrow as pa

    return pa.schema([
        pa.field("topic", pa.string(), False),
        pa.field("queue_id", pa.int32(), False),
        pa.field("queue_offset", pa.int64(), False),
        pa.field("raft_index", pa.int64(), False),
        pa.field("term", pa.int64(), False),
        pa.field("position", pa.int64(), False),
        pa.field("born_timestamp", pa.timestamp("us", tz="UTC"), False),
        pa.field("store_timestamp", pa.timestamp("us", tz="UTC"), False),
        pa.field("tags", pa.string(), True),
        pa.field("keys", pa.list_(pa.field("element", pa.string(), False)), False),
        pa.field("properties", pa.map_(pa.string(), pa.field("value", pa.string(), False)),
                 False),
        pa.field("body", pa.binary(), False),
    ])


def to_arrow(cols: dict):
    """A pyarrow.RecordBatch (quorumlog schema) from scan_split's column dict."""
    import pyarrow as pa

    schema = _arrow_schema()

    def varlen(typ, od, valid=None):
        offsets, data = od
        n = len(offsets) - 1
        vbuf = None
        if valid is not None and not valid.all():
            vbuf = pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(typ, n, [vbuf, pa.py_buffer(offsets), pa.py_buffer(data)])

    def lists(spec, typ, pairs):
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

    arrays = [
        varlen(pa.string(), cols["topic"]),
        pa.array(cols["queue_id"], pa.int32()),
        pa.array(cols["queue_offset"], pa.int64()),
        pa.array(cols["raft_index"], pa.int64()),
        pa.array(cols["term"], pa.int64()),
        pa.array(cols["position"], pa.int64()),
        pa.array(cols["born_timestamp"], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array(cols["store_timestamp"], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        varlen(pa.string(), cols["tags"][0], cols["tags"][1]),
        lists(cols["keys"], schema.field("keys").type, False),
        lists(cols["properties"], schema.field("properties").type, True),
        varlen(pa.binary(), cols["body"]),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _lazy_datasource():
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class _Partition(InputPartition):
        def __init__(self, split: Split):
            super().__init__(split)
            self.split = split

    class _Reader(DataSourceReader):
        def __init__(self, options):
            opts = {k.lower(): v for k, v in options.items()}
            self.path = opts.get("path")
            if not self.path:
                raise InvalidArgumentError("quorumlog: no store path given (load(path))")
            self.committed_only = opts.get("committedonly", "true").lower() != "false"
            self.split_bytes = int(opts.get("splitbytes", DEFAULT_SPLIT_BYTES))
            t = opts.get("topics")
            self.topics = None if t is None else ([] if t == "" else t.split("/"))
            self.on_corrupt = opts.get("oncorrupt", "fail")

        def partitions(self):
            return [_Partition(s) for s in plan_splits(
                self.path, committed_only=self.committed_only, split_bytes=self.split_bytes)]

        def read(self, partition):
            split = getattr(partition, "split", None)
            if split is None:  # Spark asks for one partition even when we planned none
                return
            for cols in scan_split(split, topics=self.topics,
                                   on_corrupt=self.on_corrupt):
                yield to_arrow(cols)

    class QuorumlogDataSource(DataSource):
        """spark.read.format("quorumlog").load(store_dir): the numpy/Arrow fallback reader."""

        @classmethod
        def name(cls):
            return PY_SOURCE_NAME

        def schema(self):
            return spark_schema()

        def reader(self, schema):
            return _Reader(self.options)

    return QuorumlogDataSource


def __getattr__(name):
    # pyspark is an optional extra: build the DataSource class only when it is asked for.
    if name == "QuorumlogDataSource":
        return _datasource_class()
    raise AttributeError(name)
