"""Table-driven codec: every wire message (Raft, handshake, client) <-> frame payload bytes.

One `register(type_code, cls, fields)` line per message type. A field is (attribute name,
kind); the payload is the fixed-size fields in declaration order (one struct), then the
variable-size fields in declaration order (docs/net.md lists every table). Every kind checks
its value on encode (EncodeError, nothing produced) and on decode (CodecError), so what one
side can send the other accepts, and nothing a peer sends reaches Raft or the server
unchecked: an enum value outside its enum, a negative index, an over-long node id, a short or
over-long payload all raise CodecError (a quorumlog.errors.QuorumlogError), never
struct.error/UnicodeDecodeError/IndexError.

Raft messages do not carry src/dst on the wire: the receiver fills them from the
authenticated connection (src = the peer, dst = this node), so a peer cannot speak as another.

Zero copy: an APPEND's payload and large byte fields (produce bodies, fetched records) stay
separate buffers in `encode`'s output (write each with transport.write), and decode to
memoryviews of the received frame.

Adding a Raft message type: a class in raft/messages.py and one `_raft(code, Cls, [...])`
line below (fields in any order; keyword names must match the constructor's).
"""
from __future__ import annotations

import inspect
import operator
import struct
from typing import Any, Callable

from ..raft.log import InstallImage
from ..raft.messages import (Append, AppendResponse, Code, Heartbeat, HeartbeatResponse,
                             InstallSegment, InstallSegmentResponse, TakeLeadership,
                             VoteRequest, VoteResponse, VoteResult)
from . import messages as m
from .errors import CodecError, EncodeError, FrameTooLargeError
from .framing import DEFAULT_MAX_FRAME_BYTES, HEADER_SIZE, encode_header

__all__ = ["register", "encode", "encode_payload", "decode", "decode_frame", "frame_decoders",
           "frame_encoders", "spec_for",
           "spec_of_type", "types_of_channel", "AUTH", "RAFT", "CLIENT", "MessageSpec"]

AUTH, RAFT, CLIENT = "auth", "raft", "client"   # which connection state allows a type
MAX_I64 = (1 << 63) - 1
# byte fields at least this long are emitted as their own buffer instead of being copied
# into the frame's head (a memoryview of the log's mapping goes to the socket as it is)
ZERO_COPY_MIN_BYTES = 16 << 10


# --- field kinds ----------------------------------------------------------------------------

class Fixed:
    """A fixed-size integer field: struct format char + inclusive bounds (+ an optional
    conversion such as an IntEnum or bool)."""

    __slots__ = ("fmt", "lo", "hi", "conv", "desc")

    def __init__(self, fmt: str, lo: int, hi: int, conv: Callable | None = None, desc: str = ""):
        self.fmt, self.lo, self.hi, self.conv, self.desc = fmt, lo, hi, conv, desc

    def check(self, name: str, v, exc) -> Any:
        if type(v) is not int:
            try:
                v = operator.index(v)       # IntEnum, bool, numpy integers
            except TypeError:
                raise exc(f"{name}: expected an int, got {type(v).__name__}") from None
        if not self.lo <= v <= self.hi:
            raise exc(f"{name}={v} outside {self.lo}..{self.hi}" +
                      (f" ({self.desc})" if self.desc else ""))
        if self.conv is not None:
            try:
                return self.conv(v)
            except ValueError:
                raise exc(f"{name}={v} is not a valid {self.desc or self.conv.__name__}") from None
        return v


def Enum(cls, fmt: str = "B") -> Fixed:
    vals = [int(x) for x in cls]
    return Fixed(fmt, min(vals), max(vals), cls, cls.__name__)


U8 = Fixed("B", 0, 0xFF)
U16 = Fixed("H", 0, 0xFFFF)
U32 = Fixed("I", 0, 0xFFFFFFFF)
U64 = Fixed("Q", 0, (1 << 64) - 1)
INDEX = Fixed("q", 0, MAX_I64, None, "a non-negative index")     # raft index, term, offset
I64 = Fixed("q", -(1 << 63), MAX_I64)
OPT_I64 = Fixed("q", -1, MAX_I64, None, "-1 or a non-negative value")
QUEUE_ID = Fixed("i", 0, m.MAX_QUEUE_ID, None, "a queue id")
OPT_QUEUE_ID = Fixed("i", -1, m.MAX_QUEUE_ID, None, "-1 (any) or a queue id")
BOOL = Fixed("B", 0, 1, bool, "bool")


class _Out:
    """Encoder output: small pieces accumulate in `head`; a large buffer is appended as its
    own part (zero copy)."""

    __slots__ = ("parts", "head", "nbytes")

    def __init__(self):
        self.parts: list = []
        self.head = bytearray()
        self.nbytes = 0

    def add(self, b) -> None:
        self.head += b

    def add_view(self, v: memoryview) -> None:
        if v.nbytes < ZERO_COPY_MIN_BYTES:
            self.head += v
            return
        if self.head:
            self.parts.append(bytes(self.head))
            self.head = bytearray()
        self.parts.append(v)

    def finish(self) -> list:
        if self.head or not self.parts:
            self.parts.append(bytes(self.head))
        return self.parts


def _bytes_view(name: str, v) -> memoryview:
    try:
        mv = memoryview(v)
    except TypeError:
        raise EncodeError(f"{name}: expected a bytes-like object, got {type(v).__name__}") from None
    if not mv.c_contiguous:
        raise EncodeError(f"{name}: a non-contiguous buffer ({mv.nbytes} bytes with strides "
                          f"{mv.strides}): pass bytes(...) of it")
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    return mv


class Var:
    """A variable-size field. enc(name, value, out) appends; dec(buf, off, end, name) returns
    (value, new offset) after checking every length against what is left."""

    min_bytes = 0     # smallest encoding (lets a list refuse a count that cannot fit)

    def enc(self, name, v, out: _Out) -> None:
        raise NotImplementedError

    def dec(self, buf, off: int, end: int, name: str):
        raise NotImplementedError


def _need(n: int, off: int, end: int, name: str) -> None:
    if off + n > end:
        raise CodecError(f"{name}: needs {n} bytes at offset {off}, payload ends at {end}")


class Text(Var):
    """UTF-8 text with a u8 or u16 length (0 is None when optional)."""

    def __init__(self, max_bytes: int, *, min_bytes: int = 0, optional: bool = False,
                 node_id: bool = False):
        self.max_bytes = max_bytes
        self.min_len = 1 if node_id else min_bytes
        self.optional = optional
        self.node_id = node_id
        self.len_fmt = struct.Struct("<B" if max_bytes <= 0xFF else "<H")
        self.min_bytes = self.len_fmt.size

    def enc(self, name, v, out):
        if v is None:
            if not self.optional:
                raise EncodeError(f"{name}: None is not allowed")
            out.add(self.len_fmt.pack(0))
            return
        if not isinstance(v, str):
            raise EncodeError(f"{name}: expected a str, got {type(v).__name__}")
        if self.node_id:
            m.check_node_id(v, name, EncodeError)
        try:
            b = v.encode("utf-8")
        except UnicodeEncodeError:
            raise EncodeError(f"{name}: not encodable as UTF-8") from None
        if not self.min_len <= len(b) <= self.max_bytes:
            raise EncodeError(f"{name}: {len(b)} bytes, must be {self.min_len}..{self.max_bytes}")
        out.add(self.len_fmt.pack(len(b)) + b)

    def dec(self, buf, off, end, name):
        lf = self.len_fmt
        _need(lf.size, off, end, name)
        (n,) = lf.unpack_from(buf, off)
        off += lf.size
        if n == 0 and self.optional:
            return None, off
        if not self.min_len <= n <= self.max_bytes:
            raise CodecError(f"{name}: length {n} outside {self.min_len}..{self.max_bytes}")
        _need(n, off, end, name)
        try:
            s = str(buf[off:off + n], "utf-8")
        except UnicodeDecodeError:
            raise CodecError(f"{name}: not valid UTF-8") from None
        if self.node_id:
            m.check_node_id(s, name, CodecError)
        return s, off + n


class Blob(Var):
    """Bytes with a u32 (or u8) length; `exact` pins the length. Decodes to a memoryview of
    the frame (view=True, zero copy) or to bytes."""

    def __init__(self, max_bytes: int, *, exact: int | None = None, allowed=None,
                 view: bool = True):
        self.max_bytes = max_bytes
        self.exact = exact
        self.allowed = allowed            # optional set of allowed lengths
        self.view = view
        self.len_fmt = struct.Struct("<B" if max_bytes <= 0xFF else "<I")
        self.min_bytes = self.len_fmt.size

    def _check_len(self, n, name, exc):
        if n > self.max_bytes or (self.exact is not None and n != self.exact) \
                or (self.allowed is not None and n not in self.allowed):
            want = self.exact if self.exact is not None else (
                sorted(self.allowed) if self.allowed is not None else f"<= {self.max_bytes}")
            raise exc(f"{name}: {n} bytes, expected {want}")

    def enc(self, name, v, out):
        mv = _bytes_view(name, v)
        self._check_len(mv.nbytes, name, EncodeError)
        out.add(self.len_fmt.pack(mv.nbytes))
        out.add_view(mv)

    def dec(self, buf, off, end, name):
        lf = self.len_fmt
        _need(lf.size, off, end, name)
        (n,) = lf.unpack_from(buf, off)
        off += lf.size
        self._check_len(n, name, CodecError)
        _need(n, off, end, name)
        v = buf[off:off + n]
        return (v if self.view else bytes(v)), off + n


class Tail(Var):
    """Everything after the other fields (must be the last field): the APPEND payload.
    None encodes as nothing and an empty tail decodes as None (an APPEND probe)."""

    def enc(self, name, v, out):
        if v is None:
            return
        mv = _bytes_view(name, v)
        if mv.nbytes:
            out.add_view(mv)    # a large batch stays the log's view (zero copy)

    def dec(self, buf, off, end, name):
        return (buf[off:end] if end > off else None), end


class List(Var):
    """u32 count, then the items (each a Var or a Fixed)."""

    def __init__(self, item, max_count: int):
        self.item = item
        self.max_count = max_count
        self.min_bytes = 4
        self.item_fixed = struct.Struct("<" + item.fmt) if isinstance(item, Fixed) else None
        # tuples of plain ints (a QuietBeat's or a HeartbeatBatch's groups): one struct for
        # every item, no Python call per field (a QuietBeat carries up to every group)
        self.row = struct.Struct("<" + "".join(k.fmt for k in item.kinds)) if (
            isinstance(item, Tuple) and all(isinstance(k, Fixed) and k.conv is None
                                            for k in item.kinds)) else None

    def enc(self, name, v, out):
        if isinstance(v, (str, bytes, bytearray, memoryview)) or not hasattr(v, "__len__"):
            raise EncodeError(f"{name}: expected a sequence, got {type(v).__name__}")
        if len(v) > self.max_count:
            raise EncodeError(f"{name}: {len(v)} items > {self.max_count}")
        out.add(struct.pack("<I", len(v)))
        item = self.item
        if self.item_fixed is not None:
            out.add(self._pack_fixed(name, v))
            return
        if self.row is not None and self._rows_plain(v):
            out.add(b"".join([self.row.pack(*x) for x in v]))
            return
        for i, x in enumerate(v):
            item.enc(f"{name}[{i}]", x, out)

    def _pack_fixed(self, name, v) -> bytes:
        item = self.item
        fmt = f"<{len(v)}{item.fmt}"
        # (len(v) == 0, not `not v`: a numpy array -- a leader's batch positions -- has no
        # truth value; its items go through the per-item check below)
        if item.conv is None and (len(v) == 0 or (set(map(type, v)) == {int}
                                            and item.lo <= min(v) and max(v) <= item.hi)):
            # plain ints all in range (a produce ack's positions): no call per item
            return struct.pack(fmt, *v)
        checked = [item.check(f"{name}[{i}]", x, EncodeError) for i, x in enumerate(v)]
        return struct.pack(fmt, *checked)

    def _rows_plain(self, v) -> bool:
        """Every item a tuple of the right width of plain ints in its fields' bounds (else
        the per-item path encodes it, or names what is wrong)."""
        kinds = self.item.kinds
        if not all(type(x) is tuple and len(x) == len(kinds) for x in v):
            return False
        return all(_plain_in(k, col) for k, col in zip(kinds, zip(*v)))

    def dec(self, buf, off, end, name):
        _need(4, off, end, name)
        (n,) = struct.unpack_from("<I", buf, off)
        off += 4
        if n > self.max_count:
            raise CodecError(f"{name}: {n} items > {self.max_count}")
        item = self.item
        if self.row is not None and n:
            size = n * self.row.size
            _need(size, off, end, name)
            rows = list(self.row.iter_unpack(memoryview(buf)[off:off + size]))
            if all(_plain_in(k, col) for k, col in zip(item.kinds, zip(*rows))):
                return rows, off + size
            # (out of bounds: the per-item path below names the field)
        if self.item_fixed is not None:
            size = self.item_fixed.size
            _need(n * size, off, end, name)
            vals = struct.unpack_from(f"<{n}{item.fmt}", buf, off)
            if item.conv is None and (not vals or (item.lo <= min(vals)
                                                   and max(vals) <= item.hi)):
                # plain ints all in range (a produce ack's positions): no call per item
                return vals, off + n * size
            out = tuple(item.check(f"{name}[{i}]", x, CodecError) for i, x in enumerate(vals))
            return out, off + n * size
        if n * item.min_bytes > end - off:
            raise CodecError(f"{name}: {n} items cannot fit in {end - off} bytes")
        if _split_blobs is not None and type(item) is Blob and item.view \
                and item.len_fmt.size == 4 and item.exact is None and item.allowed is None:
            # a produce batch's bodies: lengths and bounds checked in one C loop
            # (quorumlog._clientframe), not one Python call per message
            return _split_blobs(buf, off, end, n, item.max_bytes, name)
        items = []
        for i in range(n):
            x, off = item.dec(buf, off, end, f"{name}[{i}]")
            items.append(x)
        return items, off


def _plain_in(kind: Fixed, col) -> bool:
    """A column of values: all plain ints within kind's bounds."""
    return (set(map(type, col)) == {int} and kind.lo <= min(col) and max(col) <= kind.hi)


class Tuple(Var):
    """A fixed sequence of kinds (e.g. a CONFIG entry: (index, voters))."""

    def __init__(self, *kinds):
        self.kinds = kinds
        self.min_bytes = sum(struct.calcsize("<" + k.fmt) if isinstance(k, Fixed) else k.min_bytes
                             for k in kinds)

    def enc(self, name, v, out):
        if not isinstance(v, (tuple, list)) or len(v) != len(self.kinds):
            raise EncodeError(f"{name}: expected a {len(self.kinds)}-tuple")
        for i, (k, x) in enumerate(zip(self.kinds, v)):
            if isinstance(k, Fixed):
                out.add(struct.pack("<" + k.fmt, k.check(f"{name}[{i}]", x, EncodeError)))
            else:
                k.enc(f"{name}[{i}]", x, out)

    def dec(self, buf, off, end, name):
        vals = []
        for i, k in enumerate(self.kinds):
            if isinstance(k, Fixed):
                sz = struct.calcsize("<" + k.fmt)
                _need(sz, off, end, name)
                (x,) = struct.unpack_from("<" + k.fmt, buf, off)
                vals.append(k.check(f"{name}[{i}]", x, CodecError))
                off += sz
            else:
                x, off = k.dec(buf, off, end, f"{name}[{i}]")
                vals.append(x)
        return tuple(vals), off


try:
    from .._clientframe import ack_positions as _ack_positions
    from .._clientframe import split_blobs as _split_blobs
    from .._clientframe import OneBodyProduce as _OneBodyProduce
except ImportError:   # the extension is not built: the Python loop below does the same
    _split_blobs = _ack_positions = _OneBodyProduce = None
try:
    from .._wirecodec import FixedLayout as _FixedLayout
    from .._wirecodec import FrameCodec as _FrameCodec
    from .. import _wirecodec
except ImportError:   # not built: the reference loops (Fixed.check per field) do it all
    _FixedLayout = _FrameCodec = _wirecodec = None

NODE_ID = Text(m.MAX_NODE_ID_BYTES, node_id=True)
OPT_NODE_ID = Text(m.MAX_NODE_ID_BYTES, node_id=True, optional=True)


# --- message specs --------------------------------------------------------------------------

class MessageSpec:
    __slots__ = ("type_code", "cls", "channel", "name", "fixed", "fixed_names", "var",
                 "all_names", "build", "check", "fixed_struct", "fast", "frame")

    def __init__(self, type_code, cls, channel, fields, build, check):
        self.type_code = type_code
        self.cls = cls
        self.channel = channel
        self.name = getattr(cls, "type_name", cls.__name__)
        self.fixed = [(n, k) for n, k in fields if isinstance(k, Fixed)]
        self.fixed_names = [n for n, _ in self.fixed]
        self.var = [(n, k) for n, k in fields if not isinstance(k, Fixed)]
        if any(isinstance(k, Tail) for _, k in self.var[:-1]):
            raise ValueError(f"{self.name}: a Tail field must be the last field")
        self.all_names = [n for n, _ in fields]
        self.fixed_struct = struct.Struct("<" + "".join(k.fmt for _, k in self.fixed))
        self.build = build
        self.check = check
        # the fixed fields in one C call (quorumlog._wirecodec); None: the reference loops
        self.fast = None if _FixedLayout is None or not self.fixed else _FixedLayout(
            self.fixed_names, [k.fmt for _, k in self.fixed], [k.lo for _, k in self.fixed],
            [k.hi for _, k in self.fixed], [k.conv for _, k in self.fixed])
        self.frame = None    # whole frames in one C call (_frame_fast, the hot Raft types)


_BY_CODE: dict[int, MessageSpec] = {}
_BY_CLASS: dict[type, MessageSpec] = {}


def register(type_code: int, cls: type, fields: list, *, channel: str,
             build: Callable | None = None, check: Callable | None = None) -> MessageSpec:
    """Add a message type. build(values: dict, src, dst) -> message (default: cls(**values),
    with term/src/dst for Raft messages); check(message) raises CodecError for a decoded
    message whose fields are each valid but inconsistent together."""
    if not 0 < type_code <= 0xFF:
        raise ValueError(f"type code {type_code} outside 1..255")
    if type_code in _BY_CODE or cls in _BY_CLASS:
        raise ValueError(f"{cls.__name__} / type {type_code:#04x} registered twice")
    if build is None:
        if channel == RAFT:
            def build(vals, src, dst, cls=cls):
                return cls(src=src, dst=dst, **vals)
        else:
            def build(vals, src, dst, cls=cls):
                return cls(**vals)
    spec = MessageSpec(type_code, cls, channel, fields, build, check)
    _BY_CODE[type_code] = spec
    _BY_CLASS[cls] = spec
    return spec


def spec_for(msg) -> MessageSpec:
    try:
        return _BY_CLASS[type(msg)]
    except KeyError:
        raise EncodeError(f"no wire encoding for {type(msg).__name__}") from None


def spec_of_type(type_code: int) -> MessageSpec | None:
    return _BY_CODE.get(type_code)


def types_of_channel(*channels: str) -> frozenset:
    """Frame type codes a connection in the given state may receive (FrameDecoder.known_types)."""
    return frozenset(c for c, s in _BY_CODE.items() if s.channel in channels)


def frame_decoders(*channels: str) -> tuple:
    """256 entries by frame type: the whole-frame decoder (`spec.frame`: FrameCodec, the
    produce frames') of each type of `channels` that has one, else None -- the table the C
    frame scan decodes with (FrameDecoder.codecs). What they decline, decode() decides."""
    return tuple(s.frame if s is not None and s.frame is not None and s.channel in channels
                 else None for s in (_BY_CODE.get(t) for t in range(256)))


def frame_encoders(*channels: str) -> dict:
    """{message class: its whole-frame encoder} of the types of `channels` that have one:
    encode(msg, request_id, group, max_frame_bytes, zero_copy_min_bytes) -> the frame's
    parts as encode() returns them, or None (declined: encode() decides, with its error)."""
    return {s.cls: s.frame for s in _BY_CODE.values()
            if s.frame is not None and s.channel in channels}


def encode_payload(msg) -> tuple[int, list]:
    """(type code, payload parts) for `msg`. Raises EncodeError naming the bad field."""
    spec = spec_for(msg)
    out = _Out()
    head = spec.fast.pack(msg) if spec.fast is not None else None
    if head is not None:
        out.add(head)
    elif spec.fixed:
        # the reference (and the path of anything the fast one refused: it raises here)
        vals = []
        for name, kind in spec.fixed:
            try:
                v = getattr(msg, name)
            except AttributeError:
                raise EncodeError(f"{spec.name}.{name} is missing") from None
            vals.append(kind.check(f"{spec.name}.{name}", v, EncodeError))
        out.add(spec.fixed_struct.pack(*vals))
    for name, kind in spec.var:
        kind.enc(f"{spec.name}.{name}", getattr(msg, name, None), out)
    return spec.type_code, out.finish()


def encode(msg, request_id: int = 0, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
           group: int = 0) -> list:
    """A whole frame for `msg` as a list of buffers: [header + small fields (+ the tail)].
    Small frames come back as one bytes object; a large payload stays a separate view so the
    caller writes it without a copy. group: the Raft group the frame belongs to (header
    bytes 6..7; 0 for a single-group process). Raises EncodeError / FrameTooLargeError."""
    spec = _BY_CLASS.get(type(msg))
    if spec is not None and spec.frame is not None:
        # the replication hot path in one C call; None: the reference below decides
        parts = spec.frame.encode(msg, request_id, group, max_frame_bytes, ZERO_COPY_MIN_BYTES)
        if parts is not None:
            return parts
    code, parts = encode_payload(msg)
    n = 0
    for p in parts:
        n += p.nbytes if type(p) is memoryview else len(p)
    if n + HEADER_SIZE > max_frame_bytes:
        raise FrameTooLargeError(f"{spec_for(msg).name} frame of {n + HEADER_SIZE} bytes is over "
                                 f"max_frame_bytes={max_frame_bytes}", n + HEADER_SIZE,
                                 max_frame_bytes)
    header = encode_header(code, n, request_id, 0, group)
    first = parts[0]
    if type(first) is bytes:
        parts[0] = header + first
    else:
        parts.insert(0, header)
    return parts


def decode(type_code: int, payload, src: str | None = None, dst: str | None = None, *,
           channels=None):
    """Decode one frame payload. src/dst fill a Raft message's sender/receiver (the
    authenticated peer and this node). channels: if given, the type must belong to one of
    them. Raises CodecError for anything malformed."""
    spec = _BY_CODE.get(type_code)
    if spec is None:
        raise CodecError(f"unknown message type {type_code:#04x}")
    if channels is not None and spec.channel not in channels:
        raise CodecError(f"{spec.name} ({type_code:#04x}) not allowed on a {'/'.join(channels)} "
                         f"connection")
    if spec.frame is not None:
        msg = spec.frame.decode(payload, src, dst)     # (None: the reference decides)
        if msg is not None:
            return msg
    buf = payload if type(payload) is memoryview else memoryview(payload)
    if buf.ndim != 1 or buf.itemsize != 1:
        buf = buf.cast("B")
    end = buf.nbytes
    fs = spec.fixed_struct
    if end < fs.size:
        raise CodecError(f"{spec.name}: payload of {end} bytes < {fs.size} fixed bytes")
    vals: dict = {}
    where = spec.name + "."
    try:
        fast = spec.fast.unpack(buf) if spec.fast is not None else None
        if fast is not None:
            vals = fast
        elif spec.fixed:
            # the reference (and the path of anything the fast one refused: it raises here)
            raw = fs.unpack_from(buf, 0)
            for (name, kind), v in zip(spec.fixed, raw):
                vals[name] = kind.check(where + name, v, CodecError)
        off = fs.size
        for name, kind in spec.var:
            vals[name], off = kind.dec(buf, off, end, where + name)
    except (struct.error, UnicodeDecodeError) as e:   # (every length is checked first)
        raise CodecError(f"{spec.name}: malformed payload: {e}") from None
    if off != end:
        raise CodecError(f"{spec.name}: {end - off} unexpected bytes after the last field")
    try:
        msg = spec.build(vals, src, dst)
    except (TypeError, ValueError) as e:
        raise CodecError(f"{spec.name}: {e}") from None
    if spec.check is not None:
        spec.check(msg)
    return msg


def decode_frame(frame, src: str | None = None, dst: str | None = None, *, channels=None):
    return decode(frame.type, frame.payload, src, dst, channels=channels)


# --- the tables -----------------------------------------------------------------------------
# Type codes: 0x01-0x0F handshake, 0x10-0x3F Raft, 0x40-0x7F client. Never reuse a code.

TERM = INDEX


def _raft(code, cls, fields, **kw):
    return register(code, cls, [("term", TERM)] + fields, channel=RAFT, **kw)


# `pre`: a pre-vote and its answer (the receiver changes no state for it); without it on the
# wire a pre-vote would arrive as a real vote
_raft(0x10, VoteRequest, [("ledger_end_index", INDEX), ("ledger_end_term", TERM),
                          ("transfer", BOOL), ("pre", BOOL)])
_raft(0x11, VoteResponse, [("req_term", TERM), ("pre", BOOL), ("result", Enum(VoteResult))])
# `boot` / `boot_end` / `floor`: a follower's incarnation and recovery (raft/recovery.py R3b)
_raft(0x12, Heartbeat, [("commit_index", INDEX), ("seq", INDEX), ("boot", INDEX),
                        ("boot_end", INDEX)])
_raft(0x13, HeartbeatResponse, [("code", Enum(Code)), ("seq", INDEX), ("boot", INDEX),
                                ("floor", TERM)])


def _build_append(v, src, dst):
    payload = v["payload"]
    v["configs"] = tuple((i, tuple(vs), tuple(ls)) for i, vs, ls in v["configs"])
    return Append(src=src, dst=dst, nbytes=0 if payload is None else payload.nbytes, **v)


def _check_append(a: Append) -> None:
    if a.first_index != a.prev_index + 1:
        raise CodecError(f"APPEND: first_index {a.first_index} != prev_index {a.prev_index} + 1")
    if a.last_index < a.prev_index:
        raise CodecError(f"APPEND: last_index {a.last_index} < prev_index {a.prev_index}")
    probe = a.last_index < a.first_index
    if probe != (a.payload is None):
        raise CodecError("APPEND: a probe carries no payload and a batch carries one")
    if a.configs and probe:
        raise CodecError("APPEND: a probe carries no CONFIG entries")
    if len(a.configs) > a.last_index - a.prev_index:
        raise CodecError("APPEND: more CONFIG entries than entries")
    for i, voters, _learners in a.configs:
        if not a.first_index <= i <= a.last_index:
            raise CodecError(f"APPEND: CONFIG index {i} outside {a.first_index}..{a.last_index}")
        if not voters:
            raise CodecError(f"APPEND: CONFIG entry {i} has no voters")


_raft(0x14, Append, [("prev_index", INDEX), ("prev_term", TERM), ("first_index", INDEX),
                     ("last_index", INDEX), ("entry_term", TERM), ("commit_index", INDEX),
                     ("epoch", INDEX),
                     # (index, voters, learners) of each CONFIG entry in the batch
                     ("configs", List(Tuple(INDEX, List(NODE_ID, m.MAX_VOTERS),
                                            List(NODE_ID, m.MAX_VOTERS)),
                                      m.MAX_CONFIGS_PER_APPEND)),
                     ("payload", Tail())],
      build=_build_append, check=_check_append)
_raft(0x15, AppendResponse, [("code", Enum(Code)), ("match_index", INDEX), ("req_prev", INDEX),
                             ("req_last", INDEX), ("hint_index", INDEX), ("hint_term", TERM),
                             ("epoch", INDEX)])
_raft(0x16, TakeLeadership, [("ledger_end_index", INDEX)])


def _frame_fast(cls, append: bool = False) -> None:
    """Encode and decode whole frames of `cls` in one C call (_wirecodec.FrameCodec): the
    messages every replicated entry costs. Its constructor is called positionally, each
    argument from the field of its name (or src, dst, and an APPEND's payload, nbytes and
    configs); the reference (encode_payload / the decode loop, spec.build, spec.check) stays
    the path of whatever the fast one declines."""
    spec = _BY_CLASS[cls]
    if spec.fast is None or _FrameCodec is None:
        return
    special = {"src": _wirecodec.ARG_SRC, "dst": _wirecodec.ARG_DST}
    if append:
        special.update(payload=_wirecodec.ARG_PAYLOAD, nbytes=_wirecodec.ARG_NBYTES,
                       configs=_wirecodec.ARG_CONFIGS)
    names = list(inspect.signature(cls).parameters)
    if set(names) != set(spec.fixed_names) | set(special) or \
            (append and [n for n, _ in spec.var] != ["configs", "payload"]) or \
            (not append and spec.var) or (spec.check is not None) != append:
        raise ValueError(f"{spec.name}: no frame fast path for its fields")
    args = [special[n] if n in special else spec.fixed_names.index(n) for n in names]
    checks = tuple(spec.fixed_names.index(n) for n in ("prev_index", "first_index",
                                                       "last_index")) if append else (0, 0, 0)
    spec.frame = _FrameCodec(spec.fast, spec.type_code, cls, args, append, checks)


_frame_fast(Append, append=True)
_frame_fast(AppendResponse)
_frame_fast(Heartbeat)
_frame_fast(HeartbeatResponse)

CONFIG_ENTRY = Tuple(INDEX, List(NODE_ID, m.MAX_VOTERS), List(NODE_ID, m.MAX_VOTERS))


def _build_install(v, src, dst):
    prev = v.pop("image_prev_term")
    image = InstallImage(v.pop("image_first"), None if prev < 0 else prev, v.pop("image_last"),
                         v.pop("image_last_term"), v.pop("image_total"), v.pop("image_meta"),
                         tuple(v.pop("image_producers")))
    v["configs"] = tuple((i, tuple(vs), tuple(ls)) for i, vs, ls in v["configs"])
    return InstallSegment(src=src, dst=dst, image=image, **v)


def _check_install(s: InstallSegment) -> None:
    im = s.image
    if not 1 <= im.first_index <= im.last_index:
        raise CodecError(f"INSTALL: image [{im.first_index}..{im.last_index}] is empty")
    if s.chunk is None:
        raise CodecError("INSTALL: a chunk carries bytes")
    if not s.chunk.nbytes <= s.nbytes or s.offset + s.nbytes > im.total_bytes:
        raise CodecError(f"INSTALL: chunk of {s.chunk.nbytes} bytes advancing {s.nbytes} at "
                         f"offset {s.offset} of an image of {im.total_bytes}")
    if s.done != (s.offset + s.nbytes == im.total_bytes):
        raise CodecError("INSTALL: `done` marks the chunk that ends the image, and only it")
    if s.configs and s.offset:
        raise CodecError("INSTALL: only the first chunk carries configurations")
    for i, voters, _learners in s.configs:
        if not voters or i > im.last_index:
            raise CodecError(f"INSTALL: configuration at {i} has no voters or is past the image")


# (the image's fields are flattened; the chunk is the log's view, zero copy)
_raft(0x17, InstallSegment, [("image_first", INDEX), ("image_prev_term", OPT_I64),
                             ("image_last", INDEX), ("image_last_term", TERM),
                             ("image_total", INDEX), ("offset", INDEX), ("nbytes", INDEX),
                             ("done", BOOL), ("commit_index", INDEX), ("epoch", INDEX),
                             ("configs", List(CONFIG_ENTRY, m.MAX_INSTALL_CONFIGS)),
                             ("image_meta", Blob(m.MAX_INSTALL_META_BYTES, view=False)),
                             ("image_producers", List(Tuple(INDEX, INDEX, U64, INDEX, TERM),
                                                      m.MAX_INSTALL_PRODUCERS)),
                             ("chunk", Tail())],
      build=_build_install, check=_check_install)
_raft(0x18, InstallSegmentResponse, [("code", Enum(Code)), ("next_offset", INDEX),
                                     ("match_index", INDEX), ("image_last", INDEX),
                                     ("epoch", INDEX)])

# many groups per process (node/host.py): heartbeats and their answers, batched per peer
GROUP_ID = Fixed("H", 0, m.MAX_GROUPS - 1)
register(0x19, m.HeartbeatBatch,
         [("entries", List(Tuple(GROUP_ID, TERM, INDEX, INDEX, INDEX, INDEX),
                           m.MAX_BATCH_GROUPS))],
         channel=RAFT, build=lambda v, s, d: m.HeartbeatBatch(s, d, v["entries"]))
register(0x1A, m.HeartbeatResponseBatch,
         [("entries", List(Tuple(GROUP_ID, TERM, Enum(Code), INDEX, INDEX, TERM),
                           m.MAX_BATCH_GROUPS))],
         channel=RAFT, build=lambda v, s, d: m.HeartbeatResponseBatch(s, d, v["entries"]))
# quiescence (raft/quiesce.py, node/host.py): one per peer pair per heartbeat interval
register(0x1B, m.QuietBeat,
         [("seq", INDEX), ("groups", List(Tuple(GROUP_ID, TERM, INDEX), m.MAX_GROUPS)),
          ("ack", INDEX), ("acked", List(GROUP_ID, m.MAX_GROUPS))],
         channel=RAFT, build=lambda v, s, d: m.QuietBeat(s, d, v["seq"], v["groups"], v["ack"],
                                                        v["acked"]))

# handshake
NONCE = Blob(m.NONCE_BYTES, exact=m.NONCE_BYTES, view=False)
PROOF = Blob(m.PROOF_BYTES, allowed={0, m.PROOF_BYTES}, view=False)
CLUSTER_ID = Text(m.MAX_CLUSTER_ID_BYTES, min_bytes=1)

register(0x01, m.AuthHello, [("mode", Enum(m.AuthMode)), ("role", Enum(m.Role)),
                             ("segment_size_bytes", U64),
                             ("cluster_id", CLUSTER_ID), ("sender_id", NODE_ID),
                             ("target_id", OPT_NODE_ID), ("nonce", NONCE)], channel=AUTH)
register(0x02, m.AuthChallenge, [("segment_size_bytes", U64), ("cluster_id", CLUSTER_ID),
                                 ("responder_id", NODE_ID), ("nonce", NONCE)], channel=AUTH)
register(0x03, m.AuthProof, [("proof", PROOF)], channel=AUTH)
register(0x04, m.AuthOk, [("proof", PROOF)], channel=AUTH)
register(0x05, m.AuthReject, [("reason", Enum(m.RejectReason)),
                              ("text", Text(m.MAX_ERROR_TEXT_BYTES))], channel=AUTH)

# client protocol
TOPIC = Text(m.MAX_TOPIC_BYTES, min_bytes=1)
BODY = Blob(0xFFFFFFFF)
ADDRESS = Text(m.MAX_ADDRESS_BYTES, optional=True)

register(0x40, m.ProduceRequest, [("queue_id", OPT_QUEUE_ID), ("delay_level", U8),
                                  ("producer_id", U64), ("sequence", U64),
                                  ("base_sequence", U64), ("topic", TOPIC),
                                  ("tags", Text(m.MAX_TAGS_BYTES, optional=True)),
                                  ("bodies", List(BODY, m.MAX_BATCH_MESSAGES))], channel=CLIENT)
register(0x41, m.ProduceResponse, [("first_index", INDEX), ("queue_id", QUEUE_ID),
                                   ("first_queue_offset", INDEX), ("store_timestamp_ms", I64),
                                   ("positions", List(INDEX, m.MAX_BATCH_MESSAGES))],
         channel=CLIENT)


class _OneAckFrame:
    """The frame of a ProduceResponse acknowledging one message (every single-message
    produce's answer; a coalesced round's answers too) in one struct call each way instead
    of the spec's generic walk: the same bytes; and a batch's, whose positions are the
    leader's int64 array (the client service passes BatchResult.positions as it is), its
    items packed by one C pass (quorumlog._clientframe.ack_positions) instead of a list of
    Python ints checked and packed one by one (~57 µs for 256). Anything else -- positions
    in another form, a value out of its field's bounds, a malformed payload -- is declined
    (None) and the reference (encode_payload / the decode loop) decides, with its precise
    errors (an array it encodes item by item: the same bytes)."""

    _BODY = struct.Struct("<qiqqIq")        # the 4 fixed fields, positions' u32 count 1, one
    _HEAD = struct.Struct("<qiqqI")         # the 4 fixed fields and the positions' u32 count
    _MAX_Q = m.MAX_QUEUE_ID

    def __init__(self, type_code: int):
        if _BY_CODE[type_code].fixed_struct.format + "Iq" != self._BODY.format or \
                _BY_CODE[type_code].fixed_struct.format + "I" != self._HEAD.format:
            raise ValueError("ProduceResponse: its fields do not match the fast layout")
        self.type_code = type_code

    def encode(self, msg, request_id, group, max_frame_bytes, _zero_copy_min_bytes):
        pos = msg.positions
        fi, q, fo, ts = msg.first_index, msg.queue_id, msg.first_queue_offset, \
            msg.store_timestamp_ms
        if type(fi) is not int or type(q) is not int or type(fo) is not int or \
                type(ts) is not int or \
                not (0 <= fi <= MAX_I64 and 0 <= q <= self._MAX_Q and 0 <= fo <= MAX_I64
                     and -MAX_I64 - 1 <= ts <= MAX_I64):
            return None
        if type(pos) is tuple:
            if len(pos) != 1:
                return None
            p = pos[0]
            if type(p) is not int or not 0 <= p <= MAX_I64:
                return None
            body = self._BODY.pack(fi, q, fo, ts, 1, p)
        else:
            items = _ack_positions(pos, m.MAX_BATCH_MESSAGES) if _ack_positions else None
            if items is None:
                return None
            body = self._HEAD.pack(fi, q, fo, ts, len(items) >> 3) + items
        if len(body) + HEADER_SIZE > max_frame_bytes:
            return None
        return [encode_header(self.type_code, len(body), request_id, 0, group) + body]

    def decode(self, payload, _src, _dst):
        b = self._BODY
        if len(payload) != b.size:
            return None
        fi, q, fo, ts, n, p = b.unpack_from(payload)
        if n != 1 or fi < 0 or fo < 0 or p < 0 or not 0 <= q <= self._MAX_Q:
            return None
        return m.ProduceResponse(fi, q, fo, ts, (p,))


ONE_ACK_PY = _OneAckFrame(0x41)       # (checks the spec's layout)
# the same in one C call each way when built (the client service's encode of every
# acknowledgement, the client's frame scan's decode); the Python one stays the twin
# tests/net/test_produce_frames.py holds it equal to
_BY_CODE[0x41].frame = ONE_ACK_PY if _FrameCodec is None else _wirecodec.OneAckFrame(
    m.ProduceResponse, 0x41, m.MAX_QUEUE_ID, m.MAX_BATCH_MESSAGES)


class _OneBodyProduceFrame:
    """A ProduceRequest of one message (every single-message produce) read by a few struct
    calls instead of the spec's generic walk: the same message, its body a view of the
    payload. Anything else -- more or fewer bodies, a field out of its bounds, text that is
    not UTF-8, a short or long payload -- is declined (None) and the reference decides,
    with its precise errors. (Clients encode produces with client.encode_produce: no encode
    here.)"""

    _FIXED = struct.Struct("<iBQQQ")        # queue_id, delay_level, producer_id, seq, base
    _COUNT_LEN = struct.Struct("<II")       # the bodies' u32 count, the body's u32 length

    def __init__(self, type_code: int):
        spec = _BY_CODE[type_code]
        topic, tags, bodies = (k for _, k in spec.var)
        if spec.fixed_struct.format != self._FIXED.format or \
                [n for n, _ in spec.var] != ["topic", "tags", "bodies"] or \
                (topic.len_fmt.format, topic.min_len, topic.optional) != ("<B", 1, False) or \
                (tags.len_fmt.format, tags.optional) != ("<B", True) or \
                (bodies.item.len_fmt.format, bodies.item.view) != ("<I", True):
            raise ValueError("ProduceRequest: its fields do not match the fast layout")
        self._max_topic, self._max_tags = topic.max_bytes, tags.max_bytes
        self._max_body = bodies.item.max_bytes

    @staticmethod
    def encode(*_args):
        return None

    def decode(self, buf, _src, _dst):
        if type(buf) is not memoryview:
            buf = memoryview(buf)
        if buf.ndim != 1 or buf.itemsize != 1:
            return None
        end = buf.nbytes
        off = self._FIXED.size
        if end < off + 10:
            return None
        q, delay, pid, seq, base = self._FIXED.unpack_from(buf)
        n = buf[off]
        if not -1 <= q <= m.MAX_QUEUE_ID or not 1 <= n <= self._max_topic or \
                off + 1 + n + 9 > end:
            return None
        try:
            topic = str(buf[off + 1:off + 1 + n], "utf-8")
            off += 1 + n
            n = buf[off]
            tags = str(buf[off + 1:off + 1 + n], "utf-8") if n else None
        except UnicodeDecodeError:
            return None
        off += 1 + n
        if n > self._max_tags or off + 8 > end:
            return None
        count, n = self._COUNT_LEN.unpack_from(buf, off)
        off += 8
        if count != 1 or off + n != end or n > self._max_body:
            return None
        return m.ProduceRequest(topic, [buf[off:end]], q, tags, delay, pid, seq, base)


ONE_BODY_PRODUCE_PY = _OneBodyProduceFrame(0x40)     # (checks the spec's layout)
# the same decoder in one C call when built (the frame scan calls it per produce frame); the
# Python one stays the twin tests/net/test_produce_frames.py holds it equal to
_BY_CODE[0x40].frame = ONE_BODY_PRODUCE_PY if _OneBodyProduce is None else _OneBodyProduce(
    m.ProduceRequest, ONE_BODY_PRODUCE_PY._max_topic, ONE_BODY_PRODUCE_PY._max_tags,
    ONE_BODY_PRODUCE_PY._max_body, m.MAX_QUEUE_ID)

register(0x42, m.FetchRequest, [("queue_id", QUEUE_ID), ("offset", INDEX),
                                ("max_messages", Fixed("I", 1, m.MAX_BATCH_MESSAGES)),
                                ("max_bytes", Fixed("I", 1, 0xFFFFFFFF)),
                                ("wait_ms", U32), ("topic", TOPIC)], channel=CLIENT)
register(0x43, m.FetchResponse, [("next_offset", INDEX), ("min_offset", INDEX),
                                 ("max_offset", INDEX),
                                 ("records", List(BODY, m.MAX_BATCH_MESSAGES))], channel=CLIENT)
register(0x44, m.OffsetsRequest, [("queue_id", QUEUE_ID), ("timestamp_ms", OPT_I64),
                                  ("topic", TOPIC)], channel=CLIENT)
register(0x45, m.OffsetsResponse, [("min_offset", INDEX), ("max_offset", INDEX),
                                   ("offset_for_timestamp", OPT_I64)], channel=CLIENT)
register(0x46, m.AdminRequest, [("op", Enum(m.AdminOp)), ("node_id", OPT_NODE_ID),
                                ("address", ADDRESS)], channel=CLIENT)
register(0x47, m.AdminResponse, [("role", U8), ("term", TERM), ("commit_index", INDEX),
                                 ("last_index", INDEX), ("ready_to_serve", BOOL),
                                 ("node_id", NODE_ID),
                                 ("leader_id", OPT_NODE_ID), ("leader_address", ADDRESS),
                                 ("voters", List(NODE_ID, m.MAX_VOTERS))], channel=CLIENT,
         build=lambda v, s, d: m.AdminResponse(**{**v, "voters": tuple(v["voters"])}))
register(0x4C, m.GroupAdminRequest, [("group", GROUP_ID), ("op", Enum(m.AdminOp)),
                                     ("node_id", OPT_NODE_ID), ("address", ADDRESS)],
         channel=CLIENT)
register(0x4D, m.GroupAdminResponse, [("groups", Fixed("H", 1, m.MAX_GROUPS)),
                                      ("group", GROUP_ID), ("role", U8), ("term", TERM),
                                      ("commit_index", INDEX), ("last_index", INDEX),
                                      ("ready_to_serve", BOOL),
                                      ("node_id", NODE_ID), ("leader_id", OPT_NODE_ID),
                                      ("leader_address", ADDRESS),
                                      ("voters", List(NODE_ID, m.MAX_VOTERS))], channel=CLIENT,
         build=lambda v, s, d: m.GroupAdminResponse(**{**v, "voters": tuple(v["voters"])}))
register(0x48, m.ConsumerOffsetRequest, [("queue_id", QUEUE_ID), ("offset", OPT_I64),
                                        ("group", TOPIC), ("topic", TOPIC)], channel=CLIENT)
register(0x49, m.ConsumerOffsetResponse, [("offset", OPT_I64)], channel=CLIENT)
register(0x4A, m.FindByKeyRequest, [("max_hits", Fixed("I", 1, m.MAX_KEY_HITS)),
                                    ("topic", TOPIC), ("key", Text(m.MAX_KEY_BYTES, min_bytes=1))],
         channel=CLIENT)
register(0x4B, m.FindByKeyResponse, [("records", List(BODY, m.MAX_KEY_HITS))], channel=CLIENT)
register(0x4F, m.ErrorResponse, [("code", Enum(m.ErrorCode, "H")), ("term", TERM),
                                 ("min_offset", OPT_I64), ("max_offset", OPT_I64),
                                 ("message", Text(m.MAX_ERROR_TEXT_BYTES)),
                                 ("leader_id", OPT_NODE_ID), ("leader_address", ADDRESS)],
         channel=CLIENT)


# --- documentation ---------------------------------------------------------------------------

def _kind_doc(k) -> str:
    if isinstance(k, Fixed):
        size = struct.calcsize("<" + k.fmt)
        signed = k.fmt.islower() and k.fmt not in "?"
        base = f"{'i' if signed else 'u'}{size * 8}"
        if isinstance(k.conv, type) and k.conv is not bool:
            return f"{base} {k.conv.__name__}"
        if k.conv is bool:
            return "u8 bool (0/1)"
        if (k.lo, k.hi) == _FULL_RANGE.get(k.fmt):
            return base
        return f"{base} >= {k.lo}" if k.hi == MAX_I64 else f"{base} {k.lo}..{k.hi}"
    if isinstance(k, Text):
        what = "node id" if k.node_id else "utf-8"
        opt = ", 0 = none" if k.optional else ""
        return f"{what}: u{k.len_fmt.size * 8} len ({k.min_len}..{k.max_bytes}{opt}) + bytes"
    if isinstance(k, Blob):
        if k.exact is not None:
            return f"u{k.len_fmt.size * 8} len (= {k.exact}) + bytes"
        if k.allowed is not None:
            return f"u{k.len_fmt.size * 8} len ({' or '.join(map(str, sorted(k.allowed)))}) + bytes"
        return f"u{k.len_fmt.size * 8} len + bytes"
    if isinstance(k, Tail):
        return "the rest of the payload (none: a probe)"
    if isinstance(k, List):
        return f"u32 count (<= {k.max_count}) x [{_kind_doc(k.item)}]"
    if isinstance(k, Tuple):
        return "(" + ", ".join(_kind_doc(x) for x in k.kinds) + ")"
    return type(k).__name__


_FULL_RANGE = {"B": (0, 0xFF), "H": (0, 0xFFFF), "I": (0, 0xFFFFFFFF), "Q": (0, (1 << 64) - 1),
               "q": (-(1 << 63), MAX_I64), "i": (-(1 << 31), (1 << 31) - 1)}


def describe_tables() -> str:
    """The message tables of docs/net.md, generated from the registry (a test keeps the
    document equal to this). Print with:
    python -c "from quorumlog.net.codec import describe_tables as d; print(d())" """
    lines = []
    for code in sorted(_BY_CODE):
        s = _BY_CODE[code]
        lines.append(f"#### `{code:#04x}` {s.cls.__name__} ({s.channel})")
        lines.append("")
        lines.append("| field | encoding |")
        lines.append("|---|---|")
        for name, kind in s.fixed + s.var:
            lines.append(f"| `{name}` | {_kind_doc(kind)} |")
        lines.append("")
    return "\n".join(lines)
