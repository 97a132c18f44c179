"""The history of a fault-testing run and its checker: what the clients did (every produce:
invoke, then ok / fail / info), what the nemesis did (kills, partitions, power cuts, bit
flips, ...), what each replica served at the end and its log bytes -- and `check()`, a pure
function from all of that to findings.

Properties checked (each finding names its kind):

  acked-lost        an acknowledged message is not in a replica's queue at all (the
                    summary's acked_lost counts messages that fewer than a majority of
                    the replicas hold: lost from the group)
  acked-moved       an acknowledged message is in a replica, but not at its acknowledged
                    (topic, queue, offset)
  acked-unreadable  a replica answers an error for an acknowledged message's offset (a
                    replica whose segment the nemesis damaged is reported apart, as
                    damaged-unreadable, when at least a majority reads the message intact)
  unreadable        a replica answers an error for an offset whose bytes the nemesis did not
                    damage
  short-ack         an acknowledgement names fewer positions than the batch had messages
                    (the messages it names no position for must still be stored somewhere)
  wrong-data        a body that fails its own integrity check, a message id no client
                    sent, or a different message at an acknowledged position
  position-reused   two acknowledged messages claim the same (topic, queue, offset)
  duplicate         one message id stored at two offsets (the idempotent producer failed)
  failed-appeared   a message whose put definitely failed was stored (an indeterminate
                    one -- info -- may be)
  offset-gap        a queue's offsets are not dense from its first to its last
  minority-ack      a node acknowledged a write invoked after it was cut off into a
                    minority, before the partition healed
  replicas-differ   two replicas' logs differ byte-wise below the lowest commit position
                    (apart from bytes the nemesis flipped itself)
  not-converged     replicas did not converge within `converge_limit_s` after healing
  power-model-violation  a power cut zeroed bytes the replica had msync'd (seen when the
                    runner traces msync): the nemesis was unfaithful, findings after it
                    are suspect
  restart-failed    a replica did not start again after a crash or power loss (a
                    replica refusing to start on a bit the nemesis flipped is recorded
                    as `refused-start`, the documented fail-stop, and is not a finding)

Message ids ride in the bodies: `make_body(mid, size)` writes "mid|" and a padding derived
from the id, so `parse_body` can tell an intact body from a damaged one.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import threading
from typing import Iterable, Mapping

from ..errors import InvalidArgumentError

__all__ = ["Op", "Event", "History", "ReadMessage", "Unreadable", "ReplicaRead",
           "ReplicaLog", "Finding", "CheckResult", "check", "make_body", "parse_body",
           "message_id"]

OP_TYPES = ("invoke", "ok", "fail", "info")
CONVERGE_LIMIT_S = 10.0
MAX_EXAMPLES = 20


# ------------------------------------------------------------------------------------ bodies
def message_id(producer_id: int, sequence: int, i: int) -> str:
    return f"{producer_id:x}-{sequence}-{i}"


def _pad(mid: bytes, n: int) -> bytes:
    seed = hashlib.blake2b(mid, digest_size=16).digest()
    return (seed * (n // 16 + 1))[:n]


def make_body(mid: str, size: int = 0) -> bytes:
    """b"<mid>|" + a padding that depends on the id, `size` bytes in all (at least the id)."""
    head = mid.encode() + b"|"
    return head + _pad(head, max(0, size - len(head)))


def parse_body(body) -> tuple[str | None, bool]:
    """-> (message id or None, intact): intact means the padding matches the id."""
    b = bytes(body)
    k = b.find(b"|")
    if k <= 0:
        return None, False
    try:
        mid = b[:k].decode()
    except UnicodeDecodeError:
        return None, False
    head = b[:k + 1]
    return mid, b[k + 1:] == _pad(head, len(b) - k - 1)


# ------------------------------------------------------------------------------------ history
@dataclasses.dataclass(frozen=True, slots=True)
class Op:
    """One step of one produce. `invoke` names the batch; `ok` adds where it was stored;
    `fail` means it definitely was not stored; `info` means it may or may not have been."""
    type: str
    process: int
    time: float
    producer_id: int
    sequence: int
    topic: str
    message_ids: tuple = ()
    queue_id: int | None = None
    first_offset: int | None = None
    positions: tuple = ()
    node: str | None = None
    error: str | None = None

    def __post_init__(self):
        if self.type not in OP_TYPES:
            raise InvalidArgumentError(f"op type must be one of {OP_TYPES}, got {self.type!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """What the nemesis did. Kinds the checker reads: `partition` (detail: groups, a list
    of node lists), `heal` (ends every partition), `bit-flip` (detail: position of the
    flipped byte in the node's log), `converged` (detail: after_s, None = never)."""
    time: float
    kind: str
    nodes: tuple = ()
    detail: Mapping = dataclasses.field(default_factory=dict)


class History:
    """Thread-safe recorder of ops and events."""

    def __init__(self, clock=None):
        import time
        self.clock = clock or time.monotonic
        self.ops: list[Op] = []
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def op(self, type: str, **kw) -> Op:
        t = kw.pop("time", None)
        o = Op(type, time=self.clock() if t is None else t, **kw)
        with self._lock:
            self.ops.append(o)
        return o

    def event(self, kind: str, nodes=(), **detail) -> Event:
        e = Event(self.clock(), kind, tuple(nodes), detail)
        with self._lock:
            self.events.append(e)
        return e

    def count_events(self, kind: str) -> int:
        return sum(1 for e in self.events if e.kind == kind)


# ------------------------------------------------------------------------------- end state
@dataclasses.dataclass(frozen=True, slots=True)
class ReadMessage:
    topic: str
    queue_id: int
    offset: int
    message_id: str | None
    intact: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Unreadable:
    topic: str
    queue_id: int
    offset: int
    error: str


@dataclasses.dataclass
class ReplicaRead:
    """Everything one replica served at the end: per (topic, queue) its (min, max) offsets,
    the messages read and the offsets it answered with an error."""
    node: str
    messages: list = dataclasses.field(default_factory=list)
    unreadable: list = dataclasses.field(default_factory=list)
    ranges: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ReplicaLog:
    """A stopped replica's commit log: its checkpoint's committed position and its
    segments {start position: bytes-like}."""
    node: str
    committed_position: int
    segments: dict = dataclasses.field(default_factory=dict)

    def view(self, lo: int, hi: int):
        """Bytes [lo, hi) of the logical log (they may span segments) or None if missing."""
        out = []
        pos = lo
        starts = sorted(self.segments)
        while pos < hi:
            seg = max((s for s in starts if s <= pos), default=None)
            if seg is None:
                return None
            buf = memoryview(self.segments[seg])
            off = pos - seg
            if off >= len(buf):
                return None
            take = min(hi - pos, len(buf) - off)
            out.append(buf[off:off + take])
            pos += take
        return out


# ------------------------------------------------------------------------------------ result
@dataclasses.dataclass(frozen=True)
class Finding:
    kind: str
    text: str


@dataclasses.dataclass
class CheckResult:
    findings: list
    counts: dict

    @property
    def valid(self) -> bool:
        return not self.findings

    def by_kind(self) -> dict:
        """{kind: exact number of findings} (the list keeps MAX_EXAMPLES of each)."""
        return dict(self.counts.get("by_kind", {}))


class _Findings:
    """Findings with at most MAX_EXAMPLES texts per kind (the counts are exact)."""

    def __init__(self):
        self.items: list[Finding] = []
        self.n = collections.Counter()

    def add(self, kind: str, text: str) -> None:
        self.n[kind] += 1
        if self.n[kind] <= MAX_EXAMPLES:
            self.items.append(Finding(kind, text))
        elif self.n[kind] == MAX_EXAMPLES + 1:
            self.items.append(Finding(kind, f"(further {kind} findings are only counted)"))


# ------------------------------------------------------------------------------------ checker
def _acks(ops: Iterable[Op], f: _Findings):
    """{message id: (topic, queue, offset), or None when acknowledged without a position}
    of acknowledged messages, + failed and indeterminate ids, + every id ever invoked, +
    ok ops."""
    acked: dict[str, tuple] = {}
    failed: set = set()
    indeterminate: set = set()
    invoked: set = set()
    oks = []
    claim: dict[tuple, str] = {}
    for o in ops:
        if o.type == "invoke":
            invoked.update(o.message_ids)
        elif o.type == "fail":
            failed.update(o.message_ids)
        elif o.type == "info":
            indeterminate.update(o.message_ids)
        elif o.type == "ok":
            oks.append(o)
            invoked.update(o.message_ids)
            if len(o.positions) != len(o.message_ids):
                f.add("short-ack", f"producer {o.producer_id:x} sequence {o.sequence}: "
                                   f"{len(o.message_ids)} messages sent, acknowledgement by "
                                   f"{o.node} names {len(o.positions)} positions "
                                   f"({o.topic}/{o.queue_id}@{o.first_offset})")
            k = len(o.positions)
            for mid in o.message_ids[k:]:
                # acknowledged without a position: they must be stored, somewhere
                acked[mid] = None
            for i, mid in enumerate(o.message_ids[:k]):
                where = (o.topic, o.queue_id, o.first_offset + i)
                prev = claim.get(where)
                if prev is not None and prev != mid:
                    f.add("position-reused", f"{where[0]}/{where[1]}@{where[2]} acknowledged "
                                             f"for {prev} and for {mid}")
                claim[where] = mid
                acked[mid] = where
    return acked, failed, indeterminate, invoked, oks


def _majority(n: int) -> int:
    return n // 2 + 1


def _partition_windows(events, nodes_total: int):
    """[(start, end, minority nodes)] from partition events, each ended by the next heal
    (or partition) event; a partition never healed lasts to +inf."""
    wins = []
    cur = None
    for e in sorted(events, key=lambda e: e.time):
        if e.kind in ("partition", "heal"):
            if cur is not None:
                wins.append((cur[0], e.time, cur[1]))
                cur = None
        if e.kind == "partition":
            groups = [set(g) for g in e.detail.get("groups", ())]
            minority = set()
            for g in groups:
                if len(g) < _majority(nodes_total):
                    minority |= g
            cur = (e.time, minority)
    if cur is not None:
        wins.append((cur[0], float("inf"), cur[1]))
    return wins


def _check_minority_acks(ops, events, nodes_total, f: _Findings) -> None:
    invoked_at = {}
    for o in ops:
        if o.type == "invoke":
            invoked_at[(o.process, o.producer_id, o.sequence)] = o.time
    wins = [w for w in _partition_windows(events, nodes_total) if w[2]]
    if not wins:
        return
    for o in ops:
        if o.type != "ok" or o.node is None:
            continue
        t0 = invoked_at.get((o.process, o.producer_id, o.sequence))
        if t0 is None:
            continue
        for start, end, minority in wins:
            if o.node in minority and start <= t0 and o.time <= end:
                f.add("minority-ack",
                      f"{o.node} acknowledged producer {o.producer_id:x} sequence "
                      f"{o.sequence} (invoked {t0 - start:.3f} s into a partition that kept "
                      f"it in the minority {sorted(minority)})")
                break


def _check_reads(reads, acked, failed, invoked, damaged_nodes, nodes_total, f: _Findings,
                 counts) -> None:
    intact_copies = collections.Counter()     # message id -> replicas reading it intact
    held = collections.Counter()              # message id -> replicas storing it anywhere
    unread_acked: list = []
    wrong: set = set()                        # (topic, queue, offset) served wrong
    acked_at = set(w for w in acked.values() if w is not None)
    for r in reads:
        at: dict[tuple, ReadMessage] = {}
        where_ids = collections.defaultdict(list)
        for m in r.messages:
            key = (m.topic, m.queue_id, m.offset)
            at[key] = m
            if m.message_id is None or not m.intact:
                f.add("wrong-data", f"{r.node}: {m.topic}/{m.queue_id}@{m.offset} holds a body "
                                    f"that fails its integrity check (id {m.message_id!r})")
                wrong.add(key)
                continue
            where_ids[m.message_id].append(key)
            if m.message_id not in invoked:
                f.add("wrong-data", f"{r.node}: {m.topic}/{m.queue_id}@{m.offset} holds "
                                    f"{m.message_id}, which no client sent")
                wrong.add(key)
            if m.message_id in failed:
                f.add("failed-appeared", f"{r.node}: {m.message_id} (its put definitely "
                                         f"failed) is at {m.topic}/{m.queue_id}@{m.offset}")
                counts["failed_appeared"] += 1
        for mid, keys in where_ids.items():
            if len(keys) > 1:
                f.add("duplicate", f"{r.node}: {mid} stored {len(keys)} times, at "
                                   + ", ".join(f"{t}/{q}@{o}" for t, q, o in keys[:5]))
                counts["duplicates"] += 1
        bad = {(u.topic, u.queue_id, u.offset): u for u in r.unreadable}
        for key, u in bad.items():
            if r.node in damaged_nodes:
                counts["damaged_unreadable"] += 1
            elif key not in acked_at:
                f.add("unreadable", f"{r.node}: {u.topic}/{u.queue_id}@{u.offset} cannot be "
                                    f"read ({u.error}), and the nemesis damaged no byte there")
                counts["unreadable"] += 1
        # dense offsets: every offset in [min, max) is either read or answered with an error
        for (topic, q), (lo, hi) in sorted(r.ranges.items()):
            missing = [o for o in range(lo, hi) if (topic, q, o) not in at
                       and (topic, q, o) not in bad]
            if missing:
                f.add("offset-gap", f"{r.node}: {topic}/{q} offsets {lo}..{hi} lack "
                                    f"{len(missing)}, e.g. {missing[:5]}")
                counts["offset_gaps"] += len(missing)
        for mid, where in acked.items():
            if mid in where_ids:
                held[mid] += 1
            if where is None:
                # (a short acknowledgement: no position was named for it)
                if mid in where_ids:
                    intact_copies[mid] += 1
                else:
                    f.add("acked-lost", f"{r.node}: acknowledged {mid} (its acknowledgement "
                                        "named no position) is not stored")
                    counts["acked_missing_copies"] += 1
                continue
            m = at.get(where)
            if m is not None and m.message_id == mid and m.intact:
                intact_copies[mid] += 1
                continue
            if where in bad:
                unread_acked.append((r.node, mid, where, bad[where].error))
                continue
            if m is not None and m.intact and m.message_id is not None:
                f.add("wrong-data", f"{r.node}: {where[0]}/{where[1]}@{where[2]} was "
                                    f"acknowledged for {mid} but holds {m.message_id}")
                wrong.add(where)
            if mid in where_ids:
                t, q, o = where_ids[mid][0]
                f.add("acked-moved", f"{r.node}: acknowledged {mid} is at {t}/{q}@{o}, "
                                     f"not at {where[0]}/{where[1]}@{where[2]}")
                counts["acked_moved"] += 1
            else:
                f.add("acked-lost", f"{r.node}: acknowledged {mid} "
                                    f"({where[0]}/{where[1]}@{where[2]}) is not stored")
                counts["acked_missing_copies"] += 1
    for node, mid, where, err in unread_acked:
        if node in damaged_nodes and intact_copies[mid] >= _majority(nodes_total):
            counts["damaged_unreadable_acked"] += 1
            continue
        f.add("acked-unreadable", f"{node}: acknowledged {mid} at "
                                  f"{where[0]}/{where[1]}@{where[2]} cannot be read: {err}")
        counts["acked_unreadable"] += 1
    # lost from the group: held by fewer than a majority of the replicas (of those read,
    # when fewer than a majority could be read)
    need = min(_majority(nodes_total), len(reads))
    lost = [mid for mid in acked if held[mid] < need] if reads else []
    counts["acked_lost"] = len(lost)
    counts["acked_lost_by_short_acks"] = sum(1 for mid in lost if acked[mid] is None)
    counts["wrong_data"] = len(wrong)


def _check_logs(logs, flips, f: _Findings, counts) -> None:
    if len(logs) < 2:
        return
    upto = min(lg.committed_position for lg in logs)
    counts["compared_bytes"] = upto
    ref = logs[0]
    step = 1 << 20
    for other in logs[1:]:
        excused = {p for p in flips.get(ref.node, ())} | {p for p in flips.get(other.node, ())}
        pos = 0
        reported = False
        while pos < upto and not reported:
            hi = min(upto, pos + step)
            a, b = ref.view(pos, hi), other.view(pos, hi)
            if a is None or b is None:
                f.add("replicas-differ", f"{(ref if a is None else other).node} lacks log bytes "
                                         f"in [{pos}, {hi}) (committed up to {upto})")
                counts["divergent_replicas"] += 1
                break
            ab, bb = b"".join(bytes(x) for x in a), b"".join(bytes(x) for x in b)
            if ab != bb:
                for k in range(len(ab)):
                    if ab[k] != bb[k] and pos + k not in excused:
                        f.add("replicas-differ",
                              f"{other.node}'s log differs from {ref.node}'s at position "
                              f"{pos + k} (committed up to {upto} on all)")
                        counts["divergent_replicas"] += 1
                        reported = True
                        break
                    if ab[k] != bb[k]:
                        counts["excused_flipped_bytes"] += 1
            pos = hi


def check(ops: Iterable[Op], events: Iterable[Event], reads: Iterable[ReplicaRead] = (),
          logs: Iterable[ReplicaLog] = (), *, nodes_total: int,
          converge_limit_s: float = CONVERGE_LIMIT_S) -> CheckResult:
    """History + end state -> findings (empty when every property holds) and counts."""
    ops = list(ops)
    events = list(events)
    reads = list(reads)
    logs = list(logs)
    f = _Findings()
    counts = collections.Counter()
    acked, failed, indeterminate, invoked, oks = _acks(ops, f)
    counts["ops"] = sum(1 for o in ops if o.type == "invoke")
    counts["acked_batches"] = len(oks)
    counts["acked_messages"] = len(acked)
    counts["failed_batches"] = sum(1 for o in ops if o.type == "fail")
    counts["indeterminate_batches"] = sum(1 for o in ops if o.type == "info")
    flips = collections.defaultdict(set)
    for e in events:
        if e.kind == "bit-flip":
            for n in e.nodes:
                flips[n].add(int(e.detail["position"]))
    _check_minority_acks(ops, events, nodes_total, f)
    _check_reads(reads, acked, failed, invoked, set(flips), nodes_total, f, counts)
    _check_logs(logs, flips, f, counts)
    for e in events:
        if e.kind == "converged":
            after = e.detail.get("after_s")
            if after is None or after > converge_limit_s:
                how = "never converged" if after is None else f"converged after {after:.1f} s"
                f.add("not-converged", f"replicas {how} (limit {converge_limit_s} s) after "
                                       f"{e.detail.get('since', 'healing')}")
                counts["not_converged"] += 1
            else:
                counts["max_converge_s"] = max(counts.get("max_converge_s", 0), after)
    for e in events:
        if e.kind == "power-model-violation":
            f.add("power-model-violation",
                  f"the power cut of {', '.join(e.nodes)} zeroed log bytes from "
                  f"{e.detail.get('zeroed_from')}, below {e.detail.get('msync_end')} which the "
                  f"replica had msync'd ({e.detail.get('model')} model): the nemesis, not the "
                  "replica, lost that data")
            counts["power_model_violations"] += 1
        if e.kind == "restart-failed":
            f.add("restart-failed", f"{', '.join(e.nodes)} did not start again: "
                                    f"{str(e.detail.get('error', '?'))[-300:]}")
            counts["restart_failed"] += 1
    for k in ("acked_lost", "wrong_data", "duplicates", "failed_appeared"):
        counts.setdefault(k, 0)
    counts["findings"] = sum(f.n.values())
    counts["by_kind"] = dict(f.n)
    return CheckResult(f.items, dict(counts))
