"""Stores for the Spark reader tests, written by the engine, and what they should read as.

`write_store` appends through the native CommitLog when it is built (quorumlog.commitlog),
else through the reference writer (quorumlog.format.ReferenceWriter, byte-identical by
contract). `expected_messages` decodes the store with the reference decoder -- independent of
both readers under test -- and, when the MessageStore exists, tests also compare with
MessageStore.get (see test_spark.py).
"""
from __future__ import annotations

import functools
import os
import random

from quorumlog import format as fmt

try:  # the engine's writer (the native commit log), when built
    from quorumlog.commitlog import CommitLog  # type: ignore
except ImportError:  # pragma: no cover - depends on the build
    CommitLog = None

SEGMENT_SIZE = 2 << 20          # 2 MiB: room for 1 MiB bodies, several segments
INDEX_FILE_ENTRIES = 128        # several raft index files
TS0 = 1_700_000_000_000


def message_plan(seed: int = 7, n: int = 420):
    """(kind, kwargs) appends: 3 topics, bodies 0 B .. 1 MiB, tags/keys/properties, controls."""
    rng = random.Random(seed)
    plan = []
    offsets = {}
    for i in range(n):
        if i % 97 == 5:
            typ = rng.choice(fmt.CONTROL_TYPES)
            payload = b"" if typ == fmt.TYPE_NOOP else rng.randbytes(rng.randrange(1, 40))
            plan.append(("control", dict(type=typ, payload=payload)))
            continue
        topic = ("orders", "payments", "tö_pic")[i % 3]
        qid = rng.randrange(4)
        qoff = offsets.get((topic, qid), 0)
        offsets[(topic, qid)] = qoff + 1
        r = rng.random()
        if i in (3, 200):
            size = 1 << 20                     # 1 MiB bodies force segment rollover
        elif i % 50 == 0:
            size = 0
        elif r < 0.1:
            size = rng.randrange(20_000, 300_000)
        else:
            size = rng.randrange(1, 3000)
        body = rng.randbytes(size)
        plan.append(("message", dict(
            topic=topic, body=body, queue_id=qid, queue_offset=qoff,
            tags=(f"tag{i % 5}" if i % 4 else None),
            keys=tuple(f"k{i}-{j}" for j in range(i % 3)),
            properties=({"trace": str(i), "é": "v" * (i % 7)} if i % 6 == 0 else None),
            born_timestamp_ms=TS0 - i)))
    return plan


def write_store(path, plan, *, commit_upto: int | None = None, term: int = 1,
                engine: str = "auto") -> int:
    """Writes plan into a new store at path through the commit log (native CommitLog when
    built, else the reference writer); commits raft indexes 1..commit_upto (default: all).
    Returns the last raft index."""
    os.makedirs(path, exist_ok=True)
    if engine == "auto":
        engine = "native" if CommitLog is not None else "reference"
    if engine == "native":
        log = CommitLog(os.fspath(path), segment_size_bytes=SEGMENT_SIZE,
                        index_file_entries=INDEX_FILE_ENTRIES)
        try:
            last = 0
            for kind, kw in plan:
                if kind == "control":
                    last, _ = log.append_control(kw["type"], kw["payload"], term=term)
                else:
                    kw = dict(kw)
                    last, _, _ = log.append(kw.pop("topic"), kw.pop("body"), term=term,
                                            keys=kw.pop("keys") or (), **kw)
            log.commit(last if commit_upto is None else commit_upto)
        finally:
            log.close()
        return last
    w = fmt.ReferenceWriter(segment_size_bytes=SEGMENT_SIZE, index_file_entries=INDEX_FILE_ENTRIES)
    last = 0
    for i, (kind, kw) in enumerate(plan):
        if kind == "control":
            last, _ = w.append_control(kw["type"], kw["payload"], term=term,
                                       store_timestamp_ms=TS0 + i)
        else:
            kw = dict(kw)
            last, _ = w.append(kw.pop("topic"), kw.pop("body"), term=term,
                               store_timestamp_ms=TS0 + i, **kw)
    w.commit(last if commit_upto is None else commit_upto)
    w.write(path, written_at_ms=TS0)
    return last


def have_message_store() -> bool:
    try:
        from quorumlog import open as _  # noqa: F401
    except ImportError:
        return False
    return CommitLog is not None


def _open_message_store(path):
    import quorumlog

    return quorumlog.open(os.fspath(path), segment_size_bytes=SEGMENT_SIZE,
                          index_file_entries=1024, max_message_bytes=(1 << 20) + 65536)


def write_message_store(path, plan) -> None:
    """Writes the plan's messages through the MessageStore (quorumlog.open ... put)."""
    with _open_message_store(path) as ms:
        for kind, kw in plan:
            if kind != "message":
                continue
            kw = dict(kw)
            kw.pop("queue_offset")  # the store assigns queue offsets
            ms.put(kw.pop("topic"), kw.pop("body"), **kw)


def message_store_rows(path):
    """Every message MessageStore.get returns, over all topics and queues, as canonical
    tuples sorted by raft index."""
    out = []
    with _open_message_store(path) as ms:
        for topic, nqueues in ms.topics().items():
            for q in range(nqueues):
                off = ms.min_offset(topic, q)
                while True:
                    got = ms.get(topic, q, off, 32)
                    if not got:
                        break
                    out += [(m.topic, m.queue_id, m.queue_offset, m.index, m.term, m.position,
                             m.born_timestamp_ms * 1000, m.store_timestamp_ms * 1000, m.tags,
                             tuple(m.keys), tuple(sorted(m.properties.items())), bytes(m.body))
                            for m in got]
                    off += len(got)
    out.sort(key=lambda t: t[3])
    return out


def all_records(path):
    """Every record of the store (reference decoder), BLANK excluded, in log order."""
    out = []
    d = os.path.join(path, "commitlog")
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        out.extend(fmt.iter_records(data, int(name), path=os.path.join(d, name)))
    return out


def expected_messages(path, *, committed_only=True, topics=None):
    """Rows (as canonical tuples) the readers must return (cached: the reference decoder's
    pure-Python CRC takes seconds on these stores; callers never mutate a decoded store)."""
    rows = _expected(os.fspath(path), committed_only)
    return [r for r in rows if topics is None or r[0] in topics]


@functools.lru_cache(maxsize=16)
def _expected(path, committed_only):
    topics = None
    with open(os.path.join(path, "checkpoint"), "rb") as f:
        cp = fmt.decode_checkpoint(f.read())
    out = []
    for r in all_records(path):
        if r.type != fmt.TYPE_MESSAGE:
            continue
        if committed_only and r.position >= cp.committed_position:
            continue
        if topics is not None and r.topic not in topics:
            continue
        out.append(canon_record(r))
    return out


def canon_record(r):
    return (r.topic, r.queue_id, r.queue_offset, r.index, r.term, r.position,
            r.born_timestamp_ms * 1000, r.store_timestamp_ms * 1000, r.tags, tuple(r.keys),
            tuple(sorted(r.properties.items())), bytes(r.body))


def canon_rows(df):
    """Rows of a read_store DataFrame as canonical tuples sorted by raft index (timestamps as
    epoch microseconds, independent of the session time zone)."""
    from pyspark.sql import functions as F

    cols = [F.col(c) for c in ("topic", "queue_id", "queue_offset", "raft_index", "term",
                               "position")]
    cols += [F.unix_micros("born_timestamp").alias("b"), F.unix_micros("store_timestamp").alias("s"),
             F.col("tags"), F.col("keys"), F.col("properties"), F.col("body")]
    out = [(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], tuple(r[9]),
            tuple(sorted(r[10].items())), bytes(r[11])) for r in df.select(*cols).collect()]
    out.sort(key=lambda t: t[3])
    return out


def corrupt_byte(store, position, delta=1):
    """Flips one byte at log position `position` (in the segment that holds it)."""
    S = SEGMENT_SIZE
    seg = os.path.join(store, "commitlog", fmt.segment_name(position - position % S))
    with open(seg, "r+b") as f:
        f.seek(position % S)
        b = f.read(1)
        f.seek(position % S)
        f.write(bytes([(b[0] + delta) % 256]))
    return seg, position % S
