"""Messages between Raft cores, and the result codes DLedger uses on the wire.

Messages are small __slots__ objects: a network driver encodes them into
frames; the simulator passes them by reference. An Append carries a *byte range* of the
leader's log as an opaque `payload` (for the native log: a memoryview of whole records) plus
its index range and size: the core never looks inside it, and one Append is one batch, never
one Python object per message.
"""
from __future__ import annotations

from enum import IntEnum


class Role(IntEnum):
    CANDIDATE = 0
    FOLLOWER = 1
    LEADER = 2


class VoteResult(IntEnum):
    """DLedger's VoteResponse.RESULT."""

    UNKNOWN = 0
    ACCEPT = 1
    REJECT_UNKNOWN_LEADER = 2
    REJECT_UNEXPECTED_LEADER = 3
    REJECT_EXPIRED_VOTE_TERM = 4
    REJECT_ALREADY_VOTED = 5
    REJECT_ALREADY_HAS_LEADER = 6
    REJECT_TERM_NOT_READY = 7
    REJECT_TERM_SMALL_THAN_LEDGER = 8
    REJECT_EXPIRED_LEDGER_TERM = 9
    REJECT_SMALL_LEDGER_END_INDEX = 10
    REJECT_TAKING_LEADERSHIP = 11
    # not DLedger's: the voter may have lost entries it acknowledged (raft/recovery.py)
    REJECT_RECOVERING = 12


class ParseResult(IntEnum):
    """DLedger's VoteResponse.ParseResult: what a candidate concluded from one vote round."""

    WAIT_TO_REVOTE = 0
    REVOTE_IMMEDIATELY = 1
    PASSED = 2
    WAIT_TO_VOTE_NEXT = 3


class Code(IntEnum):
    """Response codes of heartbeats and appends (DLedgerResponseCode subset + replication)."""

    SUCCESS = 0
    EXPIRED_TERM = 1
    INCONSISTENT_LEADER = 2
    TERM_NOT_READY = 3
    UNKNOWN_MEMBER = 4
    UNEXPECTED_MEMBER = 5
    # replication only: prev (index, term) does not match; hint_term/hint_index say where
    # the follower's conflicting term starts so the leader skips a whole term per round trip
    INCONSISTENT_STATE = 6
    # replication only: prev_index is beyond the follower's end (a batch was lost/reordered)
    GAP = 7
    # replication only: the follower already holds part of the batch (a re-send): hint_index
    # is its end, which matches the leader up to there
    OVERLAP = 8
    # install only: the follower's log cannot install an image (NotSupportedByLogError)
    UNSUPPORTED = 9


class DispatchState(IntEnum):
    """Per-follower dispatcher state (DLedger's EntryDispatcher)."""

    COMPARE = 0   # probing with empty appends for the match point
    TRUNCATE = 1  # match point found: one batch in flight that may truncate the follower's tail
    APPEND = 2    # pipelined: up to max_inflight_batches in flight
    INSTALL = 3   # behind the leader's retention: streaming the leader's retained log


SUCCESS = Code.SUCCESS  # hot-path alias


# Lanes: a driver may carry CONTROL messages (votes, heartbeats, their answers, transfer) on
# a connection of their own, so a retransmission stall behind megabytes of DATA (appends and
# their answers) does not hold up the heartbeats that keep a leader alive. One connection for
# both works too; docs/benchmarks.md measures both.
CONTROL = 0
DATA = 1


class Message:
    __slots__ = ("term", "src", "dst")
    type_name = "MSG"
    lane = CONTROL

    def __init__(self, term: int, src: str, dst: str):
        self.term = term
        self.src = src
        self.dst = dst

    def fields(self) -> str:
        return ""

    def describe(self) -> str:
        """One line, stable across runs: used by scenario scripts' golden output."""
        f = self.fields()
        return f"{self.src}->{self.dst} {self.type_name} t{self.term}" + (f" {f}" if f else "")

    __repr__ = describe


class VoteRequest(Message):
    """A vote request. With `pre` set it is a pre-vote: `term` is the term the sender would
    run in, and the receiver answers as it would vote without changing any state."""

    __slots__ = ("ledger_end_index", "ledger_end_term", "transfer", "pre")
    type_name = "VOTE"

    def __init__(self, term, src, dst, ledger_end_index, ledger_end_term, transfer=False,
                 pre=False):
        Message.__init__(self, term, src, dst)
        self.ledger_end_index = ledger_end_index
        self.ledger_end_term = ledger_end_term
        # set only by a transferee taking leadership: bypasses the live-leader rejection
        self.transfer = transfer
        self.pre = pre

    def fields(self):
        return (f"end={self.ledger_end_index}/t{self.ledger_end_term}"
                + (" transfer" if self.transfer else "") + (" pre" if self.pre else ""))


class VoteResponse(Message):
    __slots__ = ("req_term", "result", "pre")
    type_name = "VOTE_RESP"

    def __init__(self, term, src, dst, req_term, result, pre=False):
        Message.__init__(self, term, src, dst)
        self.req_term = req_term
        self.result = result
        self.pre = pre

    def fields(self):
        return f"{'pre ' if self.pre else ''}req_t{self.req_term} {self.result.name}"


class Heartbeat(Message):
    """`boot`, `boot_end`: the follower's incarnation the leader last heard from (its
    HeartbeatResponse.boot) and the leader's last index when it first heard from it -- a
    recovering follower that holds the leader's log through boot_end leaves recovery
    (raft/recovery.py, R3b). 0, 0 until the leader has heard from the follower."""

    __slots__ = ("commit_index", "seq", "boot", "boot_end")
    type_name = "HEARTBEAT"

    def __init__(self, term, src, dst, commit_index, seq, boot=0, boot_end=0):
        Message.__init__(self, term, src, dst)
        self.commit_index = commit_index
        self.seq = seq  # heartbeat round, so late answers to an old round are not counted
        self.boot = boot
        self.boot_end = boot_end

    def fields(self):
        # (boot ids are random: left out of the stable one-line form scenario scripts compare)
        return f"commit={self.commit_index} seq={self.seq}"


class HeartbeatResponse(Message):
    """`boot`: the responder's incarnation (a random id drawn when its core was built: a new
    one after every restart); `floor`: its recovery floor term, 0 unless recovering."""

    __slots__ = ("code", "seq", "boot", "floor")
    type_name = "HEARTBEAT_RESP"

    def __init__(self, term, src, dst, code, seq, boot=0, floor=0):
        Message.__init__(self, term, src, dst)
        self.code = code
        self.seq = seq
        self.boot = boot
        self.floor = floor

    def fields(self):
        return f"{self.code.name} seq={self.seq}" + (f" floor=t{self.floor}" if self.floor else "")


class Append(Message):
    """One batch (or, with count == 0, a COMPARE probe) of the leader's log."""

    __slots__ = ("prev_index", "prev_term", "first_index", "last_index", "entry_term",
                 "payload", "nbytes", "commit_index", "configs", "epoch")
    type_name = "APPEND"
    lane = DATA

    def __init__(self, term, src, dst, prev_index, prev_term, first_index, last_index,
                 entry_term, payload, nbytes, commit_index, configs, epoch):
        self.term = term  # (no Message.__init__ call: this is the replication hot path)
        self.src = src
        self.dst = dst
        self.prev_index = prev_index
        self.prev_term = prev_term
        self.first_index = first_index
        self.last_index = last_index      # first_index - 1 for a probe
        self.entry_term = entry_term      # a batch never spans terms: every entry has this term
        self.payload = payload            # opaque to the core (log.read's result)
        self.nbytes = nbytes
        self.commit_index = commit_index
        self.configs = configs            # ((index, voters, learners), ...) CONFIG entries here
        self.epoch = epoch                # dispatcher epoch, echoed so stale rejections are ignored

    def fields(self):
        if self.last_index < self.first_index:
            return f"probe prev={self.prev_index}/t{self.prev_term} commit={self.commit_index}"
        cfg = (" configs=" + str([(i, v, ln) if ln else (i, v) for i, v, ln in self.configs])
               if self.configs else "")
        return (f"prev={self.prev_index}/t{self.prev_term} [{self.first_index}..{self.last_index}]"
                f"/t{self.entry_term} commit={self.commit_index}{cfg}")


class AppendResponse(Message):
    __slots__ = ("code", "match_index", "req_prev", "req_last", "hint_index", "hint_term", "epoch")
    type_name = "APPEND_RESP"
    lane = DATA

    def __init__(self, term, src, dst, code, match_index, req_prev, req_last, hint_index,
                 hint_term, epoch):
        self.term = term
        self.src = src
        self.dst = dst
        self.code = code
        # highest index known to match the leader AND persisted (the durability hook): the
        # only number the leader counts towards commit
        self.match_index = match_index
        self.req_prev = req_prev
        self.req_last = req_last
        self.hint_index = hint_index
        self.hint_term = hint_term
        self.epoch = epoch

    def fields(self):
        s = f"{self.code.name} match={self.match_index}"
        if self.code != Code.SUCCESS:
            s += f" hint={self.hint_index}/t{self.hint_term}"
        return s


class TakeLeadership(Message):
    """Leader -> transferee: campaign at term + 1 now (DLedger's handleTakeLeadership)."""

    __slots__ = ("ledger_end_index",)
    type_name = "TAKE_LEADERSHIP"

    def __init__(self, term, src, dst, ledger_end_index):
        Message.__init__(self, term, src, dst)
        self.ledger_end_index = ledger_end_index

    def fields(self):
        return f"end={self.ledger_end_index}"


class InstallSegment(Message):
    """One chunk of the leader's retained log (InstallImage) for a follower behind its
    retention. `offset` is the chunk's byte offset in the image; `done` marks the last one,
    which also carries the configurations the follower needs ((index, voters, learners): the
    one in effect before the image, then those inside it)."""

    __slots__ = ("image", "offset", "chunk", "nbytes", "done", "configs", "commit_index", "epoch")
    type_name = "INSTALL"
    lane = DATA

    def __init__(self, term, src, dst, image, offset, chunk, nbytes, done, configs,
                 commit_index, epoch):
        Message.__init__(self, term, src, dst)
        self.image = image
        self.offset = offset
        self.chunk = chunk
        self.nbytes = nbytes
        self.done = done
        self.configs = configs
        self.commit_index = commit_index
        self.epoch = epoch

    # the image's fields under the names the wire codec gives them (net/codec.py)
    image_first = property(lambda self: self.image.first_index)
    image_prev_term = property(lambda self: -1 if self.image.prev_term is None
                               else self.image.prev_term)
    image_last = property(lambda self: self.image.last_index)
    image_last_term = property(lambda self: self.image.last_term)
    image_total = property(lambda self: self.image.total_bytes)
    image_meta = property(lambda self: self.image.meta)
    image_producers = property(lambda self: self.image.producers)

    def fields(self):
        im = self.image
        return (f"[{im.first_index}..{im.last_index}]/t{im.last_term} offset={self.offset}"
                f"+{self.nbytes}/{im.total_bytes}{' done' if self.done else ''}")


class InstallSegmentResponse(Message):
    """SUCCESS with next_offset (and, after the last chunk, match_index = image.last_index,
    durable); GAP with the offset the follower expects; UNSUPPORTED; or a _check_sender code."""

    __slots__ = ("code", "next_offset", "match_index", "image_last", "epoch")
    type_name = "INSTALL_RESP"
    lane = DATA

    def __init__(self, term, src, dst, code, next_offset, match_index, image_last, epoch):
        Message.__init__(self, term, src, dst)
        self.code = code
        self.next_offset = next_offset
        self.match_index = match_index
        self.image_last = image_last
        self.epoch = epoch

    def fields(self):
        return f"{self.code.name} next={self.next_offset} match={self.match_index}"
