"""The history checker of the node simulation (testing/nodesim.py): what the clients were told
and what the replicas hold, checked as the run goes and once the group has converged.

As the run goes:
  * an acknowledgement names one (queue, offset) per message; two bodies at one (queue,
    offset), or one body at two, is a violation;
  * an acknowledgement is given only while a majority of the replicas holds the batch's last
    entry (same index, same term; in sync mode also flushed): a minority never acknowledges.
    A replica that is down counts with the log it had when it went down;
  * a consumer's read of any replica agrees with every earlier read and acknowledgement of
    the same (queue, offset), and its offsets are dense.
After the last heal (`converge`, then `final`):
  * the group converges: every replica up, one leader ready to serve, no replica still
    recovering (raft/recovery.py R3b: a follower of a live leader recovers once caught up),
    every replica applied to the same last index of the same term. A group that does not is
    told apart as "stopped for recovery" when the run is in async mode with a power loss
    and no replica that may campaign has, in its own latest configuration, a quorum of
    voters that are not recovering and whose logs are not newer than its own (docs/raft.md
    "Recovery after power loss": the documented stop until an operator runs end_recovery).
    That is the engine refusing to guess, not a violation: it is reported apart
    (SeedResult.stopped), and the replicas' committed prefixes must still agree. Any other
    non-convergence is a liveness bug (a violation);
  * the replicas' logs are byte-identical up to the commit index, and so are their queues;
  * every queue's offsets are dense; every acknowledged message is there exactly once at its
    acknowledged (queue, offset); no message of a batch that never reached a node's log path
    (every attempt refused before it) is there; no message is there twice.
"""
from __future__ import annotations

import asyncio
import hashlib

from ..errors import IndexOutOfRangeError, QuorumlogError
from ..raft.messages import Role

__all__ = ["HistoryChecker", "STOPPED_FOR_RECOVERY"]

TOPIC = "sim"
_HELD_ENTRIES = 4096        # a downed replica's last entries, remembered for the majority check
STOPPED_FOR_RECOVERY = "stopped for recovery"


class HistoryChecker:
    def __init__(self, sim, label: str = ""):
        # sim: the run (G = 1) or one Raft group's view of it (nodesim._GroupView), whose
        # members are that group's replicas; label names the group in violations
        self.sim = sim
        self.label = label
        self.acked: dict = {}          # (queue, offset) -> body acknowledged there
        self.acked_at: dict = {}       # body -> (queue, offset)
        self.seen: dict = {}           # (queue, offset) -> body read there
        self.acked_messages = 0

    def violation(self, text: str) -> None:
        loop = self.sim.loop
        t = int(loop.time() * 1000) if loop is not None and not loop.is_closed() else -1
        self.sim.res.violations.append(f"t={t}ms {self.label}{text}")

    # ------------------------------------------------------------------ as the run goes
    def log_terms(self, node) -> dict:
        """index -> term of the node's last entries (sync mode: the flushed ones only)."""
        cl = node.store.commitlog
        last = cl.last_index
        if self.sim.mode == "sync":
            while last >= cl.first_index and last > 0 and \
                    cl.position_of(last) + cl.size_of(last) > cl.flushed_position:
                last -= 1
        lo = max(cl.first_index, last - _HELD_ENTRIES + 1, 1)
        return {i: cl.term_at(i) for i in range(lo, last + 1)}

    def _holds(self, node, index: int, term: int) -> bool:
        cl = node.store.commitlog
        try:
            if cl.last_index < index or cl.term_at(index) != term:
                return False
            if self.sim.mode == "sync":
                return cl.position_of(index) + cl.size_of(index) <= cl.flushed_position
            return True
        except IndexOutOfRangeError:
            return False

    def acknowledged(self, batch, node, res) -> None:
        if hasattr(res, "positions"):
            pos, qids, offs = (list(map(int, res.positions)), list(map(int, res.queue_ids)),
                               list(map(int, res.queue_offsets)))
        else:
            pos, qids, offs = [res.position], [res.queue_id], [res.queue_offset]
        if len(pos) != len(batch.bodies):
            self.violation(f"producer {batch.pid:x} seq {batch.seq}: acknowledged {len(pos)} "
                           f"positions for {len(batch.bodies)} messages")
        for body, q, off in zip(batch.bodies, qids, offs):
            key = (q, off)
            prev = self.acked.setdefault(key, body)
            if prev != body:
                self.violation(f"two messages acknowledged at {key}: {prev!r}, {body!r}")
            at = self.acked_at.setdefault(body, key)
            if at != key:
                self.violation(f"{body!r} acknowledged at {at} and at {key}")
            read = self.seen.get(key)
            if read is not None and read != body:
                self.violation(f"{body!r} acknowledged at {key}, where {read!r} was read")
        self.acked_messages += len(batch.bodies)
        self._check_majority(node, max(pos), batch)

    def _check_majority(self, node, position: int, batch) -> None:
        rec = node.store.commitlog.decode_at(position)
        holders = []
        for m in self.sim.members.values():
            if (m.node is not None and self._holds(m.node, rec.index, rec.term)) \
                    or m.held.get(rec.index) == rec.term:
                holders.append(m.id)
        if len(holders) * 2 <= len(self.sim.members):
            self.violation(f"producer {batch.pid:x} seq {batch.seq} acknowledged by {node.id} "
                           f"with entry {rec.index} (term {rec.term}) held by {holders} only")

    def consume(self, member, q: int, rng) -> None:
        store = member.node.store
        try:
            lo, hi = store.min_offset(TOPIC, q), store.max_offset(TOPIC, q)
            if hi <= lo:
                return
            off = rng.randrange(lo, hi)
            msgs = store.get(TOPIC, q, off, 32)
        except QuorumlogError:
            return           # (no such topic yet, a store closing)
        for k, msg in enumerate(msgs):
            o = msg.queue_offset
            if o != off + k:
                self.violation(f"{member.id} read queue {q} from {off}: offset {o} at {k}")
                return
            body = msg.body
            prev = self.seen.setdefault((q, o), body)
            if prev != body:
                self.violation(f"{member.id} read {body!r} at {(q, o)}, earlier {prev!r}")
            a = self.acked.get((q, o))
            if a is not None and a != body:
                self.violation(f"{member.id} read {body!r} at {(q, o)}, acknowledged {a!r}")

    # ------------------------------------------------------------------ after the last heal
    def converged(self) -> bool:
        sim = self.sim
        live = sim.live()
        if len(live) != len(sim.members):
            return False
        leaders = [m for m in live if m.node.role == Role.LEADER and m.node.ready_to_serve]
        if len(leaders) != 1:
            return False
        core = leaders[0].node.core
        if set(core.voters) != set(sim.members):
            sim.change_members()       # (a member removed by the nemesis comes back)
            return False
        if any(m.node.core.recovering_term for m in live):
            return False
        ends = {(m.node.applied_index, m.node.store.commitlog.last_index,
                 m.node.store.commitlog.last_term) for m in live}
        if len(ends) != 1:
            return False
        applied, last, _ = ends.pop()
        return applied == last == core.commit_index

    async def converge(self, deadline: float) -> bool:
        sim = self.sim
        while not self.converged():
            if sim.loop.time() > deadline:
                why = self.recovery_stop()
                if why is not None and sim.mode == "async" and sim.stats.get("power_losses"):
                    sim.stats["stopped_for_recovery"] = 1
                    sim.res.stopped = (f"{STOPPED_FOR_RECOVERY}: {why}: {self.states()}")
                    self._check_committed_prefixes()
                else:
                    self.violation("no convergence after the last heal: " + self.states()
                                   + (f" [{STOPPED_FOR_RECOVERY}? {why}]" if why else ""))
                return False
            await asyncio.sleep(0.05)
            await sim.reap_failed()
            await sim.restart_due(0, force=True)
        return True

    def recovery_stop(self) -> str | None:
        """Why no leader can be elected by the recovery rules (R2), or None if some replica
        could win: a live one that may campaign, with a quorum of its latest voters live, not
        recovering and with logs not newer than its own (itself included if a voter)."""
        live = {m.id: m.node for m in self.sim.live()}

        def end(n):
            cl = n.store.commitlog
            return (cl.last_term, cl.last_index)
        for cid, c in live.items():
            core = c.core
            if not core.may_campaign():
                continue
            ok = [v for v in core.voters if v in live and not live[v].core.recovering_term
                  and end(live[v]) <= end(c)]
            if len(ok) >= core.quorum:
                return None
        rec = sorted(i for i, n in live.items() if n.core.recovering_term)
        if not rec:
            return None
        configs = sorted({f"{i}:{'+'.join(sorted(n.core.voters))}" for i, n in live.items()})
        return f"recovering {rec}, latest voters {configs}"

    def _check_committed_prefixes(self) -> None:
        """A stopped group: the live replicas' logs agree up to the smallest commit index."""
        logs = [(m.id, m.node.store.commitlog) for m in self.sim.live()]
        upto = min(min(cl.committed_index, cl.last_index) for _, cl in logs)
        digests = {i: _log_digest(cl, upto) for i, cl in logs}
        if len(set(digests.values())) != 1:
            self.violation(f"stopped group: replica logs differ up to {upto}: {digests}")

    def states(self) -> str:
        out = []
        for m in self.sim.members.values():
            n = m.node
            if n is None:
                out.append(f"{m.id}: down")
                continue
            cl = n.store.commitlog
            out.append(f"{m.id}: {n.role.name} term {n.term} commit {n.core.commit_index} "
                       f"applied {n.applied_index} last {cl.last_index}/{cl.last_term}"
                       f"{f' floor {n.core.recovering_term}' if n.core.recovering_term else ''}"
                       f"{' FAILED' if n.status()['failed'] else ''}")
        return "; ".join(out)

    def final(self) -> None:
        sim = self.sim
        if not self.converged():
            return                       # (reported by converge)
        nodes = [m.node for m in sim.live()]
        digests = {n.id: _log_digest(n.store.commitlog) for n in nodes}
        if len(set(digests.values())) != 1:
            self.violation(f"replica logs differ up to the commit index: {digests}")
        queues = {n.id: _queues(n.store) for n in nodes}
        first = nodes[0].id
        for nid, qs in queues.items():
            if qs != queues[first]:
                self.violation(f"queues of {nid} differ from {first}'s")
        self._check_messages(queues[first])

    def _check_messages(self, qs: dict) -> None:
        where: dict = {}
        for q, msgs in qs.items():
            offs = [o for o, _ in msgs]
            if offs and offs != list(range(offs[0], offs[0] + len(offs))):
                self.violation(f"queue {q}: offsets not dense")
            for o, body in msgs:
                where.setdefault(body, []).append((q, o))
        for body, keys in where.items():
            if len(keys) > 1:
                self.violation(f"{body!r} stored {len(keys)} times: {keys}")
        for body, key in self.acked_at.items():
            got = where.get(body)
            if got is None:
                self.violation(f"acknowledged {body!r} at {key} is lost")
            elif key not in got:
                self.violation(f"acknowledged {body!r} at {key} is at {got}")
        for b in self.sim.batches:
            if not b.reached and b.state != "acked":
                for body in b.bodies:
                    if body in where:
                        self.violation(f"{body!r}: every put refused, yet stored")
        stats = self.sim.stats          # (G > 1: the groups' sum)
        stats["stored"] = stats.get("stored", 0) + len(where)


def _log_digest(cl, upto: int | None = None) -> str:
    """SHA-256 of the log's records up to the commit index (the bytes replicas share)."""
    h = hashlib.sha256()
    i, upto = max(cl.first_index, 1), cl.committed_index if upto is None else upto
    while i <= upto:
        view, n = cl.read(i, upto + 1, 1 << 20)
        if n == 0:
            break
        h.update(view)
        i += n
    return f"{upto}:{h.hexdigest()[:16]}"


def _queues(store) -> dict:
    """queue -> [(offset, body), ...] of the simulation's topic."""
    out = {}
    try:
        n = store.queue_count(TOPIC)
    except QuorumlogError:
        return out
    for q in range(n):
        out[q] = [(m.queue_offset, m.body) for m in store.iter_messages(TOPIC, q)]
    return out
