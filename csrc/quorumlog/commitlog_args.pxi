# Included by _commitlog.pyx: validation and encoding of append arguments (topic, tags,
# keys, properties, term, flags, bodies, integer arrays). Nothing is written here; every
# limit is checked before an append touches the log.

cdef dict _topic_cache = {}


cdef bytes _check_topic(object topic):
    """UTF-8 bytes of a valid topic (cached per str object value)."""
    cdef bytes b
    cdef int tf
    r = _topic_cache.get(topic)
    if r is not None:
        return <bytes>r
    if not isinstance(topic, str):
        raise TopicTypeError(f"topic must be str, not {type(topic).__name__}")
    try:
        b = (<str>topic).encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidTopicError(f"topic is not valid UTF-8: {e}") from None
    tf = topic_fault(PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b))
    if tf == TOPIC_LENGTH:
        raise InvalidTopicError(f"topic must be 1..{MAX_TOPIC} bytes of UTF-8, got {len(b)}")
    if tf == TOPIC_CHARS:
        raise InvalidTopicError(f"topic {topic!r} contains NUL or '/'")
    if tf == TOPIC_DOTS:
        raise InvalidTopicError(f"topic {topic!r} is not a usable directory name")
    if len(_topic_cache) > 4096:
        _topic_cache.clear()
    _topic_cache[topic] = b
    return b


cdef bytes _encode_tags(object tags):
    cdef bytes b
    if not isinstance(tags, str):
        raise ArgumentTypeError(f"tags must be str or None, not {type(tags).__name__}")
    try:
        b = (<str>tags).encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(f"tags are not valid UTF-8: {e}") from None
    if len(b) > MAX_TAGS:
        raise InvalidArgumentError(f"tags are {len(b)} bytes; the limit is {MAX_TAGS}")
    return b


cdef bytes _encode_keys(object keys):
    cdef list parts = []
    cdef Py_ssize_t total = 0
    if isinstance(keys, (str, bytes)) or not isinstance(keys, (tuple, list)):
        raise ArgumentTypeError(f"keys must be a tuple or list of str, not {type(keys).__name__}")
    for k in keys:
        if not isinstance(k, str):
            raise ArgumentTypeError(f"each key must be str, not {type(k).__name__}")
        try:
            kb = (<str>k).encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(f"key is not valid UTF-8: {e}") from None
        if len(kb) > MAX_STRING:
            raise InvalidArgumentError(f"a key is {len(kb)} bytes; the limit is {MAX_STRING}")
        parts.append(struct.pack("<H", len(kb)))
        parts.append(kb)
        total += 2 + len(kb)
        if total > MAX_KEYS_FIELD:
            raise InvalidArgumentError(f"keys field over {MAX_KEYS_FIELD} bytes")
    return b"".join(parts)


cdef bytes _encode_props(object props):
    cdef list parts = []
    cdef Py_ssize_t total = 0
    if not isinstance(props, dict):
        raise ArgumentTypeError(f"properties must be a dict of str to str, not {type(props).__name__}")
    for k, v in (<dict>props).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ArgumentTypeError("property keys and values must be str")
        try:
            kb = (<str>k).encode("utf-8")
            vb = (<str>v).encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(f"property is not valid UTF-8: {e}") from None
        if len(kb) > MAX_STRING or len(vb) > MAX_STRING:
            raise InvalidArgumentError(f"a property key or value is over {MAX_STRING} bytes")
        parts.append(struct.pack("<H", len(kb)))
        parts.append(kb)
        parts.append(struct.pack("<H", len(vb)))
        parts.append(vb)
        total += 4 + len(kb) + len(vb)
        if total > MAX_PROPS_FIELD:
            raise InvalidArgumentError(f"properties field over {MAX_PROPS_FIELD} bytes")
    return b"".join(parts)


cdef inline void _set_tags(RecSrc *s, bytes b, int64_t tag_hash) noexcept:
    """Point s at encoded tags (kept alive by the caller) and their hash."""
    s.tags = PyBytes_AS_STRING(b)
    s.tags_len = <uint32_t>PyBytes_GET_SIZE(b)
    s.tag_hash = tag_hash


cdef inline int64_t _tag_hash(bytes b) noexcept:
    return <int64_t>fnv1a(PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b))


cdef inline void _set_keys(RecSrc *s, bytes b) noexcept:
    s.keys = PyBytes_AS_STRING(b)
    s.keys_len = <uint32_t>PyBytes_GET_SIZE(b)


cdef inline void _set_props(RecSrc *s, bytes b) noexcept:
    s.props = PyBytes_AS_STRING(b)
    s.props_len = <uint32_t>PyBytes_GET_SIZE(b)


cdef int64_t _check_term(object term) except -1:
    """A leader append's term: an int in [0, 2**63)."""
    if type(term) is not int:
        raise ArgumentTypeError(f"term must be int, not {type(term).__name__}")
    if term < 0 or term >= (1 << 63):
        raise InvalidArgumentError(f"term {term} out of range")
    return term


cdef int64_t _check_flags(object flags) except -1:
    """A MESSAGE record's flags: an int that fits a u32."""
    if type(flags) is not int:
        raise ArgumentTypeError(f"flags must be int, not {type(flags).__name__}")
    if flags < 0 or flags > 0xFFFFFFFF:
        raise InvalidArgumentError(f"flags {flags} not a u32")
    return flags


cdef int64_t _check_born(object born_ms, str name) except? -1:
    """An explicit born timestamp: an int that fits an i64 (None is handled by callers)."""
    if type(born_ms) is not int:
        raise ArgumentTypeError(f"{name} must be int or None")
    if not (-(1 << 63) <= born_ms < (1 << 63)):
        raise InvalidArgumentError(f"{name} {born_ms} is not an i64")
    return born_ms


cdef int _set_body(RecSrc *s, object o, Py_buffer *buf, char *held, int64_t max_bytes,
                   Py_ssize_t j) except -1:
    """Point s at a body (bytes, or any buffer held in *buf, *held set; the caller releases
    it) of at most max_bytes. j: its place in a batch, for the error (-1: not a batch)."""
    cdef Py_ssize_t n
    if PyBytes_CheckExact(o):
        s.body = PyBytes_AS_STRING(o)
        n = PyBytes_GET_SIZE(o)
    else:
        if isinstance(o, str) or o is None:
            raise ArgumentTypeError(f"{_body_name(j)} must be bytes-like, not {type(o).__name__}")
        try:
            PyObject_GetBuffer(o, buf, PyBUF_SIMPLE)
        except TypeError:
            raise ArgumentTypeError(
                f"{_body_name(j)} must be bytes-like, not {type(o).__name__}") from None
        held[0] = 1
        s.body = <const char *>buf.buf
        n = buf.len
    if n > max_bytes:
        raise MessageTooLargeError(
            f"{_body_name(j)} is {n} bytes; max_message_bytes is {max_bytes}")
    s.body_len = <uint32_t>n
    return 0


cdef str _body_name(Py_ssize_t j):
    return "body" if j < 0 else f"bodies[{j}]"


cdef inline uint32_t _record_size(const RecSrc *s, int64_t segment_size,
                                  Py_ssize_t j) except 0:
    """The record's total size; MessageTooLargeError when it cannot fit a segment (with
    the BLANK header that may have to follow it)."""
    # int64: a u32 sum could wrap past the segment check (memcpy past the mapping)
    cdef int64_t size64 = (<int64_t>HDR + s.topic_len + s.tags_len + s.keys_len +
                           s.props_len + s.body_len)
    if size64 > segment_size - HDR:
        _record_too_large(size64, segment_size, j)
        return 0
    return <uint32_t>size64


cdef int _record_too_large(int64_t size, int64_t segment_size, Py_ssize_t j) except -1:
    # out of line, so that _record_size stays small enough to inline in the batch loop
    what = "record" if j < 0 else f"record {j}"
    raise MessageTooLargeError(
        f"{what} of {size} bytes does not fit a segment of {segment_size} bytes")


def _int64_array(value, str name, exc):
    """A contiguous int64 copy of an integer array-like; `exc` (a TypeError subclass)
    for anything else. Floats would be truncated and bools are not integers here, so
    only integer dtypes are accepted (values must fit an int64)."""
    try:
        a = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        raise exc(f"{name} must be an int or a sequence of int") from None
    if a.dtype.kind == "f" and a.size == 0 and not isinstance(value, np.ndarray):
        a = a.astype(np.int64)      # [] is float64 to numpy
    if a.dtype.kind not in "iu":
        raise exc(f"{name} must hold integers, not {a.dtype}")
    if a.dtype.kind == "u" and a.size and a.max() > 0x7FFFFFFFFFFFFFFF:
        raise InvalidArgumentError(f"{name} has a value beyond int64")
    return np.ascontiguousarray(a, dtype=np.int64)
