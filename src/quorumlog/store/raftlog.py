"""StoreRaftLog: the RaftLog a replicated MessageStore hands its Raft core (store.raft_log()).

A NativeRaftLog over the store's CommitLog whose writes go through the store: a leader's
append_as_leader(term, request) is the store's one append path (MessageStore._append_request),
so the Raft core learns of every data record and the store assigns its queue offsets; control
records and truncations go through the store too. Reads, term lookups, flushes and a
follower's append_replicated are the adapter's own. An install (a follower behind the leader's
retention) ships the store's topics and consumer offsets with the image, and the store closes,
lets the installed log replace its files and reopens on it (MessageStore._replace_log). See
quorumlog/store/__init__.py for the order of the driver's calls.
"""
from __future__ import annotations

from collections.abc import Callable

from ..commitlog import ProducerProperties
from ..errors import InvalidArgumentError
from .nativelog import NativeRaftLog, producer_properties

__all__ = ["StoreRaftLog", "producer_properties"]


class StoreRaftLog(NativeRaftLog):
    def __init__(self, commitlog, *, append_request: Callable[[int, object], int],
                 append_control: Callable[[int, int, bytes], int],
                 truncate_after: Callable[[int], None],
                 install_meta: Callable[[], dict] | None = None,
                 replace_log: Callable[[], object] | None = None,
                 max_install_bytes: int | None = None):
        kw = {} if max_install_bytes is None else {"max_install_bytes": max_install_bytes}
        super().__init__(commitlog, **kw)
        self._append_request = append_request
        self._append_ctl = append_control
        self._truncate = truncate_after
        self._store_meta = install_meta
        self._store_replace = replace_log

    def append_as_leader(self, term: int, batch) -> int:
        """`batch` must be a PutRequest made by this store's prepare_put (anything else:
        InvalidArgumentError, nothing written)."""
        return self._append_request(term, batch)

    def append_producer_batch(self, term: int, batch, pid: int, seq: int) -> int:
        """`batch` must be a PutRequest whose properties are producer_properties(pid, seq,
        batch.count, 0, ...) -- the records carry the producer (anything else:
        InvalidArgumentError, nothing written)."""
        props = getattr(batch, "properties", None)
        n = getattr(batch, "count", 0)
        if not (isinstance(props, ProducerProperties) and len(props) == n and n
                and (props.pid, props.seq, props.count, props.first) == (pid, seq, n, 0)):
            raise InvalidArgumentError(
                f"append_producer_batch: the request's properties are not those of producer "
                f"{pid} sequence {seq} (make them with producer_properties)")
        return self._append_request(term, batch)

    def append_control(self, term: int, kind, data: bytes) -> int:
        return self._append_ctl(term, self._record_type(kind), data)

    def truncate_after(self, index: int) -> None:
        self._check_truncate(index)
        self._truncate(index)

    # -- installs: the store's state travels with the image, and the store reopens on it ----
    def _install_meta(self) -> dict:
        return self._store_meta() if self._store_meta is not None else self.meta

    def _replace_log(self):
        if self._store_replace is None:
            return super()._replace_log()
        return self._store_replace()
