"""The replica's persisted Raft state (`<dir>/raft-state`): current term and vote.

Written atomically (write a temporary file, fsync it, rename it over the old one, fsync the
directory) so a crash leaves either the old state or the new one, never a torn mix. The file
is small and binary with a CRC, so damage is detected rather than read as a smaller term:

    0  4s  magic b"QLRS"        8  u64 term
    4  u16 version (1 or 2)    16  u16 voted_for length (0: none), then that many UTF-8 bytes
    6  u16 reserved (0)        ..  version 2 only: u64 recovering_term (raft/recovery.py)
                               ..  u32 CRC-32C of every byte before it

Version 1 is written whenever recovering_term is 0, so a replica that is not recovering keeps
a file older releases read; version 2 only while it recovers after a power loss (async mode).
`end_recovery(directory, reason)` is the operator's offline override (docs/node.md).
"""
from __future__ import annotations

import logging
import os
import struct

from ..errors import CorruptLogError
from ..raft.core import HardState

__all__ = ["HardStateFile", "FILE_NAME", "end_recovery"]

log = logging.getLogger(__name__)

FILE_NAME = "raft-state"
_MAGIC = b"QLRS"
_VERSION = 1
_VERSION_RECOVERING = 2
_HEAD = struct.Struct("<4sHHQH")
_FLOOR = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_MAX_ID_BYTES = 255


def _crc(data: bytes) -> int:
    from ..commitlog import crc32c   # hardware CRC32C of the native extension
    return crc32c(data)


def encode_hard_state(hs: HardState) -> bytes:
    vote = (hs.voted_for or "").encode("utf-8")
    if len(vote) > _MAX_ID_BYTES:
        raise ValueError(f"voted_for {hs.voted_for!r} is over {_MAX_ID_BYTES} bytes")
    if hs.recovering_term:
        body = (_HEAD.pack(_MAGIC, _VERSION_RECOVERING, 0, hs.term, len(vote)) + vote
                + _FLOOR.pack(hs.recovering_term))
    else:
        body = _HEAD.pack(_MAGIC, _VERSION, 0, hs.term, len(vote)) + vote
    return body + _CRC.pack(_crc(body))


def decode_hard_state(data: bytes, path: str = FILE_NAME) -> HardState:
    def bad(why):
        return CorruptLogError(f"{path}: {why}; the replica cannot know its term or vote "
                               "(restore the file or rebuild this replica from its peers)",
                               path, 0)
    if len(data) < _HEAD.size + _CRC.size:
        raise bad(f"{len(data)} bytes is too short")
    magic, version, reserved, term, vlen = _HEAD.unpack_from(data, 0)
    if magic != _MAGIC:
        raise bad("bad magic")
    if version not in (_VERSION, _VERSION_RECOVERING) or reserved:
        raise bad(f"unsupported version {version}")
    vend = _HEAD.size + vlen
    end = vend + (_FLOOR.size if version == _VERSION_RECOVERING else 0)
    if len(data) != end + _CRC.size:
        raise bad(f"length {len(data)} does not match the vote length {vlen}")
    (crc,) = _CRC.unpack_from(data, end)
    if crc != _crc(data[:end]):
        raise bad("CRC mismatch")
    try:
        vote = data[_HEAD.size:vend].decode("utf-8") or None
    except UnicodeDecodeError:
        raise bad("voted_for is not UTF-8") from None
    floor = _FLOOR.unpack_from(data, vend)[0] if version == _VERSION_RECOVERING else 0
    return HardState(term, vote, floor)


class HardStateFile:
    """load() at open; save(hs) before any message of the Ready that produced hs is sent."""

    def __init__(self, directory: str):
        self.dir = os.fspath(directory)
        self.path = os.path.join(self.dir, FILE_NAME)
        self.saves = 0

    def load(self) -> HardState:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read(4096)
        except FileNotFoundError:
            return HardState()
        return decode_hard_state(data, self.path)

    def save(self, hs: HardState) -> None:
        data = encode_hard_state(hs)
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dfd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self.saves += 1


def end_recovery(directory, reason: str) -> HardState:
    """The operator's override, on a stopped replica: it leaves recovery after a power loss
    (raft/recovery.py R5) without waiting for a peer that holds what it lost. Use it only
    when every copy is truly gone (e.g. every replica lost its power): entries it
    acknowledged and lost are then lost for good. Logged at WARNING; returns the new state."""
    if not reason or not isinstance(reason, str):
        raise ValueError("end_recovery needs a reason (it is logged)")
    f = HardStateFile(directory)
    hs = f.load()
    if not hs.recovering_term:
        return hs
    new = HardState(hs.term, hs.voted_for, 0)
    f.save(new)
    log.warning("%s: recovery (floor term %d) ended by the operator: %s; entries this replica "
                "acknowledged before its power loss and no peer holds are lost",
                f.path, hs.recovering_term, reason)
    return new
