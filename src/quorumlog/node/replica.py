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

Many Raft groups (docs/node.md "Many Raft groups per process"): `groups=G` opens a directory
laid out as `quorumlog serve --groups G` lays it out, and `open_groups=[0, 3]` only those
groups (default: all). Every replica of a group must open it for the group to have all its
voters (a group some member did not open runs with the others: a majority of its voters
must open it).

    rep = quorumlog.open_replica(path, "n1", peers, groups=8, open_groups=[0, 3],
                                 on_group_role_change=lambda g, ch: ...)
    rep.put("orders", b"...", queue_id=5)   # to the group of ("orders", 5): group_of()
    rep.raft_group(3).wait_ready_to_serve(10)

Puts, reads and consumer offsets go to the group of their (topic, queue) (node/groups.py's
rule, as the server's); one whose group this replica did not open raises UnknownGroupError
and changes nothing. A put without a queue picks one of the topic's queues whose group this
replica leads (round-robin; none: an opened group's, which answers NotLeaderError). Role
events carry their group: on_group_role_change(fn) calls fn(group, RoleChange).
The single-group accessors (role, store, node, on_role_change, wait_ready_to_serve, ...)
serve when exactly one group is open; with more, `raft_group(g)` has them per group and
leadership and membership calls take `group=`.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import warnings
from typing import Callable, NamedTuple

from ..errors import InvalidArgumentError, LogClosedError, NotAStoreError
from ..net.messages import UnknownGroupError
from ..raft.core import LeaseExpired, ReadyToServe, RoleChanged
from .config import load_node_config, split_settings
from .groups import check_open_groups, group_of
from .host import NodeHost
from .service import ClientService

log = logging.getLogger(__name__)

__all__ = ["open_replica", "Replica", "RoleChange", "GroupView", "check_replica_dir"]


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


class GroupView:
    """One Raft group of a Replica: its role, readiness and store (Replica.raft_group(g))."""

    def __init__(self, replica: "Replica", group: int):
        self.replica = replica
        self.group = group
        self._ready = threading.Event()

    @property
    def node(self):
        return self.replica.host.node(self.group)

    def wait_ready_to_serve(self, timeout: float | None = None) -> bool:
        """True once this replica leads the group and is ready to serve (False on timeout)."""
        return self._ready.wait(timeout)

    @property
    def is_ready_to_serve(self) -> bool:
        return self._ready.is_set()

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
    def store(self):
        """The group's MessageStore (reads only: writes go through the replica's put)."""
        return self.node.store

    def __repr__(self):
        return f"<GroupView {self.group} of {self.replica!r}>"


class Replica:
    """See the module docstring. Create with quorumlog.open_replica()."""

    def __init__(self, path, cfg, raft_cfg, store_cfg, *, start_timeout: float = 30.0,
                 on_role_change: Callable | None = None,
                 on_group_role_change: Callable | None = None, open_groups=None):
        self.path = path
        self.cfg = cfg
        self.groups = cfg.groups
        self.open_groups = check_open_groups(open_groups, self.groups)
        self._timeout = cfg.put_timeout_ms / 1000
        # registered before the node starts, so no role change is missed
        self._callbacks: list[Callable] = []        # fn(RoleChange): one open group only
        self._group_callbacks: list[Callable] = []  # fn(group, RoleChange)
        if on_role_change is not None:
            self.on_role_change(on_role_change)
        if on_group_role_change is not None:
            self._group_callbacks.append(on_group_role_change)
        self._events = concurrent.futures.ThreadPoolExecutor(1, "quorumlog-role-change")
        # one view per opened group, made before any event can arrive (a view made twice
        # would split its ready flag between the loop's thread and the caller's)
        self._views = {g: GroupView(self, g) for g in self.open_groups}
        self._rr: dict[str, int] = {}
        self._closed = False
        self._lock = threading.Lock()
        self.loop = _new_loop()
        self._thread = threading.Thread(target=self._run_loop, name=f"quorumlog-{cfg.node_id}",
                                        daemon=True)
        self._thread.start()
        self.host = None
        self.service = None
        try:
            # transport and clock left out: the production ones (G = 1: one Node with its
            # own transport, built once the log is open: its handshake carries the geometry)
            self.host = NodeHost(path, cfg, raft_cfg, store_cfg=store_cfg,
                                 open_groups=self.open_groups)
            self.host.add_listener(self._on_event)
            self._call(self._start(), start_timeout)
        except BaseException:
            self._stop_loop()
            raise

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _start(self):
        await self.host.start()
        if self.cfg.client_addr:
            self.service = ClientService(self.host, self.cfg)
            try:
                await self.service.start()
            except BaseException:
                await self.host.stop()
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

    # -- groups ------------------------------------------------------------------------------
    def raft_group(self, group: int) -> GroupView:
        """The view of opened group `group`; UnknownGroupError for another."""
        view = self._views.get(group) if type(group) is int else None
        if view is None:
            self.host.node(group)          # raises, naming what is hosted
        return view

    def group_of(self, topic: str, queue_id: int) -> int:
        """The group that holds (topic, queue_id) (node/groups.py: as the server computes)."""
        return group_of(topic, queue_id, self.groups)

    def _one(self, what: str) -> GroupView:
        """The only open group's view: the single-group accessors' group."""
        self._check_one(what)
        return self.raft_group(self.open_groups[0])

    def _check_one(self, what: str) -> None:
        if len(self.open_groups) != 1:
            how = "on_group_role_change" if what == "on_role_change" else \
                "replica.raft_group(g), or group=g"
            raise InvalidArgumentError(
                f"replica {self.cfg.node_id} opens groups {list(self.open_groups)}: {what} is "
                f"per group ({how})")

    def _group(self, group, what: str) -> GroupView:
        return self._one(what) if group is None else self.raft_group(group)

    def _node_for(self, topic, queue_id):
        """The opened Node of (topic, queue_id); UnknownGroupError (nothing sent) when its
        group is not opened here."""
        if self.groups == 1:
            return self.host.nodes[0]
        if type(queue_id) is not int:
            raise InvalidArgumentError(f"queue_id must be an int, not {queue_id!r}")
        g = group_of(topic, queue_id, self.groups)
        if g not in self.open_groups:
            raise UnknownGroupError(
                f"({topic!r}, queue {queue_id}) is in group {g} of {self.groups}, which "
                f"replica {self.cfg.node_id} did not open (open: {list(self.open_groups)})")
        return self.host.node(g)

    def _route(self, topic, kw: dict):
        """(node, kw) of a put: its queue's group, or a queue this replica leads."""
        if self.groups == 1:
            return self.host.nodes[0], kw
        q = kw.get("queue_id", -1)
        if q is None or (type(q) is int and q < 0):
            kw = dict(kw, queue_id=self._pick_queue(topic))
        return self._node_for(topic, kw["queue_id"]), kw

    def _pick_queue(self, topic: str) -> int:
        """Round-robin over the topic's queues whose group is open here, those led here
        first (an auto-created topic has max(default_topic_queues, G) queues)."""
        nq = max(n.store.queue_count(topic) for n in self.host.nodes) or \
            self.host.store_cfg.default_topic_queues
        k = self._rr.get(topic, 0)
        self._rr[topic] = k + 1
        q = self.host.pick_queue(topic, nq, k)
        if q is None:
            raise UnknownGroupError(f"no queue of topic {topic!r} ({nq} queues) is in the "
                                    f"groups {list(self.open_groups)} replica "
                                    f"{self.cfg.node_id} opened")
        return q

    # -- role changes ------------------------------------------------------------------------
    def _on_event(self, group: int, ev) -> None:        # on the node's loop
        view = self.raft_group(group)
        if isinstance(ev, RoleChanged):
            view._ready.clear()
            ch = RoleChange(ev.role.name, ev.term, ev.leader_id)
        elif isinstance(ev, ReadyToServe):
            view._ready.set()
            ch = RoleChange("READY_TO_SERVE", ev.term, self.cfg.node_id)
        elif isinstance(ev, LeaseExpired):
            # still LEADER, but its lease ran out: stop acting as master until READY_TO_SERVE
            view._ready.clear()
            ch = RoleChange("LEASE_EXPIRED", ev.term, self.cfg.node_id)
        else:
            return
        for fn in list(self._callbacks):
            self._events.submit(self._run_callback, fn, ch)
        for fn in list(self._group_callbacks):
            self._events.submit(self._run_callback, fn, group, ch)

    @staticmethod
    def _run_callback(fn, *args) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("role change callback %r failed", fn)

    def on_role_change(self, fn: Callable[[RoleChange], None]) -> None:
        """fn(RoleChange) on every role change and when this leader becomes ready to serve;
        called one at a time on a dedicated thread. One open group only (else
        on_group_role_change, whose fn is told the group)."""
        self._check_one("on_role_change")
        self._callbacks.append(fn)

    def on_group_role_change(self, fn: Callable[[int, RoleChange], None]) -> None:
        """fn(group, RoleChange) for every opened group (as on_role_change, same thread)."""
        self._group_callbacks.append(fn)

    def wait_ready_to_serve(self, timeout: float | None = None, group: int | None = None
                            ) -> bool:
        """True once this replica is a leader ready to serve (False on timeout)."""
        return self._group(group, "wait_ready_to_serve").wait_ready_to_serve(timeout)

    @property
    def node(self):
        """The Node of the only open group."""
        return self._one("node").node

    @property
    def role(self) -> str:
        return self._one("role").role

    @property
    def leader_id(self) -> str | None:
        return self._one("leader_id").leader_id

    @property
    def term(self) -> int:
        return self._one("term").term

    @property
    def is_ready_to_serve(self) -> bool:
        return self._one("is_ready_to_serve").is_ready_to_serve

    @property
    def store(self):
        """The underlying MessageStore (reads only: writes go through put)."""
        return self._one("store").store

    @property
    def client_address(self):
        return self.service.address if self.service is not None else None

    @property
    def peer_address(self):
        return self.host.peer_address

    def status(self) -> dict:
        """The node's status (one open group), the host's (several: per group inside)."""
        return self._call(self._status())

    async def _status(self):
        return self.host.nodes[0].status() if len(self.open_groups) == 1 else \
            self.host.status()

    # -- writes ------------------------------------------------------------------------------
    def put(self, topic, body, **kw):
        """Append one message (the arguments as MessageStore.put); returns its PutResult once
        committed and dispatched."""
        node, kw = self._route(topic, kw)
        return self._call(node.put(topic, body, **_one_message(kw)))

    def put_batch(self, topic, bodies, **kw):
        node, kw = self._route(topic, kw)
        return self._call(node.put_batch(topic, bodies, **kw))

    async def aput(self, topic, body, **kw):
        node, kw = self._route(topic, kw)
        return await self._acall(node.put(topic, body, **_one_message(kw)))

    async def aput_batch(self, topic, bodies, **kw):
        node, kw = self._route(topic, kw)
        return await self._acall(node.put_batch(topic, bodies, **kw))

    def create_topic(self, name: str, queues: int = 8, group: int | None = None) -> int:
        """Create (or extend) a topic in a group (the only open one by default; a topic is
        auto-created in each group by its first put there)."""
        return self._call(self._group(group, "create_topic").node.create_topic(name, queues))

    def transfer_leadership(self, to: str, group: int | None = None) -> None:
        node = self._group(group, "transfer_leadership").node
        self._call(self._sync(node.transfer_leadership, to))

    def add_member(self, peer: str, address: str, group: int | None = None) -> None:
        node = self._group(group, "add_member").node
        self._call(self._sync(node.add_member, peer, address))

    def remove_member(self, peer: str, group: int | None = None) -> int:
        node = self._group(group, "remove_member").node
        return self._call(self._sync(node.remove_member, peer))

    # -- consumers (MessageStore's consumer API, replicated through the log) ----------------
    # (`group` here is the consumer group, as in MessageStore; offsets live in the Raft
    # group of their queue)
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit `group`'s progress on (topic, queue_id) (the next offset it will read) as a
        META record through the Raft core (leader only: NotLeaderError elsewhere); returns
        once committed on a majority and applied here."""
        node = self._node_for(topic, queue_id)
        self._call(node.commit_offsets(group, [(topic, queue_id, offset)]))

    def commit_offsets(self, group: str, offsets) -> None:
        """Several offsets in one record: {(topic, queue): offset} or (topic, queue, offset)s
        (with many Raft groups, one record per Raft group, all of them opened here)."""
        if self.groups == 1:
            self._call(self.host.nodes[0].commit_offsets(group, offsets))
            return
        items = [(t, q, o) for (t, q), o in offsets.items()] if isinstance(offsets, dict) \
            else [tuple(x) for x in offsets]
        per: dict = {}
        for t, q, o in items:           # (every group checked before any record goes)
            per.setdefault(self._node_for(t, q), []).append((t, q, o))
        for node, part in per.items():
            self._call(node.commit_offsets(group, part))

    async def acommit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        node = self._node_for(topic, queue_id)
        await self._acall(node.commit_offsets(group, [(topic, queue_id, offset)]))

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The offset `group` last committed for (topic, queue_id) as this replica applied it
        (None: never)."""
        return self._node_for(topic, queue_id).store.committed_offset(group, topic, queue_id)

    def consumer_offsets(self, group: str | None = None) -> dict:
        """{group: {topic: {queue: offset}}}, or {topic: {queue: offset}} of one group (the
        opened Raft groups' together: each holds the offsets of its own queues)."""
        out: dict = {}
        for node in self.host.nodes:
            _merge_into(out, node.store.consumer_offsets(group))
        return out

    def find_by_key(self, topic: str, key: str, max_hits: int | None = None, **kw) -> list:
        """Committed messages of `topic` whose keys include `key`, newest first (every
        opened group's)."""
        nodes = self.host.nodes
        if len(nodes) == 1:
            return nodes[0].store.find_by_key(topic, key, max_hits, **kw)
        msgs = []
        for node in nodes:
            msgs.extend(node.store.find_by_key(topic, key, max_hits, **kw))
        msgs.sort(key=lambda x: x.store_timestamp_ms, reverse=True)
        return msgs if max_hits is None else msgs[:max_hits]

    @staticmethod
    async def _sync(fn, *args):
        return fn(*args)

    # -- reads (this replica's committed, dispatched data) -----------------------------------
    def get(self, topic, queue_id, offset, max_messages=32, **kw):
        return self._node_for(topic, queue_id).store.get(topic, queue_id, offset,
                                                         max_messages, **kw)

    async def aget(self, topic, queue_id, offset, max_messages=32, **kw):
        return await asyncio.to_thread(self.get, topic, queue_id, offset, max_messages, **kw)

    def min_offset(self, topic, queue_id) -> int:
        return self._node_for(topic, queue_id).store.min_offset(topic, queue_id)

    def max_offset(self, topic, queue_id) -> int:
        return self._node_for(topic, queue_id).store.max_offset(topic, queue_id)

    def offsets(self, topic, queue_id) -> tuple[int, int]:
        """(min_offset, max_offset) of a queue."""
        st = self._node_for(topic, queue_id).store
        return st.min_offset(topic, queue_id), st.max_offset(topic, queue_id)

    def topics(self) -> dict:
        """{topic: queues} as the opened groups know them (the most queues any knows)."""
        out: dict = {}
        for node in self.host.nodes:
            for t, n in node.store.topics().items():
                out[t] = max(n, out.get(t, 0))
        return out

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
        await self.host.stop()

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
        groups = "" if self.groups == 1 else f" groups {list(self.open_groups)} of {self.groups}"
        return (f"<Replica {self.cfg.node_id} {self.path!r}{groups}"
                f"{' closed' if self._closed else ''}>")


def _merge_into(out: dict, d: dict) -> None:
    """Nested dicts merged key by key (the Raft groups' offsets name different queues)."""
    for k, v in d.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            _merge_into(out[k], v)
        else:
            out[k] = dict(v) if isinstance(v, dict) else v


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
                 on_group_role_change=None, open_groups=None, **settings) -> Replica:
    """Open (creating if needed) one replica of a Raft group in directory `path` and start
    it. peers: {node id: "host:port" of its peer listener} for every voter, this one included.

    Settings are flat keyword arguments, as for quorumlog.open: store settings
    (StoreConfig fields and `profile`, e.g. flush="sync", profile="small"), node settings
    (NodeConfig fields) and Raft settings (RaftConfig fields), told apart by name (see
    docs/node.md); `raft={...}` and the older `store={...}` still work (`store=` warns).
    on_role_change: a callback registered before the node starts (Replica.on_role_change).

    Many Raft groups: `groups=G` (a node setting) opens a directory of G groups laid out as
    `quorumlog serve --groups G` does (ConfigError if it holds another count);
    `open_groups=[...]` opens only those of 0..G-1 (default all); on_group_role_change:
    fn(group, RoleChange), registered before the groups start."""
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
    return Replica(path, cfg, rcfg, scfg, on_role_change=on_role_change,
                   on_group_role_change=on_group_role_change, open_groups=open_groups)


def check_replica_dir(path) -> None:
    """NotAStoreError for a path that exists and is not a directory (the node would fail
    later with a bare FileExistsError)."""
    p = os.fspath(path)
    if os.path.exists(p) and not os.path.isdir(p):
        raise NotAStoreError(f"{p} is not a directory: a replica needs a directory (missing "
                             "or empty for a new one, or a replica's own)")
