"""Wire messages of the network layer besides Raft's: the connection handshake and the client
protocol (requests, responses, and the error codes that map to quorumlog's exceptions).

Plain data classes: codec.py holds the table that turns each into frame payload bytes (the
Raft messages themselves are quorumlog.raft.messages). Limits that the codec enforces on both
sides are defined here, next to the fields they bound.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from .. import errors as qe
from ..raft import errors as raft_errors
from ..raft.messages import CONTROL
from . import errors as ne

MAX_NODE_ID_BYTES = 64          # node ids and client ids, UTF-8
MAX_CLUSTER_ID_BYTES = 64
MAX_ADDRESS_BYTES = 255         # "host:port"
MAX_TOPIC_BYTES = 255           # as format.md
MAX_TAGS_BYTES = 255            # as format.md
MAX_ERROR_TEXT_BYTES = 1024
MAX_VOTERS = 64                 # per CONFIG entry carried on an APPEND
MAX_CONFIGS_PER_APPEND = 1024
# an idempotent producer's batches in flight at most (AsyncClient max_in_flight); a leader
# remembers at least this many batches per producer (NodeConfig.producer_batches_remembered),
# so every batch a client may retry is among them (docs/node.md "Idempotent produce")
MAX_PRODUCER_IN_FLIGHT = 8
MAX_BATCH_MESSAGES = 1 << 16    # bodies in one ProduceRequest / records in a FetchResponse
MAX_QUEUE_ID = 65535
# Raft groups one process hosts (node/groups.py): group ids 0..MAX_GROUPS-1 (a group is a
# store and a Raft core with its timers; the frame header's u16 could name 65,536)
MAX_GROUPS = 256
MAX_KEY_BYTES = 65535           # a message key, UTF-8 (as format.md)
MAX_KEY_HITS = 4096            # messages in one FindByKeyResponse (the store's max_key_hits)
MAX_INSTALL_META_BYTES = 1 << 20    # an install image's description (the store's state)
MAX_INSTALL_CONFIGS = 1 << 16       # configurations carried by an install's first chunk
MAX_INSTALL_PRODUCERS = 1 << 16     # producer snapshot entries of an install image
NONCE_BYTES = 32
PROOF_BYTES = 32                # HMAC-SHA256


def check_node_id(node_id, what: str = "node id", exc=ne.AuthConfigError) -> str:
    """A node or client id: a str of 1..MAX_NODE_ID_BYTES UTF-8 bytes, no control chars."""
    if not isinstance(node_id, str):
        raise exc(f"{what} must be a str, got {type(node_id).__name__}")
    n = len(node_id.encode("utf-8", "surrogatepass"))
    if not 1 <= n <= MAX_NODE_ID_BYTES:
        raise exc(f"{what} {node_id!r}: {n} bytes, must be 1..{MAX_NODE_ID_BYTES}")
    if not node_id.isprintable():
        raise exc(f"{what} {node_id!r} has non-printable characters")
    return node_id


# --- handshake (net/auth.py drives these) ------------------------------------------------

class AuthMode(IntEnum):
    NONE = 0          # insecure: ids and cluster id checked, no proof
    HMAC_SHA256 = 1


class Role(IntEnum):
    PEER = 1          # another replica of the cluster (Raft traffic)
    CLIENT = 2        # a producer/consumer/admin client
    PEER_CONTROL = 3  # another replica's control lane: votes and heartbeats only


PEER_ROLES = frozenset((Role.PEER, Role.PEER_CONTROL))   # proven with the cluster secret


class RejectReason(IntEnum):
    OTHER = 0
    WRONG_CLUSTER = 1
    UNKNOWN_NODE = 2
    BAD_PROOF = 3
    MODE_MISMATCH = 4
    ROLE_REFUSED = 5
    DUPLICATE = 6     # a connection to this peer already exists and wins
    GEOMETRY = 7      # the peer's log has another segment size: it cannot hold our bytes
    TOO_MANY_CONNECTIONS = 8   # the responder is at max_clients


@dataclass(slots=True)
class AuthHello:
    """Initiator -> responder: who I am, whom I dialled, my nonce."""
    mode: AuthMode
    role: Role
    cluster_id: str
    sender_id: str
    target_id: str | None      # None: a client that dialled an address, not a node id
    nonce: bytes
    segment_size_bytes: int = 0   # a replica's log geometry (0: a client, or not said)


@dataclass(slots=True)
class AuthChallenge:
    """Responder -> initiator: who I am and my nonce (sent only after the hello checked out)."""
    cluster_id: str
    responder_id: str
    nonce: bytes
    segment_size_bytes: int = 0   # as AuthHello's


@dataclass(slots=True)
class AuthProof:
    """Initiator -> responder: HMAC over the transcript (empty in AuthMode.NONE)."""
    proof: bytes


@dataclass(slots=True)
class AuthOk:
    """Responder -> initiator: its own HMAC, sent only after the initiator's proof verified."""
    proof: bytes


@dataclass(slots=True)
class AuthReject:
    reason: RejectReason
    text: str


# --- client protocol -----------------------------------------------------------------------

@dataclass(slots=True)
class ProduceRequest:
    """Append a batch to one topic. queue_id -1: the store picks (sharding). bodies are
    bytes-like; decoded bodies are memoryviews of the frame (no copy). Per-message keys and
    properties are not carried in version 1."""
    topic: str
    bodies: list
    queue_id: int = -1
    tags: str | None = None
    delay_level: int = 0
    producer_id: int = 0       # 0: no duplicate detection
    sequence: int = 0
    # the producer's lowest sequence not yet resolved (acknowledged or given up) at the
    # client, so the leader can tell a gap from a batch whose predecessors are settled;
    # 0: not given (any sequence above the last written is taken)
    base_sequence: int = 0


@dataclass(slots=True)
class ProduceResponse:
    first_index: int
    queue_id: int
    first_queue_offset: int    # the batch holds offsets first .. first + len(positions) - 1
    store_timestamp_ms: int
    # decoded: a tuple of ints; the leader encodes its batch's int64 array as it is
    positions: tuple = ()


@dataclass(slots=True)
class FetchRequest:
    """Read committed messages of one queue from `offset`; wait_ms > 0: long-poll that long
    for the first message when none is available."""
    topic: str
    queue_id: int
    offset: int
    max_messages: int = 32
    max_bytes: int = 1 << 20
    wait_ms: int = 0


@dataclass(slots=True)
class FetchResponse:
    """records: whole on-disk records (docs/format.md), one per message, decodable with
    quorumlog.format.decode_record; sent as views of the log's mapping."""
    next_offset: int
    min_offset: int
    max_offset: int
    records: list = field(default_factory=list)


@dataclass(slots=True)
class OffsetsRequest:
    topic: str
    queue_id: int
    timestamp_ms: int = -1     # >= 0: also look up the first offset stored at/after it


@dataclass(slots=True)
class OffsetsResponse:
    min_offset: int
    max_offset: int
    offset_for_timestamp: int = -1


@dataclass(slots=True)
class ConsumerOffsetRequest:
    """Commit (offset >= 0, to the leader: replicated through the log) or read (offset -1)
    the offset consumer group `group` has consumed (topic, queue_id) up to."""
    group: str
    topic: str
    queue_id: int
    offset: int = -1


@dataclass(slots=True)
class ConsumerOffsetResponse:
    offset: int = -1           # the group's committed offset; -1: it never committed one


@dataclass(slots=True)
class FindByKeyRequest:
    """Committed messages of `topic` whose keys include `key`, newest first."""
    topic: str
    key: str
    max_hits: int = 32


@dataclass(slots=True)
class FindByKeyResponse:
    records: list = field(default_factory=list)    # whole on-disk records, as FetchResponse


class AdminOp(IntEnum):
    STATUS = 0
    ADD_MEMBER = 1
    REMOVE_MEMBER = 2
    TRANSFER_LEADERSHIP = 3


@dataclass(slots=True)
class AdminRequest:
    op: AdminOp
    node_id: str | None = None     # the member to add/remove, the transfer target
    address: str | None = None     # "host:port" of a member being added


@dataclass(slots=True)
class AdminResponse:
    node_id: str
    role: int                      # quorumlog.raft.Role value
    term: int
    leader_id: str | None
    leader_address: str | None
    commit_index: int
    last_index: int
    voters: tuple = ()
    # a leader whose lease holds and whose term's first entry is committed (it serves writes
    # and lease reads now); False on followers and on a leader not (or no longer) serving
    ready_to_serve: bool = False


@dataclass(slots=True)
class GroupAdminRequest:
    """AdminRequest for one Raft group of a process that hosts many (node/groups.py)."""
    group: int
    op: AdminOp
    node_id: str | None = None
    address: str | None = None


@dataclass(slots=True)
class GroupAdminResponse:
    """AdminResponse of one group, and how many groups the member hosts (clients learn the
    placement's group count from it)."""
    groups: int
    group: int
    node_id: str
    role: int
    term: int
    leader_id: str | None
    leader_address: str | None
    commit_index: int
    last_index: int
    voters: tuple = ()
    ready_to_serve: bool = False   # as AdminResponse's


class ErrorCode(IntEnum):
    UNKNOWN = 1
    NOT_LEADER = 2
    LEADER_TRANSFERRING = 3
    BACKPRESSURE = 4
    INVALID_ARGUMENT = 5
    MESSAGE_TOO_LARGE = 6
    BATCH_TOO_LARGE = 7
    INVALID_TOPIC = 8
    INVALID_QUEUE = 9
    TOPIC_NOT_FOUND = 10
    OFFSET_OUT_OF_RANGE = 11
    DISK_FULL = 12
    LOG_CLOSED = 13
    INVALID_DELAY_LEVEL = 14
    PROPOSAL_LIMIT = 15
    MEMBERSHIP_CHANGE = 16
    TRANSFER = 17
    UNSUPPORTED = 18
    TIMEOUT = 19
    OUT_OF_ORDER_SEQUENCE = 20     # retriable: resend the producer's in-flight batches in order
    PRODUCER_SEQUENCE = 21         # not retriable: a sequence too old to tell (node/producers.py)
    MALFORMED_REQUEST = 22
    UNKNOWN_GROUP = 23             # a group id this member does not host



class RequestTimeoutError(ne.NetError):
    """The server gave up waiting (commit, long poll) before the request completed; the
    request may or may not have taken effect."""


class UnsupportedRequestError(ne.NetError):
    """The server does not serve this request type."""


class MalformedRequestError(qe.InvalidArgumentError):
    """The server could not decode the request (a field out of range, e.g. a negative
    offset or max_messages 0, a short or over-long payload): nothing was done, and the
    connection stays usable. The message names the field."""


class HeartbeatBatch:
    """The heartbeats of many Raft groups from one process to another in one frame (a
    process hosting many groups, node/host.py): entries (group, term, commit_index, seq,
    boot, boot_end), each one group's Heartbeat. A control-lane message; at most
    MAX_BATCH_GROUPS entries."""

    __slots__ = ("src", "dst", "entries")
    type_name = "HEARTBEAT_BATCH"
    lane = CONTROL

    def __init__(self, src, dst, entries):
        self.src, self.dst, self.entries = src, dst, tuple(entries)

    def describe(self) -> str:
        return f"{self.src}->{self.dst} {self.type_name} x{len(self.entries)}"


class HeartbeatResponseBatch(HeartbeatBatch):
    """The answers to a HeartbeatBatch's heartbeats (or several): entries (group, term,
    code, seq, boot, floor), each one group's HeartbeatResponse."""

    __slots__ = ()
    type_name = "HEARTBEAT_RESP_BATCH"


# heartbeats per batch frame: 42 bytes each, so a batch stays under a multi-group
# transport's 8 KiB control frames (node/host.py; a host with more groups sends several)
MAX_BATCH_GROUPS = 128


class QuietBeat:
    """Quiescence's exchange (raft/quiesce.py Q4; node/host.py), one per peer pair and
    direction per heartbeat interval, whatever the number of groups: `seq` the sender's
    round; `groups` (group, term, commit_index) of every group the sender leads quiesced
    (each a quiet heartbeat); `ack` the receiver's latest round the sender got (0: none) and
    `acked` the groups of that round the sender held quiesced, following the receiver, when
    it came (each a quiet heartbeat's answer). A control-lane message."""

    __slots__ = ("src", "dst", "seq", "groups", "ack", "acked")
    type_name = "QUIET_BEAT"
    lane = CONTROL

    def __init__(self, src, dst, seq, groups, ack, acked):
        self.src, self.dst, self.seq, self.ack = src, dst, seq, ack
        self.groups, self.acked = tuple(groups), tuple(acked)

    def describe(self) -> str:
        return (f"{self.src}->{self.dst} {self.type_name} #{self.seq} x{len(self.groups)} "
                f"ack #{self.ack} x{len(self.acked)}")


class UnknownGroupError(qe.InvalidArgumentError):
    """A request or a peer frame names a Raft group this process does not host (outside
    0..groups-1, or a group it did not open): refused, nothing changed."""


class LeaderRedirectError(raft_errors.NotLeaderError):
    """A server answered NOT_LEADER: `leader_id` is the leader it knows of (or None), and
    `leader_address` the leader's client address ("host:port", or None)."""

    def __init__(self, message: str, leader_id: str | None = None, term: int = 0,
                 leader_address: str | None = None):
        super().__init__(message, leader_id, term)
        self.leader_address = leader_address


# code -> the class a client raises; the reverse map is derived (most specific class wins
# because from_exception walks the exception's MRO)
ERROR_CLASSES: dict[ErrorCode, type] = {
    ErrorCode.UNKNOWN: qe.QuorumlogError,
    ErrorCode.NOT_LEADER: LeaderRedirectError,
    ErrorCode.LEADER_TRANSFERRING: raft_errors.LeaderTransferringError,
    ErrorCode.BACKPRESSURE: raft_errors.BackpressureError,
    ErrorCode.INVALID_ARGUMENT: qe.InvalidArgumentError,
    ErrorCode.MESSAGE_TOO_LARGE: qe.MessageTooLargeError,
    ErrorCode.BATCH_TOO_LARGE: qe.BatchTooLargeError,
    ErrorCode.INVALID_TOPIC: qe.InvalidTopicError,
    ErrorCode.INVALID_QUEUE: qe.InvalidQueueError,
    ErrorCode.TOPIC_NOT_FOUND: qe.TopicNotFoundError,
    ErrorCode.OFFSET_OUT_OF_RANGE: qe.OffsetOutOfRangeError,
    ErrorCode.DISK_FULL: qe.DiskFullError,
    ErrorCode.LOG_CLOSED: qe.LogClosedError,
    ErrorCode.INVALID_DELAY_LEVEL: qe.InvalidDelayLevelError,
    ErrorCode.PROPOSAL_LIMIT: raft_errors.ProposalLimitError,
    ErrorCode.MEMBERSHIP_CHANGE: raft_errors.MembershipChangeError,
    ErrorCode.TRANSFER: raft_errors.TransferError,
    ErrorCode.UNSUPPORTED: UnsupportedRequestError,
    ErrorCode.TIMEOUT: RequestTimeoutError,
    ErrorCode.OUT_OF_ORDER_SEQUENCE: qe.OutOfOrderSequenceError,
    ErrorCode.PRODUCER_SEQUENCE: qe.ProducerSequenceError,
    ErrorCode.MALFORMED_REQUEST: MalformedRequestError,
    ErrorCode.UNKNOWN_GROUP: UnknownGroupError,
}
_CODE_OF_CLASS = {cls: code for code, cls in ERROR_CLASSES.items()}
_CODE_OF_CLASS[raft_errors.NotLeaderError] = ErrorCode.NOT_LEADER


@dataclass(slots=True)
class ErrorResponse:
    """The answer to any request that failed. leader_* and term come with NOT_LEADER;
    min/max_offset with OFFSET_OUT_OF_RANGE (-1: not given)."""
    code: ErrorCode
    message: str = ""
    leader_id: str | None = None
    leader_address: str | None = None
    term: int = 0
    min_offset: int = -1
    max_offset: int = -1

    @classmethod
    def from_exception(cls, exc: BaseException, *, leader_address: str | None = None
                       ) -> "ErrorResponse":
        """The response a server sends for `exc` (any exception: unknown ones -> UNKNOWN,
        with the class name only, so no internals leak)."""
        code = ErrorCode.UNKNOWN
        for klass in type(exc).__mro__:
            if klass in _CODE_OF_CLASS:
                code = _CODE_OF_CLASS[klass]
                break
        if code is ErrorCode.UNKNOWN and not isinstance(exc, qe.QuorumlogError):
            text = type(exc).__name__
        else:
            text = str(exc)
        text = _clip_utf8(text, MAX_ERROR_TEXT_BYTES)
        r = cls(code, text)
        if code is ErrorCode.NOT_LEADER:
            r.leader_id = getattr(exc, "leader_id", None)
            r.term = getattr(exc, "term", 0) or 0
            r.leader_address = getattr(exc, "leader_address", None) or leader_address
        elif code is ErrorCode.OFFSET_OUT_OF_RANGE:
            lo, hi = getattr(exc, "min_offset", None), getattr(exc, "max_offset", None)
            r.min_offset = -1 if lo is None else lo
            r.max_offset = -1 if hi is None else hi
        return r

    def to_exception(self) -> qe.QuorumlogError:
        """The exception a client raises for this response."""
        klass = ERROR_CLASSES.get(self.code, qe.QuorumlogError)
        if klass is LeaderRedirectError:
            return LeaderRedirectError(self.message, self.leader_id, self.term,
                                       self.leader_address)
        if klass is qe.OffsetOutOfRangeError:
            return klass(self.message,
                         None if self.min_offset < 0 else self.min_offset,
                         None if self.max_offset < 0 else self.max_offset)
        return klass(self.message)


def _clip_utf8(text: str, limit: int) -> str:
    b = text.encode("utf-8", "replace")
    if len(b) <= limit:
        return text
    return b[:limit].decode("utf-8", "ignore")
