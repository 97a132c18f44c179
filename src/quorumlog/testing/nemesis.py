"""Nemeses for fault-testing a replica group of real processes: process faults (SIGKILL and
restart, SIGSTOP/SIGCONT), network faults through the fault proxy (partitions -- isolating
the leader, a follower, a minority; asymmetric cuts; slow links; connection resets), disk
faults (a full disk on one node, a power loss that drops the unflushed tail, a flipped bit
in a committed record of one follower) -- and the file-level operations behind the disk
faults, which work on a stopped replica's directory alone.

Each nemesis has `start(h)` (inject) and `stop(h)` (heal), where `h` is the harness
(quorumlog.testing.jepsen.Harness: the cluster, the proxy, the history, the seeded rng and
status helpers). Every step is recorded as a history Event.
"""
from __future__ import annotations

import logging
import os
import signal
import struct
import time

import numpy as np

from ..errors import InvalidArgumentError, QuorumlogError
from ..format import (CHECKPOINT_SIZE, HEADER_SIZE, INDEX_ENTRY_SIZE, TYPE_MESSAGE,
                      decode_checkpoint, decode_index_entry)
from .clockskew import ClockSkew
from .syscall_faults import DiskError

log = logging.getLogger(__name__)

__all__ = ["read_checkpoint", "lose_unflushed_tail", "dirty_pages", "flip_committed_bit",
           "undo_flip", "wipe_log", "fill_disk",
           "Nemesis", "Kill", "Pause", "Partition", "SlowNetwork", "ResetConnections",
           "PowerCut", "BitFlip", "DiskFull", "DiskError", "ClockSkew", "LaggingPowerLoss",
           "NEMESES"]

CQ_ENTRY = np.dtype([("position", "<i8"), ("size", "<i4"), ("tag_hash", "<i8")])
assert CQ_ENTRY.itemsize == 20


# ------------------------------------------------------------------------- file operations
def read_checkpoint(data_dir):
    path = os.path.join(data_dir, "checkpoint")
    with open(path, "rb") as fh:
        return decode_checkpoint(fh.read(CHECKPOINT_SIZE + 1), path)


def _zero_range(path: str, lo: int, hi: int) -> int:
    """Write zeros over [lo, hi) of a file (its size unchanged) -> bytes zeroed."""
    if hi <= lo:
        return 0
    zero = bytes(min(hi - lo, 1 << 20))
    with open(path, "r+b") as fh:
        fh.seek(lo)
        left = hi - lo
        while left > 0:
            n = min(left, len(zero))
            fh.write(zero[:n])
            left -= n
        fh.flush()
        os.fsync(fh.fileno())
    return hi - lo


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
KPF_DIRTY = 1 << 4
KPF_WRITEBACK = 1 << 8


def _libc():
    import ctypes
    import ctypes.util
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return ctypes, libc


def dirty_page_model_available() -> str | None:
    """None when dirty pages can be seen (root: /proc/self/pagemap shows page frames and
    /proc/kpageflags their flags), else why not."""
    try:
        with open("/proc/kpageflags", "rb") as fh:
            fh.read(8)
    except OSError as e:
        return f"/proc/kpageflags: {e}"
    probe = dirty_pages("/proc/self/exe", limit_pages=1, _probe=True)
    return None if probe is not None else "/proc/self/pagemap shows no page frame numbers"


def dirty_pages(path, *, limit_pages: int | None = None, _probe: bool = False):
    """Indexes of the pages of `path` that the page cache holds dirty (or under writeback):
    what a power loss would lose. The file is mapped read-only here and every page touched,
    then its page frame's flags are read (root only). -> sorted list (None on _probe when
    frame numbers are hidden)."""
    ctypes, libc = _libc()
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        n = size // PAGE_BYTES if limit_pages is None else min(limit_pages, size // PAGE_BYTES)
        if n == 0:
            return []
        length = n * PAGE_BYTES
        addr = libc.mmap(None, length, 1, 1, fd, 0)          # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
        try:
            todo = range(n)
            with open("/proc/self/pagemap", "rb") as pm, open("/proc/kpageflags", "rb") as kf:
                for _round in range(5):
                    for i in todo:                            # fault the pages in
                        ctypes.c_char.from_address(addr + i * PAGE_BYTES).value
                    pm.seek((addr // PAGE_BYTES) * 8)
                    ents = np.frombuffer(pm.read(8 * n), dtype="<u8")
                    present = (ents >> np.uint64(63)) & np.uint64(1)
                    pfns = ents & np.uint64((1 << 55) - 1)
                    if _probe:
                        return [] if present.all() and pfns.any() else None
                    # (a page can be unmapped again before it is looked at: touch it again)
                    todo = np.nonzero((present == 0) | (pfns == 0))[0].tolist()
                    if not todo:
                        break
                if todo:
                    raise QuorumlogError(f"{path}: {len(todo)} page frames not visible "
                                         "(not root?)")
                out = []
                for i, pfn in enumerate(pfns.tolist()):
                    kf.seek(pfn * 8)
                    (flags,) = struct.unpack("<Q", kf.read(8))
                    if flags & (KPF_DIRTY | KPF_WRITEBACK):
                        out.append(i)
                return out
        finally:
            libc.munmap(addr, length)
    finally:
        os.close(fd)


def _lose_dirty(path: str, first_dirty: list, out: dict, key: str, base: int = 0) -> None:
    """Zero every dirty page of `path` but the lowest one of the whole file group (which
    the caller keeps: it may have been written back just before the power failed).
    `base`: the file's first log position (segments), for out["log_zeroed_from"]."""
    pages = dirty_pages(path)
    for p in pages:
        if not first_dirty:
            first_dirty.append((path, p))
            continue
        lo = p * PAGE_BYTES
        with open(path, "rb") as fh:
            fh.seek(lo)
            nz = any(fh.read(PAGE_BYTES))
        if nz:
            _zero_range(path, lo, lo + PAGE_BYTES)
            out[key] += PAGE_BYTES
            if key == "log_bytes_zeroed" and out["log_zeroed_from"] is None:
                out["log_zeroed_from"] = base + lo


def _numbered_files(d: str) -> list[str]:
    if not os.path.isdir(d):
        return []
    return [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.isdigit()]


def _new_boot(data_dir) -> None:
    """A power loss is a new boot: the abort marker's page-cache identity (docs/format.md,
    Recovery 1) no longer matches, so the store knows unflushed writes may be gone (and an
    async replica recovers what it acknowledged from its peers: raft/recovery.py)."""
    path = os.path.join(data_dir, "abort")
    if os.path.exists(path):
        with open(path, "rb") as fh:
            rest = fh.read().split(b"\n", 1)[1:]      # the run's flush mode, a lost mark
        with open(path, "wb") as fh:
            fh.write(f"boot=power-loss-{os.urandom(8).hex()} dev=0 ino=0\n".encode()
                     + b"".join(rest))
            fh.flush()
            os.fsync(fh.fileno())


def lose_unflushed_tail(data_dir, model: str = "checkpoint") -> dict:
    """What a power loss does to a killed replica (call it only on a stopped replica).

    model "checkpoint": every byte the checkpoint does not vouch for is gone -- the commit
      log from the checkpoint's flushed_position on (the rest of that segment and every
      later one; preallocated files keep their size), the raft-index entries after
      flushed_index, and the consume-queue entries at or after dispatched_position. The
      checkpoint is written every checkpoint_interval_ms (and, in sync mode, only when the
      log's own flush loop runs), so it can lag the last msync by seconds: this can drop
      records the replica flushed and acknowledged -- stronger than a power loss.
    model "dirty-pages": exactly what the page cache has not written back is gone. The log,
      raft-index and consume-queue files are written in order, so a dirty page after the
      first dirty one was never written back and is zero on the disk; the first dirty page
      of each file group may hold durable bytes before the last msync, and is kept as if
      the kernel wrote it back just in time (a possible outcome). Needs root.
    """
    cp = read_checkpoint(data_dir)
    _new_boot(data_dir)
    out = {"model": model, "flushed_position": cp.flushed_position,
           "flushed_index": cp.flushed_index, "log_bytes_zeroed": 0, "log_zeroed_from": None,
           "index_entries_zeroed": 0, "cq_entries_zeroed": 0}
    segs = _numbered_files(os.path.join(data_dir, "commitlog"))
    idx = _numbered_files(os.path.join(data_dir, "index"))
    cqs = []
    for root, _dirs, files in os.walk(os.path.join(data_dir, "consumequeue")):
        cqs += [os.path.join(root, n) for n in sorted(files) if n.isdigit()]
    if model == "dirty-pages":
        out.update(index_bytes_zeroed=0, cq_bytes_zeroed=0)
        for group, key in ((segs, "log_bytes_zeroed"), (idx, "index_bytes_zeroed")):
            first: list = []
            for path in group:
                _lose_dirty(path, first, out, key, int(os.path.basename(path)))
        for path in cqs:
            _lose_dirty(path, [], out, "cq_bytes_zeroed")      # each queue file on its own
        log.info("power loss (dirty pages) in %s: %s", data_dir, out)
        return out
    if model != "checkpoint":
        raise InvalidArgumentError(f"power-loss model must be checkpoint or dirty-pages, "
                                   f"got {model!r}")
    for path in segs:
        start = int(os.path.basename(path))
        size = os.path.getsize(path)
        lo = max(cp.flushed_position - start, 0)
        if lo >= size:
            continue
        with open(path, "rb") as fh:
            fh.seek(lo)
            nz = len(fh.read(size - lo).rstrip(b"\0"))
        if nz:
            out["log_bytes_zeroed"] += _zero_range(path, lo, lo + nz)
            if out["log_zeroed_from"] is None:
                out["log_zeroed_from"] = start + lo
    N = cp.index_file_entries
    for path in idx:
        first = int(os.path.basename(path))
        k = max(cp.flushed_index + 1 - first, 0)
        if k >= N:
            continue
        arr = np.fromfile(path, dtype=np.uint8)
        used = arr[k * INDEX_ENTRY_SIZE:].reshape(-1, INDEX_ENTRY_SIZE).any(axis=1)
        if used.any():
            last = int(np.nonzero(used)[0][-1]) + 1
            _zero_range(path, k * INDEX_ENTRY_SIZE, (k + last) * INDEX_ENTRY_SIZE)
            out["index_entries_zeroed"] += int(used.sum())
    for path in cqs:
        if os.path.getsize(path) % CQ_ENTRY.itemsize:
            continue
        mm = np.memmap(path, dtype=CQ_ENTRY, mode="r+")
        hit = (mm["size"] != 0) & (mm["position"] >= cp.dispatched_position)
        n = int(hit.sum())
        if n:
            mm[hit] = np.zeros(1, dtype=CQ_ENTRY)
            mm.flush()
            out["cq_entries_zeroed"] += n
        del mm
    log.info("power loss (checkpoint) in %s: %s", data_dir, out)
    return out


def flip_committed_bit(data_dir, rng, *, message_only: bool = True) -> dict:
    """Flip one random bit of one random committed record (a MESSAGE record unless
    message_only is False) of a stopped replica, in place -> where. The record is found
    through the raft index, below the checkpoint's committed index (durable there)."""
    cp = read_checkpoint(data_dir)
    if cp.committed_index < 1:
        raise InvalidArgumentError(f"{data_dir}: nothing committed to damage")
    N = cp.index_file_entries
    idir = os.path.join(data_dir, "index")
    firsts = sorted(int(n) for n in os.listdir(idir) if n.isdigit())
    for _attempt in range(200):
        i = rng.randint(max(1, firsts[0]), cp.committed_index)
        f = max(x for x in firsts if x <= i)
        with open(os.path.join(idir, f"{f:020d}"), "rb") as fh:
            fh.seek((i - f) % N * INDEX_ENTRY_SIZE)
            e = decode_index_entry(fh.read(INDEX_ENTRY_SIZE))
        if e is None or (message_only and e.type != TYPE_MESSAGE):
            continue
        if e.position < cp.min_position or e.position + e.size > cp.committed_position:
            continue
        off_in_rec = rng.randrange(e.size)
        bit = rng.randrange(8)
        pos = e.position + off_in_rec
        seg = pos - pos % cp.segment_size_bytes
        path = os.path.join(data_dir, "commitlog", f"{seg:020d}")
        with open(path, "r+b") as fh:
            fh.seek(pos - seg)
            b = fh.read(1)[0]
            fh.seek(pos - seg)
            fh.write(bytes([b ^ (1 << bit)]))
            fh.flush()
            os.fsync(fh.fileno())
        where = {"index": i, "record_position": e.position, "position": pos, "bit": bit,
                 "in_header": off_in_rec < HEADER_SIZE, "file": path,
                 "segment_size_bytes": cp.segment_size_bytes}
        log.info("bit flip in %s: %s", data_dir, where)
        return where
    raise QuorumlogError(f"{data_dir}: found no committed MESSAGE record to damage")


def fill_disk(directory, leave_bytes: int = 0) -> tuple[str, int]:
    """Allocate a ballast file so the file system of `directory` has at most `leave_bytes`
    free -> (ballast path, bytes allocated). Remove the file to give the space back."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    n = max(0, free - leave_bytes)
    path = os.path.join(directory, ".ballast")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        got = 0
        # allocate in steps: the last step may not fit exactly (metadata, rounding)
        step = 1 << 20
        while got < n:
            k = min(step, n - got)
            try:
                os.posix_fallocate(fd, got, k)
            except OSError:
                if step <= 4096:
                    break
                step //= 4
                continue
            got += k
    finally:
        os.close(fd)
    return path, got


# ------------------------------------------------------------------------------- nemeses
class Nemesis:
    """A fault with a start (inject) and a stop (heal). `counter` names the summary
    figure it adds to."""

    name = "nemesis"
    counter = ""

    def __init__(self):
        self.active = False

    def start(self, h) -> bool:
        """Inject; False when the fault could not apply now (e.g. no leader)."""
        raise NotImplementedError

    def stop(self, h) -> None:
        raise NotImplementedError


def _pick(h, target: str):
    """'leader' | 'follower' | 'any' -> a node id or None."""
    ids = list(h.cluster.ids)
    if target == "any":
        return h.rng.choice(ids)
    leader = h.leader()
    if target == "leader":
        return leader
    if leader is None:
        return None
    return h.rng.choice([n for n in ids if n != leader])


class Kill(Nemesis):
    """SIGKILL a node (kill -9: its page cache survives), restart it when healed."""

    counter = "kills"

    def __init__(self, target: str = "leader"):
        super().__init__()
        self.target = target
        self.name = f"kill-{target}"
        self.node = None

    def start(self, h) -> bool:
        n = _pick(h, self.target)
        if n is None:
            return False
        pid = h.cluster.pid(n)
        h.cluster.kill(n)
        h.history.event("kill", [n], pid=pid, target=self.target)
        self.node = n
        return True

    def stop(self, h) -> None:
        h.restart(self.node)


class Pause(Nemesis):
    """SIGSTOP a node, SIGCONT it when healed."""

    counter = "pauses"

    def __init__(self, target: str = "leader"):
        super().__init__()
        self.target = target
        self.name = f"pause-{target}"
        self.node = None

    def start(self, h) -> bool:
        n = _pick(h, self.target)
        if n is None:
            return False
        h.cluster.signal(n, signal.SIGSTOP)
        h.history.event("pause", [n], target=self.target)
        self.node = n
        return True

    def stop(self, h) -> None:
        h.cluster.signal(self.node, signal.SIGCONT)
        h.history.event("resume", [self.node])


class Partition(Nemesis):
    """Network partitions through the proxy.

    kind: isolate-leader | isolate-follower | majority-minority (a random minority) |
          leader-cannot-send | leader-cannot-hear (asymmetric: only one direction of every
          link of the leader is cut).
    mode: blackhole (bytes vanish) | stall (bytes wait) | random."""

    counter = "partitions"
    KINDS = ("isolate-leader", "isolate-follower", "majority-minority", "leader-cannot-send",
             "leader-cannot-hear")

    def __init__(self, kind: str = "random", mode: str = "random"):
        super().__init__()
        if kind != "random" and kind not in self.KINDS:
            raise InvalidArgumentError(f"partition kind must be one of {self.KINDS}")
        self.kind = kind
        self.mode = mode
        self.name = f"partition-{kind}"

    def start(self, h) -> bool:
        kind = h.rng.choice(self.KINDS) if self.kind == "random" else self.kind
        mode = h.rng.choice(("blackhole", "stall")) if self.mode == "random" else self.mode
        ids = list(h.cluster.ids)
        if kind == "majority-minority":
            k = h.rng.randint(1, (len(ids) - 1) // 2)
            minority = h.rng.sample(ids, k)
        else:
            n = _pick(h, "follower" if kind == "isolate-follower" else "leader")
            if n is None:
                return False
            minority = [n]
        majority = [n for n in ids if n not in minority]
        if kind in ("isolate-leader", "isolate-follower", "majority-minority"):
            h.proxy.partition(minority, majority, mode=mode)
        else:
            (n,) = minority
            for o in majority:
                if kind == "leader-cannot-send":
                    h.proxy.cut(n, o, mode)
                else:
                    h.proxy.cut(o, n, mode)
        # every kind leaves `minority` unable to complete a round trip with a majority:
        # it cannot commit anything, which is what the checker holds it to
        h.history.event("partition", minority, groups=[sorted(minority), sorted(majority)],
                        partition_kind=kind, mode=mode)
        return True

    def stop(self, h) -> None:
        # the event first: the checker ends the partition's window at its time, and traffic
        # the proxy held is released the moment heal() runs (an acknowledgement it carried
        # could be recorded before a heal event written after heal() returned)
        h.history.event("heal")
        h.proxy.heal()


class SlowNetwork(Nemesis):
    """Delay + jitter on every link, or a bandwidth cap on the leader's outbound links."""

    counter = "slow_networks"
    name = "slow-network"

    def start(self, h) -> bool:
        ids = list(h.cluster.ids)
        if h.rng.random() < 0.5:
            delay, jitter = h.rng.choice(((20, 20), (50, 50), (100, 150)))
            for s in ids:
                for d in ids:
                    if s != d:
                        h.proxy.set_faults(s, d, delay_ms=delay, jitter_ms=jitter)
            h.history.event("slow-network", ids, delay_ms=delay, jitter_ms=jitter)
        else:
            leader = h.leader()
            if leader is None:
                return False
            bw = h.rng.choice((64 << 10, 256 << 10, 1 << 20))
            for d in ids:
                if d != leader:
                    h.proxy.set_faults(leader, d, bandwidth_bytes_per_s=bw)
            h.history.event("slow-network", [leader], bandwidth_bytes_per_s=bw)
        return True

    def stop(self, h) -> None:
        # the event first: the checker ends the partition's window at its time, and traffic
        # the proxy held is released the moment heal() runs (an acknowledgement it carried
        # could be recorded before a heal event written after heal() returned)
        h.history.event("heal")
        h.proxy.heal()


class ResetConnections(Nemesis):
    """RST every peer connection of one node (SO_LINGER 0), a few times in a row."""

    counter = "resets"
    name = "reset-connections"

    def start(self, h) -> bool:
        n = _pick(h, h.rng.choice(("leader", "any")))
        if n is None:
            return False
        k = h.proxy.reset(n)
        h.history.event("reset", [n], connections=k)
        return True

    def stop(self, h) -> None:
        pass


def cut_power(h, n: str) -> dict:
    """SIGKILL node n and lose what a power loss would (h.power_model). When the harness
    traces msync (h.msync_tracing), the last byte the process had msync'd is recorded too,
    and a model that zeroed a byte below it -- durable data -- is reported as a
    `power-model-violation` event (the power cut was not faithful)."""
    maps = h.msync_maps(n)
    h.cluster.kill(n)
    lost = lose_unflushed_tail(h.cluster.data_dir(n), h.power_model)
    synced = h.msync_end(n, maps)
    if synced is not None:
        lost["msync_end"] = synced
        z = lost.get("log_zeroed_from")
        if z is not None and z < synced:
            h.history.event("power-model-violation", [n], zeroed_from=z, msync_end=synced,
                            model=h.power_model)
    h.history.event("power-cut", [n], **lost)
    return lost


class PowerCut(Nemesis):
    """SIGKILL a node and lose what a power loss would (lose_unflushed_tail, with the
    harness's model), then restart it. Never the disk-full victim: its data lives in RAM
    (tmpfs), where a power loss loses everything."""

    counter = "power_cuts"

    def __init__(self, target: str = "any"):
        super().__init__()
        self.target = target
        self.name = f"power-cut-{target}"
        self.node = None

    def start(self, h) -> bool:
        n = _pick(h, self.target)
        if n is None:
            return False
        if n == h.disk_victim:
            if self.target != "leader":
                n = h.rng.choice([x for x in h.cluster.ids if x != h.disk_victim])
            elif not h.move_leadership_away(n) or (n := h.leader()) in (None, h.disk_victim):
                return False
        cut_power(h, n)
        self.node = n
        return True

    def stop(self, h) -> None:
        h.restart(self.node)


class LaggingPowerLoss(Nemesis):
    """A compound fault that probes the durability window of the flush mode:

      1. isolate one follower (F2) so it falls behind while the load goes on;
      2. SIGKILL the other follower (F1: its page cache survives), then cut the leader's
         power (L: it loses its unflushed tail, as lose_unflushed_tail says);
      3. heal the partition and restart L: L and F2 are a majority and elect a leader;
      4. when healed, restart F1.

    Entries committed by {L, F1} just before the cut are on F1 (down) and, unless flushed,
    no longer on L. In sync mode L flushed every entry before counting itself, so it still
    holds them and nothing acknowledged may be lost. In async mode (DLedger's behaviour)
    the majority {L, F2} may lack them: they can be lost -- one power loss and one process
    crash suffice; this is the window docs/reliability.md measures."""

    counter = "lagging_power_losses"
    name = "lagging-power-loss"

    def __init__(self):
        super().__init__()
        self.f1 = None

    def start(self, h) -> bool:
        lead = h.leader()
        if lead is None or lead == h.disk_victim or len(h.cluster.ids) != 3:
            return False
        f1, f2 = h.rng.sample([n for n in h.cluster.ids if n != lead], 2)
        h.history.event("lagging-power-loss", [lead, f1, f2], leader=lead, crashed=f1,
                        lagging=f2)
        h.proxy.partition([f2], [lead, f1])
        h.history.event("partition", [f2], groups=[[f2], sorted([lead, f1])],
                        partition_kind="isolate-follower", mode="blackhole")
        time.sleep(h.rng.uniform(0.5, 1.5))                # F2 falls behind under load
        h.cluster.kill(f1)
        h.history.event("kill", [f1], target="follower")
        cut_power(h, lead)
        h.proxy.heal()
        h.history.event("heal")
        h.restart(lead)
        self.f1 = f1
        return True

    def stop(self, h) -> None:
        h.restart(self.f1)


def undo_flip(where: dict) -> None:
    """Flip the same bit back (the operator restored the record from a good copy)."""
    with open(where["file"], "r+b") as fh:
        off = where["position"] % where["segment_size_bytes"]
        fh.seek(off)
        b = fh.read(1)[0]
        fh.seek(off)
        fh.write(bytes([b ^ (1 << where["bit"])]))
        fh.flush()
        os.fsync(fh.fileno())


def wipe_log(data_dir) -> list[str]:
    """Remove a stopped replica's log and everything derived from it, keeping its Raft hard
    state (term and vote: forgetting a vote could elect two leaders in one term); it starts
    empty and is caught up by the leader from the first entry -> what was removed."""
    import shutil
    gone = []
    for name in ("commitlog", "index", "consumequeue", "checkpoint", "topics.json",
                 "delay_offsets.json", "abort"):
        p = os.path.join(data_dir, name)
        if os.path.isdir(p):
            shutil.rmtree(p)
            gone.append(name)
        elif os.path.exists(p):
            os.unlink(p)
            gone.append(name)
    return gone


class BitFlip(Nemesis):
    """Stop one follower (always the same node, `h.flip_victim`: damage stays on a
    minority), flip one bit of a committed record, restart it. A replica that refuses to
    start on the damage (CorruptLogError naming the file and offset: fail-stop) is
    repaired as `h.flip_repair` says -- "undo" (restore the bit, as from a backup) or
    "wipe" (empty its log, keep its hard state; the leader re-replicates everything) --
    and started again."""

    counter = "bit_flips"
    name = "bit-flip"

    def __init__(self):
        super().__init__()
        self.where = None

    def start(self, h) -> bool:
        n = h.flip_victim
        try:
            if read_checkpoint(h.cluster.data_dir(n)).committed_index < 1:
                return False              # nothing committed (checkpointed) there yet
        except (OSError, QuorumlogError):
            return False
        if h.leader() == n and not h.move_leadership_away(n):
            return False
        h.cluster.kill(n)
        try:
            where = flip_committed_bit(h.cluster.data_dir(n), h.rng)
        except QuorumlogError as e:
            log.warning("bit flip skipped: %s", e)
            h.restart(n)
            return False
        self.where = where
        h.history.event("bit-flip", [n], **{k: v for k, v in where.items() if k != "file"})
        return True

    def stop(self, h) -> None:
        n = h.flip_victim
        if h.restart(n, expect_failure=True):
            h.history.event("started-with-damage", [n])
            return
        h.history.event("refused-start", [n], error=h.last_start_error(n))
        if h.flip_repair == "undo":
            undo_flip(self.where)
            h.history.event("repair", [n], how="undo", position=self.where["position"])
        else:
            gone = wipe_log(h.cluster.data_dir(n))
            h.history.event("repair", [n], how="wipe", removed=gone)
        h.restart(n)


class DiskFull(Nemesis):
    """Fill the file system of `h.disk_victim`'s data directory (its own small tmpfs or
    loop-mounted image) with a ballast file; healing removes it, and restarts the node if
    it did not catch up on its own (a failed write is never retried into success)."""

    counter = "disk_fulls"
    name = "disk-full"

    def __init__(self):
        super().__init__()
        self.ballast = None

    def start(self, h) -> bool:
        n = h.disk_victim
        if n is None:
            return False
        lead = h.leader()
        self.ballast, got = fill_disk(h.cluster.data_dir(n))
        h.history.event("disk-full", [n], ballast_bytes=got, leader=lead)
        return True

    def stop(self, h) -> None:
        n = h.disk_victim
        if self.ballast and os.path.exists(self.ballast):
            os.unlink(self.ballast)
        h.history.event("disk-ok", [n])
        if not h.cluster.alive(n) or not h.caught_up(n, timeout=h.recover_timeout_s):
            log.warning("%s did not recover from a full disk by itself: restarting it", n)
            h.history.event("restart-after-disk-full", [n], alive=h.cluster.alive(n))
            if h.cluster.alive(n):
                h.cluster.kill(n)
            h.restart(n)


NEMESES = {
    "kill-leader": lambda: Kill("leader"),
    "kill-follower": lambda: Kill("follower"),
    "kill-any": lambda: Kill("any"),
    "pause-leader": lambda: Pause("leader"),
    "pause-follower": lambda: Pause("follower"),
    "partition": lambda: Partition(),
    "isolate-leader": lambda: Partition("isolate-leader"),
    "slow-network": SlowNetwork,
    "reset": ResetConnections,
    "power-cut": lambda: PowerCut("any"),
    "power-cut-leader": lambda: PowerCut("leader"),
    "bit-flip": BitFlip,
    "disk-full": DiskFull,
    "lagging-power-loss": LaggingPowerLoss,
    "disk-error": DiskError,
    "clock-skew": ClockSkew,
}
