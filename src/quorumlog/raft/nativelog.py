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
"""
from __future__ import annotations

from ..errors import IndexOutOfRangeError, InstallError
from .errors import NotSupportedByLogError
from .log import EntryKind
from .nativeinstall import (DEFAULT_MAX_INSTALL_BYTES, Stager, check_image, complete_install,
                            describe_image, read_image_chunk)


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

    # -- capabilities the native log does not have yet (docs/raft.md says what they need) --
    def append_producer_batch(self, term: int, batch, pid: int, seq: int) -> int:
        raise NotSupportedByLogError(
            "NativeRaftLog: producer ids need reserved record properties on the batch's last "
            "record and a scan for them (docs/raft.md 'The producer table')")

    def producers(self, lo: int, hi: int) -> list:
        raise NotSupportedByLogError(
            "NativeRaftLog: producer ids are not stored by the native log yet "
            "(docs/raft.md 'The producer table')")

    def producer_snapshot(self) -> list:
        raise NotSupportedByLogError(
            "NativeRaftLog: producer ids are not stored by the native log yet "
            "(docs/raft.md 'The producer table')")

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
                      max_message_bytes=cl.max_message_bytes)
        cl.close()
        complete_install(cl.path)
        return CommitLog(cl.path, **params)
