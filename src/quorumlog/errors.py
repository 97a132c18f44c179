"""Every exception quorumlog raises on purpose. Callers catch these, never bare Exception."""


class QuorumlogError(Exception):
    """Base class of all quorumlog errors."""


class InvalidArgumentError(QuorumlogError, ValueError):
    """An argument is out of range or malformed; nothing was changed."""


class MessageTooLargeError(InvalidArgumentError):
    """A message exceeds max_message_bytes; nothing was written."""


class InvalidTopicError(InvalidArgumentError):
    """Topic empty, too long, or not valid UTF-8 / allowed characters."""


class InvalidQueueError(InvalidArgumentError):
    """queue_id out of range for the topic."""


# Wrong argument types are bad input like any other: each class is a TypeError *and* the
# specific quorumlog error, so callers can catch either (and `except TypeError` code written
# against plain Python APIs keeps working). TopicTypeError and QueueTypeError are also
# InvalidTypeError (= ArgumentTypeError), so one except clause catches every type error.
class InvalidTypeError(InvalidArgumentError, TypeError):
    """An argument has the wrong type; nothing was changed."""


ArgumentTypeError = InvalidTypeError   # the name the commit log first exported


class TopicTypeError(InvalidTopicError, InvalidTypeError):
    """The topic is not a str; nothing was changed."""


class QueueTypeError(InvalidQueueError, InvalidTypeError):
    """queue_id is not an int; nothing was changed."""


class LogClosedError(QuorumlogError):
    """The log or store has been closed."""


class LockedError(QuorumlogError):
    """Another process (or another open in this process) holds the directory's LOCK."""


class NotAStoreError(QuorumlogError):
    """The path is not a store directory: it does not exist, is a file, holds files that are
    not a store's, or is empty where creating a store was not asked for. Nothing was created
    or changed."""


class ReadOnlyError(QuorumlogError):
    """A write to a store (or log) opened with read_only=True; nothing was written."""


class CorruptLogError(QuorumlogError):
    """A bad record with intact data after it: committed data is damaged.

    Carries `path` (the segment file) and `offset` (byte offset inside that file)."""

    def __init__(self, message, path=None, offset=None):
        super().__init__(message)
        self.path = path
        self.offset = offset


class CorruptQueueError(CorruptLogError):
    """A consume-queue entry does not name a record of its queue (derived data is damaged;
    the log is not). The store rebuilds the queue from the log when it meets one; it reaches
    a caller only when the rebuild did not cure it.

    `path` is the consume-queue file, `offset` the entry's byte offset in it; `topic` and
    `queue_id` name the queue."""

    def __init__(self, message, path=None, offset=None, *, topic=None, queue_id=None):
        super().__init__(message, path, offset)
        self.topic = topic
        self.queue_id = queue_id


class DiskFullError(QuorumlogError, OSError):
    """No space to preallocate a segment or index file (or disk use above the write limit).

    The log stays readable and consistent; appends succeed again once space is freed."""


class StorageError(QuorumlogError, OSError):
    """An operating-system error on one of the store's files (an I/O error, a directory where
    a file belongs, a file that cannot be opened): `path` names the file, `errno` the error
    when there is one."""

    def __init__(self, message, path=None, errno=None):
        super().__init__(message)
        self.path = path
        self.errno = errno
        self.filename = path

    def __str__(self):
        # OSError's own __str__ formats "[Errno e] strerror: filename" once filename is set,
        # which would hide the message ("[Errno None] None: path")
        return str(self.args[0]) if self.args else ""


class LogFailedError(StorageError):
    """A flush of the log failed (an I/O error under the filesystem). A failed flush is never
    retried into success -- the kernel reports a write-back error once, and the data it
    failed to write is not written by a retry -- so the log refuses every write (appends,
    flushes, checkpoints, truncation, retention) until it is closed and reopened; recovery
    then keeps what reached the disk. The puts waiting for that flush fail with this error
    (their outcome is unknown); reads keep working."""


class ReplicationError(QuorumlogError):
    """A replicated byte range failed validation (CRC, index continuity, position, term)."""


class InstallError(ReplicationError):
    """An install image or one of its chunks failed validation (offset continuity, sizes,
    records, the image's CRC32C, its limits): refused, nothing was staged or replaced."""


class IndexOutOfRangeError(QuorumlogError, IndexError):
    """A raft index or position outside what the log holds."""


class TopicNotFoundError(QuorumlogError, KeyError):
    """Topic does not exist and auto-creation is off."""


class AuthenticationError(QuorumlogError):
    """The server refused this client's credentials: a wrong secret, cluster id or client id,
    or a secured server and an insecure client. Not retried: every member shares the
    credentials, so another attempt fails the same way."""


class ConnectionLimitError(QuorumlogError):
    """The server refused the connection because it is at a connection limit
    (max_client_connections); nothing was sent. Other members, or a later attempt, may
    accept it."""


class ConfigError(QuorumlogError, ValueError):
    """Invalid configuration (file, environment or arguments)."""


# --- message store ---------------------------------------------------------------------------

class BatchTooLargeError(InvalidArgumentError):
    """A put_batch exceeds max_batch_messages or max_batch_bytes; nothing was written."""


class InvalidDelayLevelError(InvalidArgumentError):
    """delay_level outside 0..len(delay_levels); nothing was written."""


class OffsetOutOfRangeError(QuorumlogError, IndexError):
    """A queue offset outside [min_offset, max_offset] of its queue.

    Carries `min_offset` and `max_offset` so a consumer that fell behind retention can
    resume at min_offset."""

    def __init__(self, message, min_offset=None, max_offset=None):
        super().__init__(message)
        self.min_offset = min_offset
        self.max_offset = max_offset


class TooManyWaitersError(QuorumlogError):
    """A long-poll get() beyond max_get_waiters concurrent waiters; retry later or poll."""


class DrivenStoreError(QuorumlogError):
    """A write around the Raft core: the store's log is written through its core
    (MessageStore.raft_log() was taken), so put / put_batch are refused; propose a
    prepare_put() request through RaftCore.propose instead. Nothing was written."""


# -- idempotent producers (node/producers.py; docs/node.md "Idempotent produce") ------------
class DuplicateBatchError(QuorumlogError):
    """The leader's log already holds this (producer id, sequence) batch (a client's retry):
    nothing was appended; it is answered with the original's positions once committed."""

    def __init__(self, message: str, first_index: int, last_index: int, term: int):
        super().__init__(message)
        self.first_index = first_index
        self.last_index = last_index
        self.term = term


class ProducerSequenceError(InvalidArgumentError):
    """Not retriable: the batch's sequence is not above the producer's last written one and
    is not among the batches the leader remembers, so whether it was written cannot be told
    (a batch retried after more than the window of later batches); nothing was appended."""


class OutOfOrderSequenceError(QuorumlogError):
    """Retriable: the leader does not hold the batch before this one (sequence - 1) and the
    client still has it in flight. Nothing was appended; the client resends its in-flight
    batches in sequence order (a new leader after a failover got them out of order)."""
