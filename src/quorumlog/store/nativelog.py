"""RaftLog (log.py) over the native commit log (quorumlog.commitlog.CommitLog).

A thin adapter: the names and conventions differ a little, the work is the native log's.

  * first_index / last_index / last_term are properties there (first_index is 0 while empty)
  * its read(lo, hi, max_bytes) takes a half-open range and returns (view, count); the
    protocol's hi is inclusive and it wants (payload, count, nbytes)
  * append_control(rtype, payload, term=) / append_batch(topic, bodies, term=, ...) return
    (index, position) / (first_index, positions, timestamp)
  * flush() returns a byte position; the protocol wants the durable last index

Who writes a leader's entries. There are two ways to use this adapter, and on one log only
one of them:

  * Standalone (the conformance suite, the Raft benchmarks, a log with no message store on
    it): NativeRaftLog(commitlog). A leader's batch (the `batch` given to RaftCore.propose
    and passed on to append_as_leader) is `(topic, bodies)` or `(topic, bodies, kwargs)`,
    kwargs being append_batch's keyword arguments; the adapter appends it itself, and
    assigns no queue offsets.
  * Under a MessageStore: MessageStore.raft_log() returns a subclass,
    quorumlog.store.raftlog.StoreRaftLog. Its append_as_leader(term, request) takes a
    PutRequest made by that store's prepare_put and IS the store's one append path (queues,
    queue offsets, index, term and position assigned together, the request registered for
    its reply); anything else is refused. Its append_control and truncate_after also go
    through the store (under its lock: the store recounts queue offsets after a truncation
    and fails the requests whose entries were dropped). Followers write only through
    append_replicated, which the subclass does not change. The order of the driver's calls
    (propose, flush, on_persisted, apply_committed, on_dispatched, abandon_pending) is
    written in quorumlog/store/__init__.py.

Producer ids (docs/raft.md "The producer table"): every record of a producer batch carries
the reserved properties QL_PID, QL_SEQ, QL_N and QL_I (producer_properties); producers()
reads them back for a new leader's producer table (quorumlog.node.producers: the node's,
not the log's).
"""
from __future__ import annotations

import struct

import numpy as np

from ..commitlog import ProducerProperties, producer_tags
from ..errors import IndexOutOfRangeError, InstallError, InvalidArgumentError
from ..raft.errors import NotSupportedByLogError
from ..raft.log import EntryKind
from .nativeinstall import (DEFAULT_MAX_INSTALL_BYTES, Stager, check_image, complete_install,
                            describe_image, read_image_chunk)

# A producer batch's records carry these reserved properties (docs/format.md): the producer
# id and sequence (decimal), the batch's message count and the message's ordinal in it.
PROP_PID = "QL_PID"
PROP_SEQ = "QL_SEQ"
PROP_COUNT = "QL_N"
PROP_ORDINAL = "QL_I"
RESERVED_PROPERTIES = frozenset((PROP_PID, PROP_SEQ, PROP_COUNT, PROP_ORDINAL))
# properties given per message: a list, or a producer batch's (producer_properties)
PER_MESSAGE = (list, ProducerProperties)
_LENGTHS = struct.Struct("<HHII")      # topic_len, tags_len, keys_len, props_len at 76


def producer_properties(pid: int, seq: int, count: int, first_ordinal: int, properties=None):
    """The per-message properties of messages first_ordinal.. of batch (pid, seq) of `count`
    messages: the caller's (one dict, a list with one per message, or None) with the reserved
    ones added (first, in the order QL_PID, QL_SEQ, QL_N, QL_I: producers() reads them at a
    fixed place); a caller's reserved key: InvalidArgumentError. -> a ProducerProperties (a
    sequence of those dicts that CommitLog.append_batch encodes in one loop, with no Python
    object per message)."""
    if isinstance(properties, list):
        for p in properties:
            if p and RESERVED_PROPERTIES.intersection(p):
                raise InvalidArgumentError(f"properties {sorted(RESERVED_PROPERTIES)} are "
                                           "reserved")
    elif properties and RESERVED_PROPERTIES.intersection(properties):
        raise InvalidArgumentError(f"properties {sorted(RESERVED_PROPERTIES)} are reserved")
    return ProducerProperties(pid, seq, count, first_ordinal,
                              properties if properties or isinstance(properties, list) else None)


_U64 = (1 << 64) - 1


def _tags(cl, view, base: int, count: int):
    """(index, pid, seq, count, ordinal, legacy) arrays of the producer records among the
    whole records `view` of `count` entries (log position `base` on); legacy: no QL_N/QL_I
    (count and ordinal 0 then). The records producer_properties wrote start their
    properties with the four reserved ones in order: producer_tags reads those in one C
    loop; any other record with properties goes through producer_tag."""
    index, positions, vals, status = producer_tags(view, base, count)
    keep = status == 1
    legacy = np.zeros(len(index), bool)
    for k in np.flatnonzero(status == 2).tolist():     # other layouts: one by one
        tag = producer_tag(cl.record_at(int(positions[k])))
        if tag is None:
            continue
        keep[k] = True
        legacy[k] = tag[2] is None
        vals[k] = [0 if v is None else v for v in tag]
    return index[keep], *(vals[keep, j] for j in range(4)), legacy[keep]


def _window_runs(log, lo: int, hi: int, tags) -> list:
    """_runs of the entries [lo, hi] of `log` (a NativeRaftLog): tags(cl, view, position,
    count) of each read's whole records (one segment, CRC checked), concatenated."""
    cl = log.cl
    lo = max(lo, log.first_index())
    hi = min(hi, cl.last_index)
    parts = []
    idx = lo
    while idx <= hi:
        view, count = cl.read(idx, hi + 1, 64 << 20)
        parts.append(tags(cl, view, cl.position_of(idx), count))
        idx += count
    if not parts:
        return []
    return _runs(*(np.concatenate(c) for c in zip(*parts)))


def _runs(index, pid, seq, n, o, legacy) -> list:
    """[(first, last, pid, seq, count, first_ordinal)] of the producer records' arrays
    (_tags): one tuple per run of consecutive messages of one batch."""
    if not len(index):
        return []
    same = np.zeros(len(index), bool)      # continues the run of the record before it
    same[1:] = ((index[1:] == index[:-1] + 1) & (pid[1:] == pid[:-1])
                & (seq[1:] == seq[:-1]) & (n[1:] == n[:-1]) & (legacy[1:] == legacy[:-1])
                & (legacy[1:] | (o[1:] == o[:-1] + np.uint64(1))))
    starts = np.flatnonzero(~same)
    ends = np.append(starts[1:], len(index)) - 1
    return [(f, la, p, q, None if old else c, None if old else i)
            for f, la, p, q, c, i, old in zip(
                index[starts].tolist(), index[ends].tolist(), pid[starts].tolist(),
                seq[starts].tolist(), n[starts].tolist(), o[starts].tolist(),
                legacy[starts].tolist())]


def _decimal(v: bytes) -> int | None:
    """A u64 written in ASCII decimal digits (what producer_properties writes), else None."""
    if not 1 <= len(v) <= 20 or not v.isdigit():
        return None
    x = int(v)
    return x if x <= _U64 else None


def producer_tag(rec) -> tuple | None:
    """(pid, seq, count, ordinal) of a MESSAGE record's bytes (count, ordinal None when it
    carries only QL_PID/QL_SEQ), or None without a producer -- also for a properties field
    that is not a sequence of length-prefixed strings or a reserved value that is not a
    u64 in decimal. Reads the properties field in place: a new leader reads this for every
    record of its window."""
    tl, gl, kl, plen = _LENGTHS.unpack_from(rec, 76)
    if not plen:
        return None
    o = 96 + tl + gl + kl
    b = bytes(rec[o:o + plen])
    o, stop = 0, len(b)
    got = {}
    while o < stop:
        if o + 2 > stop:
            return None
        klen = b[o] | b[o + 1] << 8
        k = b[o + 2:o + 2 + klen]
        o += 2 + klen
        if o + 2 > stop:
            return None
        vlen = b[o] | b[o + 1] << 8
        if o + 2 + vlen > stop:
            return None
        if k in _TAG_KEYS:
            got[k] = _decimal(b[o + 2:o + 2 + vlen])
            if got[k] is None:
                return None
        o += 2 + vlen
    pid, seq = got.get(b"QL_PID"), got.get(b"QL_SEQ")
    count, ordinal = got.get(b"QL_N"), got.get(b"QL_I")
    if pid is None or seq is None:
        return None
    if count is None or ordinal is None:
        return pid, seq, None, None
    return pid, seq, count, ordinal


_TAG_KEYS = frozenset((b"QL_PID", b"QL_SEQ", b"QL_N", b"QL_I"))


class NativeRaftLog:
    def __init__(self, commitlog, *, max_install_bytes: int = DEFAULT_MAX_INSTALL_BYTES):
        from ..commitlog import CONFIG, META, NOOP  # the extension is needed only if used
        self.cl = commitlog
        self.meta: dict = {}          # a bare log's state shipped with an install image
        self.max_install_bytes = max_install_bytes
        self._stager = None           # follower: the install being staged
        self._image_crc: list = []    # leader: the last image's checksum (describe_image)
        self._rtype = {EntryKind.NOOP: NOOP, EntryKind.CONFIG: CONFIG, EntryKind.META: META}

    def first_index(self) -> int:
        f = self.cl.first_index
        return f if f >= 1 else self.cl.last_index + 1

    def last_index(self) -> int:
        return self.cl.last_index

    def last_term(self) -> int:
        return self.cl.last_term if self.cl.last_index else 0

    def term_at(self, index: int) -> int:
        if index == 0:
            return 0
        # (a dropped head's last term is not kept: term_at(first_index() - 1) raises when
        # first_index() > 1; the leader then installs such a follower: core.py _start_install)
        return self.cl.term_at(index)

    def read(self, lo: int, hi: int, max_bytes: int):
        last = self.cl.last_index
        if lo < 1 or hi > last or lo > hi:
            raise IndexOutOfRangeError(f"read({lo}, {hi}): log holds {self.first_index()}..{last}")
        view, count = self.cl.read(lo, hi + 1, max_bytes)
        return view, count, len(view)

    def append_as_leader(self, term: int, batch) -> int:
        """Standalone: `batch` is (topic, bodies) or (topic, bodies, append_batch kwargs)."""
        topic, bodies = batch[0], batch[1]
        kwargs = batch[2] if len(batch) > 2 else {}
        first, _positions, _ts = self.cl.append_batch(topic, bodies, term=term, **kwargs)
        return first + len(bodies) - 1

    def append_control(self, term: int, kind, data: bytes) -> int:
        index, _pos = self.cl.append_control(self._record_type(kind), data, term=term)
        return index

    def _record_type(self, kind) -> int:
        return self._rtype[EntryKind(kind)]

    def append_replicated(self, payload) -> int:
        return self.cl.append_replicated(payload)

    def truncate_after(self, index: int) -> None:
        self._check_truncate(index)
        self.cl.truncate_after(index)

    def _check_truncate(self, index: int) -> None:
        last = self.cl.last_index
        if index < 0 or index > last:
            raise IndexOutOfRangeError(f"truncate_after({index}): log holds 1..{last}")

    def flush(self) -> int:
        last = self.cl.last_index
        self.cl.flush()
        return last

    # -- producer ids (docs/raft.md "The producer table") -------------------------------------
    def append_producer_batch(self, term: int, batch, pid: int, seq: int) -> int:
        """Standalone: append_as_leader with producer_properties(pid, seq, ...) merged into
        each message's properties (a caller's QL_* property: InvalidArgumentError)."""
        topic, bodies = batch[0], list(batch[1])
        kwargs = dict(batch[2]) if len(batch) > 2 else {}
        kwargs["properties"] = producer_properties(pid, seq, len(bodies), 0,
                                                   kwargs.get("properties"))
        first, _positions, _ts = self.cl.append_batch(topic, bodies, term=term, **kwargs)
        return first + len(bodies) - 1

    def producers(self, lo: int, hi: int) -> list:
        """[(first, last, pid, seq, count, first_ordinal)]: the runs of consecutive entries
        in [lo, hi] holding consecutive messages of one producer batch, in log order (count
        and first_ordinal None for records that carry only QL_PID/QL_SEQ). One C loop
        over each read's records (producer_tags), then one tuple per run."""
        return _window_runs(self, lo, hi, _tags)

    def producer_snapshot(self) -> list:
        """The native log keeps nothing about the batches of a dropped head: a table rebuilt
        after retention knows the batches still in the log (docs/raft.md)."""
        return []

    # -- installing a follower from the leader's retained segment files ------------------
    # (nativeinstall.py holds the work; docs/raft.md "Installing a follower")
    def install_image(self):
        return describe_image(self.cl, self._install_meta(), self._producers_for_image(),
                              self._image_crc)

    def _install_meta(self) -> dict:
        """The state a follower's store needs with the image (a store's log: its topics and
        consumer offsets); a bare log: `self.meta` (an object of JSON values)."""
        return self.meta

    def _producers_for_image(self) -> tuple:
        try:
            return tuple(self.producer_snapshot())
        except NotSupportedByLogError:
            return ()

    def read_image(self, image, offset: int, max_bytes: int):
        return read_image_chunk(self.cl, image, offset, max_bytes)

    def begin_install(self, image, head_config) -> None:
        """Validate `image` (InstallError: nothing changed), then stage it in
        <dir>/install/, dropping an install in progress."""
        cl = self.cl
        check_image(image, cl.segment_size_bytes, self.max_install_bytes)
        self.abort_install()
        self._stager = Stager(cl.path, image, head_config,
                              segment_size_bytes=cl.segment_size_bytes,
                              index_file_entries=cl.index_file_entries,
                              max_message_bytes=cl.max_message_bytes,
                              max_install_bytes=self.max_install_bytes)

    def write_chunk(self, offset: int, chunk) -> int:
        if self._stager is None:
            raise InstallError(f"write_chunk: no install in progress (offset {offset})")
        return self._stager.write_chunk(offset, chunk)

    def finish_install(self) -> int:
        """Check the staged image, commit it (install/READY), then replace the log's files and
        reopen the log on them (_replace_log)."""
        st = self._stager
        if st is None:
            raise InstallError("finish_install: no install in progress")
        self._stager = None
        st.finish()
        self.cl = self._replace_log()
        return self.cl.last_index

    def abort_install(self) -> None:
        """Drop an install in progress (nothing of it was visible)."""
        st, self._stager = self._stager, None
        if st is not None:
            st.abort()

    def _replace_log(self):
        """A bare log: close it, move the staged files in, open it again."""
        from ..commitlog import CommitLog
        cl = self.cl
        params = dict(segment_size_bytes=cl.segment_size_bytes,
                      index_file_entries=cl.index_file_entries, flush=cl.flush_mode,
                      max_message_bytes=cl.max_message_bytes,
                      recycle_segments=cl.recycle_segments)
        cl.close()
        complete_install(cl.path)
        return CommitLog(cl.path, **params)
