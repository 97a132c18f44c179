"""Small file helpers of the store: atomic replacement of a metadata file, and metadata JSON
carrying its own checksum.

The store's metadata files (topics.json, queue_offsets.json, delay_offsets.json) are derived
from the log, so damage must be found, never trusted: each is one JSON object whose member
"crc32c" is the CRC32C of the object's other members serialised canonically (UTF-8, keys
sorted, separators "," and ":"). A file that is not such an object, or whose checksum
differs, is damaged (CorruptLogError naming it); its reader rebuilds what it held from the
log.
"""
from __future__ import annotations

import errno
import json
import os

from .._commitlog import crc32c
from ..errors import CorruptLogError, DiskFullError, StorageError

CHECKSUM_KEY = "crc32c"
MAX_METADATA_BYTES = 64 << 20          # a metadata file larger than this is not read


def atomic_write(path: str, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new file, never a mix:
    write a temporary file, fsync it, rename it over `path`, fsync the directory. An OS error
    is a quorumlog error naming the file (DiskFullError for lack of space); the old file
    stays."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        if isinstance(exc, StorageError):
            raise
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, DiskFullError) or exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(exc.errno, f"no space to write {path}", path) from None
        raise StorageError(f"{path}: cannot be written: {exc.strerror or exc}", path,
                           exc.errno) from None


def fsync_dir(d: str) -> None:
    """fsync a directory (a rename or unlink in it is durable afterwards)."""
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _canonical(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode()


def write_checked_json(path: str, obj: dict) -> None:
    """atomic_write of `obj` (a dict without CHECKSUM_KEY) with its checksum added."""
    body = {k: v for k, v in obj.items() if k != CHECKSUM_KEY}
    body[CHECKSUM_KEY] = crc32c(_canonical({k: v for k, v in body.items()
                                            if k != CHECKSUM_KEY}))
    atomic_write(path, json.dumps(body, indent=1, sort_keys=True, ensure_ascii=False).encode())


def read_checked_json(path: str) -> dict | None:
    """The object of a file written by write_checked_json (checksum removed); None when there
    is no file; CorruptLogError naming the file when it is damaged in any way (not JSON, not
    an object, no or a wrong checksum, not a regular file, unreadable)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_METADATA_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptLogError(f"{path}: cannot be read: {exc.strerror or exc}", path, 0) from None
    if len(data) > MAX_METADATA_BYTES:
        raise CorruptLogError(f"{path}: larger than {MAX_METADATA_BYTES} bytes", path, 0)
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise CorruptLogError(f"{path}: not JSON ({exc})", path, 0) from None
    if not isinstance(obj, dict):
        raise CorruptLogError(f"{path}: not a JSON object", path, 0)
    crc = obj.pop(CHECKSUM_KEY, None)
    if type(crc) is not int:
        raise CorruptLogError(f"{path}: no checksum", path, 0)
    if crc != crc32c(_canonical(obj)):
        raise CorruptLogError(f"{path}: checksum mismatch", path, 0)
    return obj
