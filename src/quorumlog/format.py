"""Pure-Python reference codec of the quorumlog on-disk format (docs/format.md, version 1).

This module is the executable reading of format.md: slow, dependency-free and strict. Tests
run the same cases through it and through the Cython codec (differential tests), tools use it
to inspect a store, and `ReferenceWriter` writes a whole store directory (segments, raft index,
checkpoint) byte-for-byte as the native CommitLog would, given the same inputs and clock
values, so the golden vector and the Java reader's tests need no native build.

Everything that decodes bytes validates every field it reads and raises
`quorumlog.errors.CorruptLogError` (never IndexError/struct.error/UnicodeDecodeError);
everything that encodes validates its arguments first and raises a specific
`quorumlog.errors.InvalidArgumentError` subclass, producing no bytes on error.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import struct
from typing import Iterator, Mapping, Sequence

from .errors import (
    CorruptLogError,
    InvalidArgumentError,
    InvalidQueueError,
    InvalidTopicError,
    MessageTooLargeError,
    TopicTypeError,
)

__all__ = [
    "FORMAT_VERSION", "MAGIC", "HEADER_SIZE", "HEADER_FIELDS", "HEADER_STRUCT", "HEADER_OFFSETS",
    "header_dtype", "INDEX_ENTRY_FIELDS", "index_entry_dtype",
    "TYPE_MESSAGE", "TYPE_NOOP", "TYPE_CONFIG", "TYPE_META", "TYPE_BLANK", "TYPE_NAMES",
    "MAX_TOPIC_BYTES", "MAX_TAGS_BYTES", "MAX_KEY_BYTES", "MAX_KEYS_BYTES",
    "MAX_PROPERTY_BYTES", "MAX_PROPS_BYTES", "MAX_QUEUE_ID", "DEFAULT_MAX_MESSAGE_BYTES",
    "MIN_SEGMENT_SIZE_BYTES", "SEGMENT_ALIGN_BYTES", "DEFAULT_SEGMENT_SIZE_BYTES",
    "DEFAULT_INDEX_FILE_ENTRIES", "INDEX_ENTRY_SIZE", "INDEX_ENTRY_STRUCT",
    "CHECKPOINT_SIZE", "CHECKPOINT_MAGIC", "CHECKPOINT_VERSION", "CHECKPOINT_FLAG_CLEAN",
    "CHECKPOINT_STRUCT",
    "Record", "IndexEntry", "Checkpoint",
    "crc32c", "fnv1a64", "tag_hash_of", "topic_hash_of", "check_topic_name",
    "encode_record", "encode", "encode_blank", "decode_record", "iter_records",
    "record_size", "fits_in_segment",
    "encode_index_entry", "decode_index_entry", "encode_checkpoint", "decode_checkpoint",
    "FILE_NAME_DIGITS", "segment_name", "index_file_name", "parse_file_name", "check_topic_name",
    "ReferenceWriter",
]

# --------------------------------------------------------------------------------------------
# Constants (format.md "Header", "Limits", "Raft index", "Checkpoint")

FORMAT_VERSION = 1
MAGIC = 0x4C51                      # bytes 51 4C on disk ("QL")
HEADER_SIZE = 96

TYPE_MESSAGE = 1
TYPE_NOOP = 2
TYPE_CONFIG = 3
TYPE_META = 4
TYPE_BLANK = 5
TYPE_NAMES = {TYPE_MESSAGE: "MESSAGE", TYPE_NOOP: "NOOP", TYPE_CONFIG: "CONFIG",
              TYPE_META: "META", TYPE_BLANK: "BLANK"}
CONTROL_TYPES = (TYPE_NOOP, TYPE_CONFIG, TYPE_META)

MAX_TOPIC_BYTES = 255
MAX_TAGS_BYTES = 255
MAX_KEY_BYTES = 65535               # one key (u16 length prefix)
MAX_KEYS_BYTES = 32768              # the whole keys field
MAX_PROPERTY_BYTES = 65535          # one property key or value (u16 length prefix)
MAX_PROPS_BYTES = 32768             # the whole properties field
MAX_QUEUE_ID = 65535                # 0 <= queue_id < 65536
DEFAULT_MAX_MESSAGE_BYTES = 4 << 20
MIN_SEGMENT_SIZE_BYTES = 65536
SEGMENT_ALIGN_BYTES = 4096
DEFAULT_SEGMENT_SIZE_BYTES = 1 << 30
DEFAULT_INDEX_FILE_ENTRIES = 1 << 20

U16_MAX = (1 << 16) - 1
U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1

# The one Python declaration of the 96-byte header (format.md "Header"): (field, struct code)
# in byte order, little-endian, no padding. HEADER_STRUCT, HEADER_OFFSETS and header_dtype()
# (the numpy scanners' view) are all derived from it.
HEADER_FIELDS = (
    ("crc", "I"), ("total_size", "I"), ("magic", "H"), ("version", "B"), ("type", "B"),
    ("flags", "I"), ("raft_index", "Q"), ("raft_term", "Q"), ("position", "Q"),
    ("queue_offset", "Q"), ("born_timestamp_ms", "q"), ("store_timestamp_ms", "q"),
    ("tag_hash", "q"), ("queue_id", "I"), ("topic_len", "H"), ("tags_len", "H"),
    ("keys_len", "I"), ("props_len", "I"), ("body_len", "I"), ("reserved", "I"),
)
HEADER_STRUCT = struct.Struct("<" + "".join(code for _, code in HEADER_FIELDS))
assert HEADER_STRUCT.size == HEADER_SIZE


def _offsets(fields) -> dict[str, int]:
    out, off = {}, 0
    for name, code in fields:
        out[name] = off
        off += struct.calcsize("<" + code)
    return out


HEADER_OFFSETS = _offsets(HEADER_FIELDS)    # field -> byte offset in the header

INDEX_ENTRY_SIZE = 24
# format.md "Raft index": position, term, size, type, then 3 zero bytes ("x" = padding).
INDEX_ENTRY_FIELDS = (("position", "Q"), ("term", "Q"), ("size", "I"), ("type", "B"),
                      ("pad", "3x"))
INDEX_ENTRY_STRUCT = struct.Struct("<" + "".join(code for _, code in INDEX_ENTRY_FIELDS))
assert INDEX_ENTRY_STRUCT.size == INDEX_ENTRY_SIZE

CHECKPOINT_SIZE = 128
CHECKPOINT_MAGIC = 0x50434C51       # bytes "QLCP"
CHECKPOINT_VERSION = 1
CHECKPOINT_FLAG_CLEAN = 1
# magic, version, flags, flushed_position, flushed_index, committed_index, committed_position,
# dispatched_position, min_position, segment_size_bytes, index_file_entries, written_at_ms,
# 44 reserved zero bytes (the CRC follows at 124)
CHECKPOINT_STRUCT = struct.Struct("<IHHQQQQQQQQq44x")
assert CHECKPOINT_STRUCT.size == 124

_U16 = struct.Struct("<H")

# --------------------------------------------------------------------------------------------
# Hashes


def _make_crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_CRC32C_TABLE = _make_crc32c_table()


def crc32c(data, value: int = 0) -> int:
    """CRC32C (Castagnoli) of `data`; pass a previous result as `value` to continue it.

    crc32c(b"123456789") == 0xE3069283, the same function as java.util.zip.CRC32C."""
    table = _CRC32C_TABLE
    crc = value ^ 0xFFFFFFFF
    for b in memoryview(data).cast("B"):
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3


def fnv1a64(data) -> int:
    """Plain FNV-1a 64 of `data` as an unsigned int (empty input -> the offset basis)."""
    h = _FNV_OFFSET
    for b in memoryview(data).cast("B"):
        h = ((h ^ b) * _FNV_PRIME) & U64_MAX
    return h


def _signed64(u: int) -> int:
    return u - (1 << 64) if u >= (1 << 63) else u


def tag_hash_of(tags: str | bytes | None) -> int:
    """The header's `tag_hash`: signed FNV-1a 64 of the UTF-8 tags; 0 for no/empty tags."""
    if not tags:
        return 0
    if isinstance(tags, str):
        tags = tags.encode("utf-8")
    return _signed64(fnv1a64(tags))


def topic_hash_of(topic: str | bytes) -> int:
    """RECORD_INFO's `topic_hash`: signed FNV-1a 64 of the UTF-8 topic; 0 for no topic."""
    if not topic:
        return 0
    if isinstance(topic, str):
        topic = topic.encode("utf-8")
    return _signed64(fnv1a64(topic))

# --------------------------------------------------------------------------------------------
# Record


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One decoded record (one Raft entry). BLANK records decode with index 0 and no content.

    `body` is bytes (reference codec) or a memoryview (native log, zero-copy); both compare
    equal to bytes with the same content. `size` is the header's total_size; decoders set
    it, hand-built Records may leave it 0 (encode ignores it)."""
    type: int
    index: int
    term: int
    position: int
    topic: str
    queue_id: int
    queue_offset: int
    born_timestamp_ms: int
    store_timestamp_ms: int
    flags: int
    tag_hash: int
    tags: str | None
    keys: tuple
    properties: dict
    body: bytes | memoryview
    size: int = 0           # total_size of the record (for BLANK: up to the segment end)

    def encode(self) -> bytes:
        return encode(self)


def _check_int(name, v, lo, hi, exc=InvalidArgumentError):
    # bool is an int subclass but never a meaningful index/offset: reject it as a wrong type.
    if type(v) is bool or not isinstance(v, int):
        raise exc(f"{name} must be an int, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise exc(f"{name}={v} out of range [{lo}, {hi}]")
    return v


def _utf8(name, s, exc=InvalidArgumentError) -> bytes:
    if not isinstance(s, str):
        raise exc(f"{name} must be a str, got {type(s).__name__}")
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise exc(f"{name} is not encodable as UTF-8: {e}") from None


def _topic_name_broken(b: bytes) -> bool:
    """format.md "Limits": a topic is also a directory name."""
    return b"\0" in b or b"/" in b or b in (b".", b"..")


def check_topic_name(topic) -> bytes:
    """The topic-name rule (format.md "Limits"), the one place it is written: a str of
    1..MAX_TOPIC_BYTES bytes of UTF-8, no NUL, no '/', not '.' or '..' (a topic is also a
    directory name). Returns the UTF-8 bytes; InvalidTopicError otherwise (TopicTypeError,
    also a TypeError, for a topic that is not a str)."""
    if not isinstance(topic, str):
        raise TopicTypeError(f"topic must be a str, got {type(topic).__name__}")
    b = _utf8("topic", topic, InvalidTopicError)
    if not 1 <= len(b) <= MAX_TOPIC_BYTES:
        raise InvalidTopicError(f"topic must be 1..{MAX_TOPIC_BYTES} bytes of UTF-8, got {len(b)}")
    if _topic_name_broken(b):
        raise InvalidTopicError(f"topic {topic!r} contains NUL or '/', or is '.' or '..' "
                                "(a topic is also a directory name)")
    return b


_topic_bytes = check_topic_name


def _tags_bytes(tags) -> bytes:
    if tags is None:
        return b""
    b = _utf8("tags", tags)
    if len(b) > MAX_TAGS_BYTES:
        raise InvalidArgumentError(f"tags are {len(b)} bytes, limit {MAX_TAGS_BYTES}")
    return b


def _keys_bytes(keys) -> bytes:
    if keys is None:
        return b""
    if isinstance(keys, (str, bytes, bytearray, memoryview)) or not isinstance(keys, (tuple, list)):
        raise InvalidArgumentError(f"keys must be a tuple/list of str, got {type(keys).__name__}")
    out = bytearray()
    for k in keys:
        kb = _utf8("key", k)
        if len(kb) > MAX_KEY_BYTES:
            raise InvalidArgumentError(f"a key is {len(kb)} bytes, limit {MAX_KEY_BYTES}")
        out += _U16.pack(len(kb))
        out += kb
        if len(out) > MAX_KEYS_BYTES:
            raise InvalidArgumentError(f"keys field exceeds {MAX_KEYS_BYTES} bytes")
    return bytes(out)


def _props_bytes(properties) -> bytes:
    if properties is None:
        return b""
    if not isinstance(properties, Mapping):
        raise InvalidArgumentError(
            f"properties must be a dict of str -> str, got {type(properties).__name__}")
    out = bytearray()
    for k, v in properties.items():
        kb = _utf8("property key", k)
        vb = _utf8("property value", v)
        if len(kb) > MAX_PROPERTY_BYTES or len(vb) > MAX_PROPERTY_BYTES:
            raise InvalidArgumentError(f"a property key or value exceeds {MAX_PROPERTY_BYTES} bytes")
        out += _U16.pack(len(kb))
        out += kb
        out += _U16.pack(len(vb))
        out += vb
        if len(out) > MAX_PROPS_BYTES:
            raise InvalidArgumentError(f"properties field exceeds {MAX_PROPS_BYTES} bytes")
    return bytes(out)


def _body_view(body) -> memoryview:
    try:
        mv = memoryview(body)
    except TypeError:
        raise InvalidArgumentError(f"body must be bytes-like, got {type(body).__name__}") from None
    if not mv.c_contiguous:
        raise InvalidArgumentError("body must be a C-contiguous buffer")
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


def record_size(topic="", tags=None, keys=(), properties=None, body_len=0) -> int:
    """total_size of a record with these fields (validates them like encode_record)."""
    topic_b = check_topic_name(topic) if topic else b""
    return (HEADER_SIZE + len(topic_b) + len(_tags_bytes(tags)) + len(_keys_bytes(keys))
            + len(_props_bytes(properties)) + body_len)


def fits_in_segment(position: int, size: int, segment_size_bytes: int) -> bool:
    """format.md: a record of `size` goes at `position` unless it would leave < 96 bytes."""
    remaining = segment_size_bytes - position % segment_size_bytes
    return size + HEADER_SIZE <= remaining


def encode_record(type: int, *, index: int, term: int, position: int, topic: str = "",
                  queue_id: int = 0, queue_offset: int = 0, born_timestamp_ms: int = 0,
                  store_timestamp_ms: int = 0, flags: int = 0, tags: str | None = None,
                  keys: Sequence[str] = (), properties: Mapping[str, str] | None = None,
                  body=b"", max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                  segment_size_bytes: int | None = None) -> bytes:
    """Encode one MESSAGE/NOOP/CONFIG/META record (BLANK: `encode_blank`).

    Validates every argument against format.md's limits first (nothing is produced on error).
    `segment_size_bytes`, when given, also enforces `total_size <= S - 96`."""
    if type is True or type is False or type not in (TYPE_MESSAGE,) + CONTROL_TYPES:
        raise InvalidArgumentError(f"record type {type!r} is not MESSAGE/NOOP/CONFIG/META")
    _check_int("index", index, 1, U64_MAX)
    _check_int("term", term, 0, U64_MAX)
    _check_int("position", position, 0, U64_MAX)
    _check_int("born_timestamp_ms", born_timestamp_ms, I64_MIN, I64_MAX)
    _check_int("store_timestamp_ms", store_timestamp_ms, I64_MIN, I64_MAX)
    _check_int("max_message_bytes", max_message_bytes, 0, U32_MAX)
    body_mv = _body_view(body)
    if type == TYPE_MESSAGE:
        topic_b = check_topic_name(topic)
        _check_int("queue_id", queue_id, 0, MAX_QUEUE_ID, InvalidQueueError)
        _check_int("queue_offset", queue_offset, 0, U64_MAX)
        _check_int("flags", flags, 0, U32_MAX)
        tags_b = _tags_bytes(tags)
        keys_b = _keys_bytes(keys)
        props_b = _props_bytes(properties)
    else:
        # Control records carry only a payload: every message field must be at its zero value.
        if topic or queue_id or queue_offset or flags or tags or keys or properties:
            raise InvalidArgumentError(
                f"{TYPE_NAMES[type]} records carry no topic/queue/flags/tags/keys/properties")
        if type == TYPE_NOOP and len(body_mv):
            raise InvalidArgumentError("NOOP records have an empty body")
        topic_b = tags_b = keys_b = props_b = b""
    if len(body_mv) > max_message_bytes:
        raise MessageTooLargeError(
            f"body is {len(body_mv)} bytes, max_message_bytes is {max_message_bytes}")
    total = HEADER_SIZE + len(topic_b) + len(tags_b) + len(keys_b) + len(props_b) + len(body_mv)
    if segment_size_bytes is not None and total > segment_size_bytes - HEADER_SIZE:
        raise MessageTooLargeError(
            f"record is {total} bytes, more than segment_size_bytes - {HEADER_SIZE}")
    if total > U32_MAX:
        raise MessageTooLargeError(f"record is {total} bytes, more than a u32 total_size")
    header = HEADER_STRUCT.pack(
        0, total, MAGIC, FORMAT_VERSION, type, flags, index, term, position, queue_offset,
        born_timestamp_ms, store_timestamp_ms, tag_hash_of(tags_b), queue_id, len(topic_b),
        len(tags_b), len(keys_b), len(props_b), len(body_mv), 0)
    buf = bytearray(header)
    buf += topic_b
    buf += tags_b
    buf += keys_b
    buf += props_b
    buf += body_mv
    struct.pack_into("<I", buf, 0, crc32c(memoryview(buf)[4:]))
    return bytes(buf)


def encode(record: Record, **limits) -> bytes:
    """Encode a Record (its tag_hash must match its tags; BLANK is encoded by position/size)."""
    if record.type == TYPE_BLANK:
        raise InvalidArgumentError("encode a BLANK with encode_blank(position, size)")
    if record.tag_hash != tag_hash_of(record.tags):
        raise InvalidArgumentError("record.tag_hash does not match record.tags")
    return encode_record(
        record.type, index=record.index, term=record.term, position=record.position,
        topic=record.topic, queue_id=record.queue_id, queue_offset=record.queue_offset,
        born_timestamp_ms=record.born_timestamp_ms, store_timestamp_ms=record.store_timestamp_ms,
        flags=record.flags, tags=record.tags, keys=record.keys, properties=record.properties,
        body=record.body, **limits)


def encode_blank(position: int, size: int) -> bytes:
    """A BLANK record at `position` filling `size` bytes (the rest of its segment)."""
    _check_int("position", position, 0, U64_MAX)
    _check_int("size", size, HEADER_SIZE, U32_MAX)
    buf = bytearray(size)
    HEADER_STRUCT.pack_into(buf, 0, 0, size, MAGIC, FORMAT_VERSION, TYPE_BLANK, 0, 0, 0,
                            position, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    struct.pack_into("<I", buf, 0, crc32c(memoryview(buf)[4:HEADER_SIZE]))
    return bytes(buf)

# --------------------------------------------------------------------------------------------
# Decoding (strict: every field read is validated)


def _corrupt(msg, offset, path=None):
    where = f" at offset {offset}" + (f" of {path}" if path else "")
    return CorruptLogError(msg + where, path=path, offset=offset)


def _dec_utf8(what, b, offset, path):
    try:
        return bytes(b).decode("utf-8")
    except UnicodeDecodeError:
        raise _corrupt(f"{what} is not valid UTF-8", offset, path) from None


def decode_record(buf, offset: int = 0, *, expected_position: int | None = None,
                  max_message_bytes: int | None = None, path: str | None = None) -> Record:
    """Decode and fully validate the record starting at `buf[offset]`.

    Checks magic, version, type, size bounds (96 <= total_size <= bytes available), CRC,
    the length fields' sum, every limit, reserved/zero fields, UTF-8, key and property
    framing, tag hash, and (when given) the position field. Raises CorruptLogError carrying
    `path` and `offset` on any failure; never reads past `buf`."""
    mv = memoryview(buf).cast("B") if not isinstance(buf, memoryview) or buf.format != "B" \
        else buf
    n = len(mv)
    if type(offset) is bool or not isinstance(offset, int) or not 0 <= offset <= n:
        raise InvalidArgumentError(f"offset {offset!r} outside a buffer of {n} bytes")
    avail = n - offset
    if avail < HEADER_SIZE:
        raise _corrupt(f"only {avail} bytes left, less than a {HEADER_SIZE}-byte header",
                       offset, path)
    (crc, total, magic, version, rtype, flags, index, term, position, queue_offset, born_ts,
     store_ts, tag_hash, queue_id, topic_len, tags_len, keys_len, props_len, body_len,
     reserved) = HEADER_STRUCT.unpack_from(mv, offset)
    if magic != MAGIC:
        raise _corrupt(f"bad magic 0x{magic:04x}", offset, path)
    if version != FORMAT_VERSION:
        raise _corrupt(f"unsupported format version {version}", offset, path)
    if rtype not in TYPE_NAMES:
        raise _corrupt(f"invalid record type {rtype}", offset, path)
    if not HEADER_SIZE <= total <= avail:
        raise _corrupt(f"total_size {total} outside [{HEADER_SIZE}, {avail}]", offset, path)
    crc_end = HEADER_SIZE if rtype == TYPE_BLANK else total
    actual = crc32c(mv[offset + 4:offset + crc_end])
    if actual != crc:
        raise _corrupt(f"CRC mismatch (stored 0x{crc:08x}, computed 0x{actual:08x})",
                       offset, path)
    if expected_position is not None and position != expected_position:
        raise _corrupt(f"position field {position} != actual position {expected_position}",
                       offset, path)
    if reserved != 0:
        raise _corrupt("reserved header field is not zero", offset, path)
    if rtype == TYPE_BLANK:
        if (flags or index or term or queue_offset or born_ts or store_ts or tag_hash
                or queue_id or topic_len or tags_len or keys_len or props_len or body_len):
            raise _corrupt("BLANK record with a non-zero field", offset, path)
        if bytes(mv[offset + HEADER_SIZE:offset + total]) != bytes(total - HEADER_SIZE):
            raise _corrupt("BLANK record with non-zero bytes after its header", offset, path)
        return Record(TYPE_BLANK, 0, 0, position, "", 0, 0, 0, 0, 0, 0, None, (), {}, b"", total)
    if total != HEADER_SIZE + topic_len + tags_len + keys_len + props_len + body_len:
        raise _corrupt(f"total_size {total} does not match the field lengths", offset, path)
    if index < 1:
        raise _corrupt("raft_index 0 on a non-BLANK record", offset, path)
    if tags_len > MAX_TAGS_BYTES or keys_len > MAX_KEYS_BYTES or props_len > MAX_PROPS_BYTES:
        raise _corrupt("tags/keys/properties length over its limit", offset, path)
    if max_message_bytes is not None and body_len > max_message_bytes:
        raise _corrupt(f"body_len {body_len} over max_message_bytes", offset, path)
    if queue_id > MAX_QUEUE_ID:
        raise _corrupt(f"queue_id {queue_id} out of range", offset, path)
    if rtype == TYPE_MESSAGE:
        if not 1 <= topic_len <= MAX_TOPIC_BYTES:
            raise _corrupt(f"MESSAGE topic_len {topic_len} outside 1..255", offset, path)
    else:
        if topic_len or flags or queue_offset or queue_id:
            raise _corrupt(f"{TYPE_NAMES[rtype]} record with message fields set", offset, path)
        if rtype == TYPE_NOOP and body_len:
            raise _corrupt("NOOP record with a body", offset, path)
    p = offset + HEADER_SIZE
    topic = _dec_utf8("topic", mv[p:p + topic_len], offset, path)
    if rtype == TYPE_MESSAGE and _topic_name_broken(topic.encode("utf-8")):
        raise _corrupt("topic contains NUL or '/', or is '.' or '..'", offset, path)
    p += topic_len
    tags_raw = bytes(mv[p:p + tags_len])
    tags = _dec_utf8("tags", tags_raw, offset, path) if tags_len else None
    if tag_hash != tag_hash_of(tags_raw):
        raise _corrupt("tag_hash does not match the tags", offset, path)
    p += tags_len
    keys = []
    end = p + keys_len
    while p < end:
        if end - p < 2:
            raise _corrupt("truncated key length in the keys field", offset, path)
        (klen,) = _U16.unpack_from(mv, p)
        p += 2
        if klen > end - p:
            raise _corrupt("a key runs past the keys field", offset, path)
        keys.append(_dec_utf8("key", mv[p:p + klen], offset, path))
        p += klen
    props = {}
    end = p + props_len
    while p < end:
        kv = []
        for _ in range(2):
            if end - p < 2:
                raise _corrupt("truncated length in the properties field", offset, path)
            (ln,) = _U16.unpack_from(mv, p)
            p += 2
            if ln > end - p:
                raise _corrupt("a property runs past the properties field", offset, path)
            kv.append(_dec_utf8("property", mv[p:p + ln], offset, path))
            p += ln
        if kv[0] in props:
            raise _corrupt(f"duplicate property key {kv[0]!r}", offset, path)
        props[kv[0]] = kv[1]
    body = bytes(mv[p:p + body_len])
    return Record(rtype, index, term, position, topic, queue_id, queue_offset, born_ts,
                  store_ts, flags, tag_hash, tags, tuple(keys), props, body, total)


def iter_records(segment_bytes, base_position: int, *, include_blank: bool = False,
                 path: str | None = None) -> Iterator[Record]:
    """Yield the records of one segment (`base_position` = its start position) in order.

    Stops at the end of the written data (a header whose bytes are all zero) or after the
    BLANK that ends the segment, which must reach exactly to the segment end. Validates each
    record's position and that indexes are consecutive and terms never decrease within the
    segment; raises CorruptLogError (path, offset) on the first bad record."""
    mv = memoryview(segment_bytes).cast("B")
    n = len(mv)
    off = 0
    prev = None
    while off < n:
        if n - off >= HEADER_SIZE and not any(mv[off:off + HEADER_SIZE]):
            return
        if n - off < HEADER_SIZE and not any(mv[off:]):
            return
        rec = decode_record(mv, off, expected_position=base_position + off, path=path)
        if rec.type == TYPE_BLANK:
            (size,) = struct.unpack_from("<I", mv, off + 4)
            if off + size != n:
                raise _corrupt("BLANK does not reach the segment end", off, path)
            if include_blank:
                yield rec
            return
        if prev is not None:
            if rec.index != prev.index + 1:
                raise _corrupt(f"raft index {rec.index} after {prev.index}", off, path)
            if rec.term < prev.term:
                raise _corrupt(f"term {rec.term} after {prev.term}", off, path)
        if n - (off + rec.size) < HEADER_SIZE:
            raise _corrupt("record leaves less than a header's room at the segment end",
                           off, path)
        prev = rec
        yield rec
        off += rec.size

# --------------------------------------------------------------------------------------------
# Raft index and checkpoint


@dataclasses.dataclass(frozen=True, slots=True)
class IndexEntry:
    position: int
    term: int
    size: int
    type: int


def encode_index_entry(position: int, term: int, size: int, type: int) -> bytes:
    _check_int("position", position, 0, U64_MAX)
    _check_int("term", term, 0, U64_MAX)
    _check_int("size", size, HEADER_SIZE, U32_MAX)
    _check_int("type", type, TYPE_MESSAGE, TYPE_META)
    return INDEX_ENTRY_STRUCT.pack(position, term, size, type)


def decode_index_entry(buf, offset: int = 0) -> IndexEntry | None:
    """The entry at `buf[offset:offset+24]`; None for an all-zero (unused) entry."""
    mv = memoryview(buf).cast("B")
    if len(mv) - offset < INDEX_ENTRY_SIZE or offset < 0:
        raise _corrupt("truncated raft index entry", offset)
    raw = mv[offset:offset + INDEX_ENTRY_SIZE]
    if not any(raw):
        return None
    position, term, size, rtype = INDEX_ENTRY_STRUCT.unpack(raw)
    if any(raw[21:24]) or rtype not in (TYPE_MESSAGE,) + CONTROL_TYPES or size < HEADER_SIZE:
        raise _corrupt("malformed raft index entry", offset)
    return IndexEntry(position, term, size, rtype)


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint:
    flags: int
    flushed_position: int
    flushed_index: int
    committed_index: int
    committed_position: int
    dispatched_position: int
    min_position: int
    segment_size_bytes: int
    index_file_entries: int
    written_at_ms: int

    @property
    def clean(self) -> bool:
        return bool(self.flags & CHECKPOINT_FLAG_CLEAN)


def encode_checkpoint(cp: Checkpoint) -> bytes:
    body = CHECKPOINT_STRUCT.pack(
        CHECKPOINT_MAGIC, CHECKPOINT_VERSION, cp.flags, cp.flushed_position, cp.flushed_index,
        cp.committed_index, cp.committed_position, cp.dispatched_position, cp.min_position,
        cp.segment_size_bytes, cp.index_file_entries, cp.written_at_ms)
    return body + struct.pack("<I", crc32c(body))


def decode_checkpoint(buf, path: str | None = None) -> Checkpoint:
    mv = memoryview(buf).cast("B")
    if len(mv) != CHECKPOINT_SIZE:
        raise _corrupt(f"checkpoint is {len(mv)} bytes, not {CHECKPOINT_SIZE}", 0, path)
    (magic, version, flags, *fields) = CHECKPOINT_STRUCT.unpack_from(mv, 0)
    if magic != CHECKPOINT_MAGIC:
        raise _corrupt(f"bad checkpoint magic 0x{magic:08x}", 0, path)
    if version != CHECKPOINT_VERSION:
        raise _corrupt(f"unsupported checkpoint version {version}", 4, path)
    (crc,) = struct.unpack_from("<I", mv, 124)
    if crc != crc32c(mv[:124]):
        raise _corrupt("checkpoint CRC mismatch", 124, path)
    if any(mv[80:124]):
        raise _corrupt("checkpoint reserved bytes are not zero", 80, path)
    return Checkpoint(flags, *fields)


FILE_NAME_DIGITS = 20   # segment, raft-index and consume-queue files: a zero-padded number


def segment_name(start_position: int) -> str:
    return f"{start_position:0{FILE_NAME_DIGITS}d}"


def index_file_name(first_index: int) -> str:
    return f"{first_index:0{FILE_NAME_DIGITS}d}"


def parse_file_name(name: str) -> int | None:
    """The number a segment / raft-index file is named by; None for any other name."""
    if len(name) != FILE_NAME_DIGITS or not name.isascii() or not name.isdigit():
        return None
    return int(name)


def _numpy_dtype(fields):
    import numpy as np  # numpy is a dependency of the package, not of this codec's core

    out = []
    for name, code in fields:
        if code.endswith("x"):
            out.append((name, f"V{code[:-1] or 1}"))
        else:
            out.append((name, np.dtype("<" + code)))
    dt = np.dtype(out)
    assert dt.itemsize == struct.calcsize("<" + "".join(c for _, c in fields))
    return dt


@functools.cache
def header_dtype():
    """numpy structured dtype of one header (HEADER_FIELDS): view 96-byte rows with it."""
    return _numpy_dtype(HEADER_FIELDS)


@functools.cache
def index_entry_dtype():
    """numpy structured dtype of one raft-index entry (INDEX_ENTRY_FIELDS)."""
    return _numpy_dtype(INDEX_ENTRY_FIELDS)

# --------------------------------------------------------------------------------------------
# Reference writer


class ReferenceWriter:
    """Builds a whole store directory in memory and writes it as the native CommitLog would.

    Deterministic by construction: the caller supplies every clock value
    (`store_timestamp_ms`, `written_at_ms`), so the output is a pure function of the calls.
    It models a leader log that is appended to and then closed cleanly:
    `commitlog/<20d>` segments of `segment_size_bytes` (BLANK-filled tails, zero after the
    last record), `index/<20d>` raft-index files of `index_file_entries` × 24 bytes, and a
    clean checkpoint (flags=1, flushed_position = end position). It writes no LOCK or abort.
    Control records get born_timestamp_ms = store_timestamp_ms (docs/format.md)."""

    def __init__(self, *, segment_size_bytes: int = MIN_SEGMENT_SIZE_BYTES,
                 index_file_entries: int = DEFAULT_INDEX_FILE_ENTRIES,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES):
        _check_int("segment_size_bytes", segment_size_bytes, MIN_SEGMENT_SIZE_BYTES, U64_MAX)
        if segment_size_bytes % SEGMENT_ALIGN_BYTES:
            raise InvalidArgumentError("segment_size_bytes must be a multiple of 4096")
        _check_int("index_file_entries", index_file_entries, 1, U64_MAX)
        self.segment_size_bytes = segment_size_bytes
        self.index_file_entries = index_file_entries
        self.max_message_bytes = max_message_bytes
        self.segments: dict[int, bytearray] = {0: bytearray(segment_size_bytes)}
        self.entries: list[tuple[int, int, int, int]] = []   # (position, term, size, type)
        self.end_position = 0
        self.committed_index = 0
        self.dispatched_position = 0

    @property
    def last_index(self) -> int:
        return len(self.entries)

    @property
    def last_term(self) -> int:
        return self.entries[-1][1] if self.entries else 0

    def _place(self, raw: bytes, term: int, rtype: int) -> tuple[int, int]:
        S = self.segment_size_bytes
        pos = self.end_position
        seg_start = pos - pos % S
        self.segments[seg_start][pos - seg_start:pos - seg_start + len(raw)] = raw
        self.entries.append((pos, term, len(raw), rtype))
        self.end_position = pos + len(raw)
        return len(self.entries), pos

    def _position_for(self, size: int) -> int:
        """Where a record of `size` goes; writes the BLANK and opens a segment if needed."""
        S = self.segment_size_bytes
        pos = self.end_position
        if not fits_in_segment(pos, size, S):
            seg_start = pos - pos % S
            self.segments[seg_start][pos - seg_start:] = encode_blank(pos, S - (pos - seg_start))
            pos = seg_start + S
            self.segments[pos] = bytearray(S)
            self.end_position = pos
        return pos

    def _check_term(self, term):
        _check_int("term", term, 0, U64_MAX)
        if term < self.last_term:
            raise InvalidArgumentError(f"term {term} < last term {self.last_term}")

    def append(self, topic: str, body, *, term: int, store_timestamp_ms: int,
               queue_id: int = 0, queue_offset: int = 0, tags: str | None = None,
               keys: Sequence[str] = (), properties: Mapping[str, str] | None = None,
               born_timestamp_ms: int | None = None, flags: int = 0) -> tuple[int, int]:
        """Append a MESSAGE; returns (index, position). born defaults to the store time."""
        self._check_term(term)
        if born_timestamp_ms is None:
            born_timestamp_ms = store_timestamp_ms
        kw = dict(index=self.last_index + 1, term=term, topic=topic, queue_id=queue_id,
                  queue_offset=queue_offset, born_timestamp_ms=born_timestamp_ms,
                  store_timestamp_ms=store_timestamp_ms, flags=flags, tags=tags, keys=keys,
                  properties=properties, body=body, max_message_bytes=self.max_message_bytes,
                  segment_size_bytes=self.segment_size_bytes)
        size = len(encode_record(TYPE_MESSAGE, position=0, **kw))   # validates everything
        pos = self._position_for(size)
        return self._place(encode_record(TYPE_MESSAGE, position=pos, **kw), term, TYPE_MESSAGE)

    def append_control(self, type: int, payload=b"", *, term: int,
                       store_timestamp_ms: int) -> tuple[int, int]:
        if type not in CONTROL_TYPES:
            raise InvalidArgumentError(f"control record type {type!r} is not NOOP/CONFIG/META")
        self._check_term(term)
        kw = dict(index=self.last_index + 1, term=term, born_timestamp_ms=store_timestamp_ms,
                  store_timestamp_ms=store_timestamp_ms, body=payload,
                  max_message_bytes=self.max_message_bytes,
                  segment_size_bytes=self.segment_size_bytes)
        size = len(encode_record(type, position=0, **kw))
        pos = self._position_for(size)
        return self._place(encode_record(type, position=pos, **kw), term, type)

    def commit(self, index: int) -> None:
        _check_int("index", index, 0, self.last_index)
        self.committed_index = max(self.committed_index, index)

    def set_dispatched_position(self, position: int) -> None:
        _check_int("position", position, 0, self.end_position)
        self.dispatched_position = position

    def checkpoint(self, *, written_at_ms: int, clean: bool = True) -> Checkpoint:
        ci = self.committed_index
        cpos = self.entries[ci - 1][0] + self.entries[ci - 1][2] if ci else 0
        return Checkpoint(
            flags=CHECKPOINT_FLAG_CLEAN if clean else 0,
            flushed_position=self.end_position, flushed_index=self.last_index,
            committed_index=ci, committed_position=cpos,
            dispatched_position=self.dispatched_position, min_position=0,
            segment_size_bytes=self.segment_size_bytes,
            index_file_entries=self.index_file_entries, written_at_ms=written_at_ms)

    def files(self, *, written_at_ms: int) -> dict[str, bytes]:
        """Relative path -> content of every file a clean close leaves (LOCK excluded)."""
        out = {}
        for start, seg in sorted(self.segments.items()):
            out[f"commitlog/{segment_name(start)}"] = bytes(seg)
        N = self.index_file_entries
        nfiles = max(1, -(-self.last_index // N))
        for k in range(nfiles):
            buf = bytearray(N * INDEX_ENTRY_SIZE)
            for i in range(k * N, min((k + 1) * N, self.last_index)):
                buf[(i - k * N) * INDEX_ENTRY_SIZE:(i - k * N + 1) * INDEX_ENTRY_SIZE] = \
                    encode_index_entry(*self.entries[i])
            out[f"index/{index_file_name(k * N + 1)}"] = bytes(buf)
        out["checkpoint"] = encode_checkpoint(self.checkpoint(written_at_ms=written_at_ms))
        return out

    def write(self, path: str | os.PathLike, *, written_at_ms: int) -> dict[str, bytes]:
        """Write the store directory at `path` (created; existing files are overwritten)."""
        files = self.files(written_at_ms=written_at_ms)
        for rel, data in files.items():
            full = os.path.join(os.fspath(path), rel)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(data)
        return files
