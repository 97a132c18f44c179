"""The commit log seam: re-exports the native (Cython) CommitLog and the format constants.

Contract: docs/architecture.md ("The commit log seam"); bytes on disk: docs/format.md.
"""
from quorumlog._commitlog import (  # noqa: F401
    BLANK,
    CHECKPOINT_SIZE,
    CONFIG,
    HEADER_SIZE,
    FLUSH_LATENCY_BUCKETS_NS,
    MAX_BATCH_RECORDS,
    MESSAGE,
    META,
    NOOP,
    RECORD_INFO,
    CommitLog,
    Mapping,
    ProducerProperties,
    producer_tags,
    crc32c,
    crc32c_hardware,
    crc32c_path,
    crc32c_paths,
    crc32c_software,
    fnv1a64,
)
from quorumlog.errors import (  # noqa: F401  (re-exported: wrong-type errors of this API)
    ArgumentTypeError,
    InvalidTypeError,
    QueueTypeError,
    TopicTypeError,
)

__all__ = ["CommitLog", "RECORD_INFO", "HEADER_SIZE", "MESSAGE", "NOOP", "CONFIG", "META",
           "BLANK", "CHECKPOINT_SIZE", "MAX_BATCH_RECORDS", "FLUSH_LATENCY_BUCKETS_NS", "Mapping", "ProducerProperties", "producer_tags", "crc32c",
           "ArgumentTypeError", "InvalidTypeError", "TopicTypeError", "QueueTypeError",
           "crc32c_hardware", "crc32c_path", "crc32c_paths", "crc32c_software", "fnv1a64"]
