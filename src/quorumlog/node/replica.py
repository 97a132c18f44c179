"""The embedding API: one replica of a Raft group inside a broker's process.

    rep = quorumlog.open_replica("/var/lib/b1", node_id="n1",
                                 peers={"n1": "10.0.0.1:7001", "n2": ..., "n3": ...},
                                 secret=..., flush="sync", profile="small",
                                 client_addr="10.0.0.1:8001")
    rep.on_role_change(lambda ch: ...)      # RoleChange(role, term, leader_id)
    rep.wait_ready_to_serve(timeout=10)     # True once this replica is a master
    r = rep.put("orders", b"...")            # returns once committed (majority) + dispatched
    rep.get("orders", r.queue_id, r.queue_offset)
    rep.close()

The node runs on an event loop in a thread of its own. Thread calls (put, put_batch,
create_topic, admin calls) go through asyncio.run_coroutine_threadsafe and wait at most
`put_timeout_ms`; asyncio callers use aput / aput_batch / aget (awaitable from any loop).
Reads (get, offsets) are served from this replica's own committed, dispatched data (the
store is thread-safe), on any role. Role changes reach `on_role_change` callbacks one at a
time on a dedicated thread (DLedger's single-thread role-change executor): LEADER, FOLLOWER,
CANDIDATE, and READY_TO_SERVE -- seed 001's rule: a leader becomes master only once its log
end equals the commit index and dispatch has caught up.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import warnings
from typing import Callable, NamedTuple

from ..errors import LogClosedError, NotAStoreError
from ..raft.core import LeaseExpired, ReadyToServe, RoleChanged
from .config import load_node_config, split_settings
from .driver import Node
from .service import ClientService

log = logging.getLogger(__name__)

__all__ = ["open_replica", "Replica", "RoleChange", "check_replica_dir"]


class RoleChange(NamedTuple):
    role: str    # "LEADER" | "FOLLOWER" | "CANDIDATE" | "READY_TO_SERVE" | "LEASE_EXPIRED"
    term: int
    leader_id: str | None


def _new_loop():
    try:
        import uvloop
        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


class Replica:
    """See the module docstring. Create with quorumlog.open_replica()."""

    def __init__(self, path, cfg, raft_cfg, store_cfg, *, start_timeout: float = 30.0,
                 on_role_change: Callable | None = None):
        self.path = path
        self.cfg = cfg
        self._timeout = cfg.put_timeout_ms / 1000
        # registered before the node starts, so no role change is missed
        self._callbacks: list[Callable] = [on_role_change] if on_role_change else []
        self._events = concurrent.futures.ThreadPoolExecutor(1, "quorumlog-role-change")
        self._ready = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self.loop = _new_loop()
        self._thread = threading.Thread(target=self._run_loop, name=f"quorumlog-{cfg.node_id}",
                                        daemon=True)
        self._thread.start()
        self.node = None
        self.service = None
        try:
            # transport and clock left out: the production ones, the transport built once
            # the log is open (its handshake carries the log's geometry)
            self.node = Node(path, cfg, raft_cfg, store_cfg=store_cfg)
            self._call(self._start(), start_timeout)
        except BaseException:
            self._stop_loop()
            raise

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _start(self):
        self.node.add_listener(self._on_event)
        await self.node.start()
        if self.cfg.client_addr:
            self.service = ClientService(self.node, self.cfg)
            try:
                await self.service.start()
            except BaseException:
                await self.node.stop()
                raise

    def _call(self, coro, timeout=None):
        if self._closed:
            coro.close()
            raise LogClosedError(f"replica {self.cfg.node_id} is closed")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(self._timeout if timeout is None else timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"replica {self.cfg.node_id}: no answer within "
                               f"{self._timeout if timeout is None else timeout} s") from None

    async def _acall(self, coro):
        if self._closed:
            coro.close()
            raise LogClosedError(f"replica {self.cfg.node_id} is closed")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return await asyncio.wait_for(asyncio.wrap_future(fut), self._timeout)

    # -- role changes ------------------------------------------------------------------------
    def _on_event(self, ev) -> None:        # on the node's loop
        if isinstance(ev, RoleChanged):
            self._ready.clear()
            ch = RoleChange(ev.role.name, ev.term, ev.leader_id)
        elif isinstance(ev, ReadyToServe):
            self._ready.set()
            ch = RoleChange("READY_TO_SERVE", ev.term, self.node.id)
        elif isinstance(ev, LeaseExpired):
            # still LEADER, but its lease ran out: stop acting as master until READY_TO_SERVE
            self._ready.clear()
            ch = RoleChange("LEASE_EXPIRED", ev.term, self.node.id)
        else:
            return
        for fn in list(self._callbacks):
            self._events.submit(self._run_callback, fn, ch)

    @staticmethod
    def _run_callback(fn, ch) -> None:
        try:
            fn(ch)
        except Exception:
            log.exception("on_role_change callback %r failed", fn)

    def on_role_change(self, fn: Callable[[RoleChange], None]) -> None:
        """fn(RoleChange) on every role change and when this leader becomes ready to serve;
        called one at a time on a dedicated thread."""
        self._callbacks.append(fn)

    def wait_ready_to_serve(self, timeout: float | None = None) -> bool:
        """True once this replica is a leader ready to serve (False on timeout)."""
        return self._ready.wait(timeout)

    @property
    def role(self) -> str:
        return self.node.core.role.name

    @property
    def leader_id(self) -> str | None:
        return self.node.core.leader_id

    @property
    def term(self) -> int:
        return self.node.core.term

    @property
    def is_ready_to_serve(self) -> bool:
        return self._ready.is_set()

    @property
    def store(self):
        """The underlying MessageStore (reads only: writes go through put)."""
        return self.node.store

    @property
    def client_address(self):
        return self.service.address if self.service is not None else None

    @property
    def peer_address(self):
        return self.node.peer_address

    def status(self) -> dict:
        return self._call(self._status())

    async def _status(self):
        return self.node.status()

    # -- writes ------------------------------------------------------------------------------
    def put(self, topic, body, **kw):
        """Append one message (the arguments as MessageStore.put); returns its PutResult once
        committed and dispatched."""
        return self._call(self.node.put(topic, body, **_one_message(kw)))

    def put_batch(self, topic, bodies, **kw):
        return self._call(self.node.put_batch(topic, bodies, **kw))

    async def aput(self, topic, body, **kw):
        return await self._acall(self.node.put(topic, body, **_one_message(kw)))

    async def aput_batch(self, topic, bodies, **kw):
        return await self._acall(self.node.put_batch(topic, bodies, **kw))

    def create_topic(self, name: str, queues: int = 8) -> int:
        return self._call(self.node.create_topic(name, queues))

    def transfer_leadership(self, to: str) -> None:
        self._call(self._sync(self.node.transfer_leadership, to))

    def add_member(self, peer: str, address: str) -> None:
        self._call(self._sync(self.node.add_member, peer, address))

    def remove_member(self, peer: str) -> int:
        return self._call(self._sync(self.node.remove_member, peer))

    # -- consumers (MessageStore's consumer API, replicated through the log) ----------------
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit `group`'s progress on (topic, queue_id) (the next offset it will read) as a
        META record through the Raft core (leader only: NotLeaderError elsewhere); returns
        once committed on a majority and applied here."""
        self._call(self.node.commit_offsets(group, [(topic, queue_id, offset)]))

    def commit_offsets(self, group: str, offsets) -> None:
        """Several offsets in one record: {(topic, queue): offset} or (topic, queue, offset)s."""
        self._call(self.node.commit_offsets(group, offsets))

    async def acommit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        await self._acall(self.node.commit_offsets(group, [(topic, queue_id, offset)]))

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The offset `group` last committed for (topic, queue_id) as this replica applied it
        (None: never)."""
        return self.node.store.committed_offset(group, topic, queue_id)

    def consumer_offsets(self, group: str | None = None) -> dict:
        return self.node.store.consumer_offsets(group)

    def find_by_key(self, topic: str, key: str, max_hits: int | None = None, **kw) -> list:
        """Committed messages of `topic` whose keys include `key`, newest first."""
        return self.node.store.find_by_key(topic, key, max_hits, **kw)

    @staticmethod
    async def _sync(fn, *args):
        return fn(*args)

    # -- reads (this replica's committed, dispatched data) -----------------------------------
    def get(self, topic, queue_id, offset, max_messages=32, **kw):
        return self.node.store.get(topic, queue_id, offset, max_messages, **kw)

    async def aget(self, topic, queue_id, offset, max_messages=32, **kw):
        return await asyncio.to_thread(self.get, topic, queue_id, offset, max_messages, **kw)

    def min_offset(self, topic, queue_id) -> int:
        return self.node.store.min_offset(topic, queue_id)

    def max_offset(self, topic, queue_id) -> int:
        return self.node.store.max_offset(topic, queue_id)

    def offsets(self, topic, queue_id) -> tuple[int, int]:
        """(min_offset, max_offset) of a queue."""
        st = self.node.store
        return st.min_offset(topic, queue_id), st.max_offset(topic, queue_id)

    def topics(self) -> dict:
        return self.node.store.topics()

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop the node cleanly (pending puts fail with LogClosedError) and its loop."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            fut = asyncio.run_coroutine_threadsafe(self._stop(), self.loop)
            fut.result(60)
        finally:
            self._stop_loop()
            self._events.shutdown(wait=True)

    async def _stop(self):
        if self.service is not None:
            await self.service.stop()
        await self.node.stop()

    def _stop_loop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        if not self.loop.is_running():
            self.loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<Replica {self.cfg.node_id} {self.path!r}{' closed' if self._closed else ''}>"


def _one_message(kw: dict) -> dict:
    """MessageStore.put's arguments for one message as the node's batch put takes them."""
    if "keys" in kw:
        keys = kw["keys"]
        kw = dict(kw)
        if not keys:                    # store.put's default (), or None: no keys
            del kw["keys"]
        else:
            kw["keys"] = [keys if isinstance(keys, str) else tuple(keys)]
    if "born_timestamp_ms" in kw:
        kw = dict(kw)
        ts = kw.pop("born_timestamp_ms")
        if ts is not None:
            kw["born_timestamps_ms"] = [ts]
    return kw


def open_replica(path, node_id: str = "n1", peers=None, *, secret=None, client_addr=None,
                 config_file=None, environ=None, raft=None, store=None, on_role_change=None,
                 **settings) -> Replica:
    """Open (creating if needed) one replica of a Raft group in directory `path` and start
    it. peers: {node id: "host:port" of its peer listener} for every voter, this one included.

    Settings are flat keyword arguments, as for quorumlog.open: store settings
    (StoreConfig fields and `profile`, e.g. flush="sync", profile="small"), node settings
    (NodeConfig fields) and Raft settings (RaftConfig fields), told apart by name (see
    docs/node.md); `raft={...}` and the older `store={...}` still work (`store=` warns).
    on_role_change: a callback registered before the node starts (Replica.on_role_change)."""
    node_kw, raft_kw, store_kw = split_settings(settings)
    if store is not None:
        warnings.warn("open_replica(store={...}) is deprecated: pass store settings as "
                      "keyword arguments, as to quorumlog.open", DeprecationWarning,
                      stacklevel=2)
        store_kw = {**dict(store), **store_kw}
    if raft is not None:
        raft_kw = {**dict(raft), **raft_kw}
    check_replica_dir(path)
    cfg, rcfg, scfg = load_node_config(config_file, environ, raft=raft_kw, store=store_kw,
                                       node_id=node_id, peers=peers, secret=secret,
                                       client_addr=client_addr, **node_kw)
    return Replica(path, cfg, rcfg, scfg, on_role_change=on_role_change)


def check_replica_dir(path) -> None:
    """NotAStoreError for a path that exists and is not a directory (the node would fail
    later with a bare FileExistsError)."""
    p = os.fspath(path)
    if os.path.exists(p) and not os.path.isdir(p):
        raise NotAStoreError(f"{p} is not a directory: a replica needs a directory (missing "
                             "or empty for a new one, or a replica's own)")
