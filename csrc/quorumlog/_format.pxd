# The on-disk format of docs/format.md, declared once for both extensions (_commitlog and
# _consumequeue cimport it; it has no .pyx): the 96-byte record header, the 24-byte
# raft-index entry, the format limits, FNV-1a 64, the 20-digit file names and the topic rules.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.string cimport memchr

cdef enum:
    HDR = 96                  # record header bytes
    IDX_ENTRY = 24            # raft-index entry bytes
    MAGIC = 0x4C51
    VERSION = 1
    # record types
    T_MESSAGE = 1
    T_NOOP = 2
    T_CONFIG = 3
    T_META = 4
    T_BLANK = 5
    # limits (format.md "Limits")
    MAX_TOPIC = 255           # topic bytes (UTF-8)
    MAX_TAGS = 255            # tags bytes (UTF-8)
    MAX_KEYS_FIELD = 32768    # the whole keys field
    MAX_PROPS_FIELD = 32768   # the whole properties field
    MAX_STRING = 65535        # one key, property key or property value (u16 length prefix)
    MAX_QUEUE_ID = 65536      # queue ids are below this


# The record header, little-endian and packed (the CPU is checked to be little-endian when
# _commitlog is imported). The keys, properties and body follow it, in that order after the
# topic and tags.
cdef packed struct RecHeader:
    uint32_t crc              # CRC32C of the record from byte 4 on
    uint32_t total_size
    uint16_t magic
    uint8_t version
    uint8_t type
    uint32_t flags
    uint64_t raft_index
    uint64_t raft_term
    uint64_t position
    uint64_t queue_offset
    int64_t born_ts
    int64_t store_ts
    int64_t tag_hash
    uint32_t queue_id
    uint16_t topic_len
    uint16_t tags_len
    uint32_t keys_len
    uint32_t props_len
    uint32_t body_len
    uint32_t reserved


# One raft-index entry: entry i of the file whose first index is f*N+1 is at (i-1-f*N)*24.
cdef packed struct IdxEntry:
    uint64_t position
    uint64_t term
    uint32_t size
    uint8_t type
    uint8_t pad0
    uint8_t pad1
    uint8_t pad2


cdef inline uint64_t fnv1a(const char *p, Py_ssize_t n) noexcept nogil:
    """FNV-1a 64 of n bytes; 0 for none (the tag hash of a record without tags)."""
    cdef uint64_t h = 0xcbf29ce484222325ULL
    cdef Py_ssize_t i
    if n == 0:
        return 0
    for i in range(n):
        h = (h ^ <uint8_t>p[i]) * 0x100000001b3ULL
    return h


# What topic_fault finds wrong with a topic's UTF-8 bytes.
cdef enum:
    TOPIC_OK = 0
    TOPIC_LENGTH = 1          # not 1..MAX_TOPIC bytes
    TOPIC_CHARS = 2           # holds NUL or '/'
    TOPIC_DOTS = 3            # "." or "..": not a usable directory name


cdef inline int topic_fault(const char *p, Py_ssize_t n) noexcept nogil:
    """The topic rules (a topic names a directory of consume queues); the caller has the
    bytes as UTF-8 already and words its own error."""
    if n < 1 or n > MAX_TOPIC:
        return TOPIC_LENGTH
    if memchr(p, 0, n) != NULL or memchr(p, 47, n) != NULL:     # 47: '/'
        return TOPIC_CHARS
    if p[0] == 46 and (n == 1 or (n == 2 and p[1] == 46)):      # 46: '.'
        return TOPIC_DOTS
    return TOPIC_OK


cdef inline str numbered_name(int64_t first):
    """The file name of a segment, raft-index or consume-queue file: its first position,
    raft index or queue offset in 20 digits."""
    return "%020d" % first


cdef inline bint is_numbered_name(object name):
    return len(name) == 20 and name.isdigit()
