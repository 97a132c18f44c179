"""The message store: what a broker embeds (RocketMQ's DefaultMessageStore on our commit log).

    with quorumlog.open("/var/lib/broker") as store:
        r = store.put("orders", b"...", tags="paid")
        for m in store.get("orders", r.queue_id, r.queue_offset):
            m.body

All topics' messages go into one CommitLog; each (topic, queue) has a consume queue
(_consumequeue.pyx) of 20-byte entries pointing into it. The store assigns queue offsets from its
own per-queue counters and writes them into the records; the consume queues are derived data,
filled by dispatch from the log's record headers and rebuilt from the log when lost.

The package (each module imports only modules below it here -- services.py names PutRequest
for type checkers only -- and none reaches into another's internals):

    message_store.py  MessageStore, the facade (lock, lifecycle, timer thread, public API),
                      and open()
    raftlog.py        StoreRaftLog: the RaftLog a replicated store hands its Raft core
    installmeta.py    the store state an install image carries (topics, consumer offsets)
    writes.py         PutRequest, queue choice, queue offsets, THE append path, pending requests
    reads.py          segment mappings; get, offsets, timestamps
    dispatch.py       recovery, committed records -> consume queues, replicated offset counting
    topics.py         the topic registry, topics.json, the topic-name rule
    offsets.py        consumer-group offsets (META records applied at dispatch)
    keyindex.py       the message-key index (keyindex/ files, built behind dispatch)
    retention.py      segment deletion and the disk-full write gate
    schedule.py       delay levels        } both see the store only through
    services.py       StoreServices       } the StoreServices protocol
    files.py          atomic replacement of metadata files

THE COMMIT SEAM. One writer per log: every data record enters the log through
Writer.append(term, request), which assigns raft index, term, log position and queue offset
together. A record is read through a consume queue only once the log calls it committed
(dispatch never passes `commit_limit` = CommitLog.committed_position). Commit -> dispatch ->
reply is one call, `apply_committed(index)`.

Single replica (`replicated=False`): put / put_batch append with the store's term (1), then
commit and dispatch through apply_committed's own step (Dispatcher.commit): in async flush
mode at once, in sync mode after the flush that covers the batch (waited for outside the lock:
one flush serves every waiting producer). Nothing is left pending: the put returns the result.

Replicated, driven by a Raft core (quorumlog.raft.RaftCore) -- who calls what, in order:

    rlog = store.raft_log()            # once; from now on the log is written only via the core
    core = RaftCore(node_id, rlog, rng, ...)
    # a client's put, on the leader:
    req = store.prepare_put(topic, bodies, ..., on_done=reply)   # validates, writes nothing
    core.propose(req, req.count, req.nbytes)   # -> rlog.append_as_leader(term, req) = the
                                               #    store's append path (offsets, pending reply)
    # each Ready, after persisting hard_state, sending, flushing (-> core.on_persisted):
    if ready.commit_index is not None:
        upto = store.apply_committed(ready.commit_index)   # commit, dispatch, reply
        core.on_dispatched(upto)
    # RoleChanged away from LEADER: the outcome of every pending put is unknown
    store.abandon_pending(NotLeaderError(...))
    # delay levels, on the leader only:
    store.deliver_due(propose=lambda r: core.propose(r, r.count, r.nbytes))

A follower's log is written by the core through rlog.append_replicated (verbatim bytes) and
rlog.truncate_after (the store recounts its queue counters, and fails every pending request
whose entries were dropped with NotLeaderError: they were never committed). Once raft_log() is
taken, put / put_batch raise DrivenStoreError (they would write around the core).

Replicated without a core (tests, tools): put / put_batch append with `store.term` (settable,
never decreasing) and return at once; whoever commits calls commitlog.commit(i) and then
store.dispatch() (or apply_committed(i)).

Replicated mode and queue offsets: records that arrive through append_replicated carry queue
offsets the store did not hand out. Dispatch raises the counters past every queue's end, and
before each own append the store counts the records replicated since its last count,
uncommitted ones included (recounting from the consume queues after a Raft truncation), so an
offset is never handed out twice.

Durable dispatch, topics.json, reads through the store's own segment mappings, delay levels
and retention: see dispatch.py, topics.py, reads.py, schedule.py and retention.py.
"""
from .._consumequeue import Message
from .message_store import MessageStore, open  # noqa: A004  (the store's open())
from .raftlog import StoreRaftLog
from .schedule import SCHEDULE_TOPIC
from .writes import BatchResult, PutRequest, PutResult

__all__ = ["open", "MessageStore", "PutResult", "BatchResult", "PutRequest", "Message",
           "StoreRaftLog", "SCHEDULE_TOPIC"]
