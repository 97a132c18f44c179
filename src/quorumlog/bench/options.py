"""Options of `quorumlog bench`: one validated BenchOptions, the limit of every option, and the
resolution of an option's value (given by the user > set by a suite step > the workload's
default). The CLI parses text into these; tests build them directly."""
from __future__ import annotations

import dataclasses
import os
import re

from ..errors import InvalidArgumentError
from ..net.messages import MAX_GROUPS  # --groups: Raft groups per replica process
# --steady: segment MiB of the steady-state cluster shape (the store's minimum segment is
# 64 KiB; below 16 MiB the run is mostly segment switches)
MIN_STEADY_MIB, MAX_STEADY_MIB = 16, 1024

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

# Every body starts with an 8-byte sequence number (the integrity check reads it back).
MIN_SIZE_BYTES = 8
# The store's default max_message_bytes: the largest body an out-of-the-box store accepts.
MAX_SIZE_BYTES = 4 * MiB
MAX_COUNT = 1_000_000_000
MIN_DURATION_S = 0.1
MAX_DURATION_S = 24 * 3600.0
MAX_PRODUCERS = 256
# The store's default max_batch_messages and max_batch_bytes bound one put_batch.
MAX_BATCH = 65536
MAX_BATCH_BYTES = 64 * MiB
MAX_WINDOW = 1024
MAX_REPLICAS = 9
FLUSH_MODES = ("sync", "async")
MAX_KILLS = 1000
MIN_KILL_EVERY_S = 0.5
MAX_KILL_EVERY_S = 3600.0
DEFAULT_WARM_GIB = 2.0
QUICK_WARM_GIB = 0.25
# Memory touched before measuring: at most half of the machine's RAM.
_PHYS_BYTES = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
MAX_WARM_GIB = max(0.0, round(_PHYS_BYTES / 2 / GiB, 2))
MIN_RATE, MAX_RATE = 1.0, 1e8          # --rate, messages per second

_SIZE_RE = re.compile(r"^\s*(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "b": 1, "k": KiB, "kb": KiB, "kib": KiB, "m": MiB, "mb": MiB,
               "mib": MiB, "g": GiB, "gb": GiB, "gib": GiB}


class BenchOptionError(InvalidArgumentError):
    """A `quorumlog bench` option outside its limits or not applicable to a workload."""


def parse_size(text: str) -> int:
    """'1024', '1k', '4KiB', '1MiB' -> bytes (binary units: k = 1024)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise BenchOptionError(f"{text!r} is not a size (examples: 100, 1k, 4KiB, 1MiB)")
    unit = m.group(2).lower() if m.group(2) else None
    return int(m.group(1)) * _SIZE_UNITS[unit]


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """What the user asked for. None means "not given": the workload's default applies.

    size: body bytes; count / duration_s: messages per measured write phase, or its length
    (at most one of them); producers: threads putting at once; batch: messages per
    put_batch/append_batch (1 = single puts); window: batches in flight per producer before
    it waits for the oldest one's acknowledgement; flush: "sync" or "async"; replicas: nodes
    of a replicated workload; dir: where stores are created; keep: leave them there;
    seed: seeds the random bodies; json_path: write the results there; warm_gib: memory
    touched before measuring; quick: small defaults for a smoke run; wide: every column of the
    table; references: measure the
    machine's limits; progress: live progress line (None: only on a terminal).
    connect: client addresses ("host:port") of running replicas to drive instead of starting
    them; secret_file: the file holding their cluster secret (first line); kills: leader
    kills of the failover workload; kill_every_s: seconds between them; rate: messages per
    second offered on a fixed schedule (latency at a fixed load, from each batch's scheduled
    send time), None: as fast as acknowledgements allow."""
    size: int | None = None
    count: int | None = None
    duration_s: float | None = None
    producers: int | None = None
    batch: int | None = None
    window: int | None = None
    flush: str | None = None
    replicas: int | None = None
    dir: str | None = None
    keep: bool = False
    seed: int = 1
    json_path: str | None = None
    warm_gib: float | None = None
    quick: bool = False
    wide: bool = False
    references: bool = True
    progress: bool | None = None
    connect: tuple | None = None
    secret_file: str | None = None
    kills: int | None = None
    kill_every_s: float | None = None
    rate: float | None = None
    groups: int | None = None      # Raft groups per replica process (cluster)
    # cluster: the steady-state shape -- segments of this many MiB that retention deletes
    # (and the log reuses) during the run; None: the fresh-log shape
    steady_mib: int | None = None

    def __post_init__(self):
        _check_int("--size", self.size, MIN_SIZE_BYTES, MAX_SIZE_BYTES)
        _check_int("--count", self.count, 1, MAX_COUNT)
        if self.duration_s is not None:
            if not isinstance(self.duration_s, (int, float)) or isinstance(self.duration_s, bool) \
                    or not MIN_DURATION_S <= self.duration_s <= MAX_DURATION_S:
                raise BenchOptionError(f"--duration {self.duration_s!r} outside "
                                       f"[{MIN_DURATION_S}, {MAX_DURATION_S:.0f}] seconds")
        if self.count is not None and self.duration_s is not None:
            raise BenchOptionError("give --count or --duration, not both")
        _check_int("--producers", self.producers, 1, MAX_PRODUCERS)
        _check_int("--batch", self.batch, 1, MAX_BATCH)
        _check_int("--window", self.window, 1, MAX_WINDOW)
        _check_int("--replicas", self.replicas, 1, MAX_REPLICAS)
        _check_int("--groups", self.groups, 1, MAX_GROUPS)
        _check_int("--steady", self.steady_mib, MIN_STEADY_MIB, MAX_STEADY_MIB)
        if self.flush is not None and self.flush not in FLUSH_MODES:
            raise BenchOptionError(f"--flush {self.flush!r}: use sync or async")
        if self.warm_gib is not None:
            if not isinstance(self.warm_gib, (int, float)) or not 0 <= self.warm_gib <= MAX_WARM_GIB:
                raise BenchOptionError(f"--warm-gib {self.warm_gib!r} outside [0, {MAX_WARM_GIB}] "
                                       "(at most half of this machine's memory)")
        _check_int("--kills", self.kills, 1, MAX_KILLS)
        k = self.kill_every_s
        if k is not None:
            if not isinstance(k, (int, float)) or isinstance(k, bool) \
                    or not MIN_KILL_EVERY_S <= k <= MAX_KILL_EVERY_S:
                raise BenchOptionError(f"--kill-every {self.kill_every_s!r} outside "
                                       f"[{MIN_KILL_EVERY_S}, {MAX_KILL_EVERY_S:.0f}] seconds")
        if self.rate is not None and (not isinstance(self.rate, (int, float))
                                      or isinstance(self.rate, bool)
                                      or not MIN_RATE <= self.rate <= MAX_RATE):
            raise BenchOptionError(f"--rate {self.rate!r} outside [{MIN_RATE:g}, {MAX_RATE:g}] "
                                   "messages per second")
        if self.connect is not None:
            if not isinstance(self.connect, tuple) \
                    or not 1 <= len(self.connect) <= MAX_REPLICAS:
                raise BenchOptionError(f"--connect needs 1 .. {MAX_REPLICAS} addresses")
            for a in self.connect:
                parse_address(a)
        if self.secret_file is not None and self.connect is None:
            raise BenchOptionError("--secret-file goes with --connect (replicas the benchmark "
                                   "starts get a secret of their own)")
        if type(self.seed) is not int or not 0 <= self.seed < 1 << 63:
            raise BenchOptionError(f"--seed {self.seed!r} must be an integer in [0, 2**63)")
        if self.size is not None and self.batch is not None \
                and self.size * self.batch > MAX_BATCH_BYTES:
            raise BenchOptionError(f"--batch {self.batch} x --size {self.size} = "
                                   f"{self.size * self.batch} bytes > {MAX_BATCH_BYTES} "
                                   "(the store's max_batch_bytes)")

    @property
    def warm_bytes(self) -> int:
        gib = self.warm_gib
        if gib is None:
            gib = min(QUICK_WARM_GIB if self.quick else DEFAULT_WARM_GIB, MAX_WARM_GIB)
        return int(gib * GiB)


def parse_address(text: str) -> str:
    """'host:port' (port 1..65535) -> the same text; anything else is a BenchOptionError."""
    host, sep, port = str(text).strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise BenchOptionError(f"--connect: {text!r} is not host:port")
    return f"{host}:{int(port)}"


def parse_connect(text: str) -> tuple:
    """'h1:p1,h2:p2' -> ('h1:p1', 'h2:p2')."""
    parts = tuple(parse_address(a) for a in str(text).split(",") if a.strip())
    if not parts:
        raise BenchOptionError("--connect needs at least one host:port")
    if len(parts) > MAX_REPLICAS:
        raise BenchOptionError(f"--connect: {len(parts)} addresses > {MAX_REPLICAS}")
    if len(set(parts)) != len(parts):
        raise BenchOptionError(f"--connect: an address is given twice in {text!r}")
    return parts


def _check_int(name, value, lo, hi):
    if value is None:
        return
    if type(value) is not int or not lo <= value <= hi:
        raise BenchOptionError(f"{name} {value!r} outside [{lo}, {hi}]")


@dataclasses.dataclass(frozen=True)
class Resolved:
    """The values one workload run uses (every option filled in). `count` or `duration_s` is
    set, never both."""
    size: int
    count: int | None
    duration_s: float | None
    producers: int
    batch: int
    window: int
    flush: str
    replicas: int
    seed: int
    # the failover workload's kills and the seconds between them (None elsewhere)
    kills: int | None = None
    kill_every_s: float | None = None
    # addresses of running replicas driven instead of started ones (None: started here)
    connect: tuple | None = None
    # messages per second offered at a fixed schedule (None: as fast as acknowledged)
    rate: float | None = None
    # Raft groups per replica process (node/groups.py); 1: one group
    groups: int = 1
    # cluster: segments of this many MiB deleted by retention during the run (None: fresh log)
    steady_mib: int | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def resolve(opts: BenchOptions, defaults: dict) -> Resolved:
    """Fill every option from the workload's `defaults` where `opts` has none. Under --quick a
    default count or duration is divided by 10 (never what the user gave)."""
    if opts.connect is not None and opts.secret_file is None:
        # (checked before anything starts: without it the first connection would fail)
        raise BenchOptionError("--connect needs --secret-file F: the file whose first line "
                               "is the running replicas' cluster secret")
    count, duration = opts.count, opts.duration_s
    if count is None and duration is None:
        count, duration = defaults.get("count"), defaults.get("duration_s")
        if opts.quick:
            count = None if count is None else max(1, count // 10)
            duration = None if duration is None else max(MIN_DURATION_S, duration / 10)
    r = Resolved(size=opts.size if opts.size is not None else defaults.get("size", KiB),
                 count=count, duration_s=duration,
                 producers=_pick(opts.producers, defaults, "producers", 1),
                 batch=_pick(opts.batch, defaults, "batch", 1),
                 window=_pick(opts.window, defaults, "window", 1),
                 flush=_pick(opts.flush, defaults, "flush", "async"),
                 replicas=_pick(opts.replicas, defaults, "replicas", 1),
                 seed=opts.seed,
                 kills=_pick(opts.kills, defaults, "kills", None),
                 kill_every_s=_pick(opts.kill_every_s, defaults, "kill_every_s", None),
                 connect=opts.connect, rate=opts.rate,
                 groups=_pick(opts.groups, defaults, "groups", 1),
                 steady_mib=opts.steady_mib)
    if r.size * r.batch > MAX_BATCH_BYTES:
        raise BenchOptionError(f"batch {r.batch} x size {r.size} = {r.size * r.batch} bytes > "
                               f"{MAX_BATCH_BYTES} (the store's max_batch_bytes): lower --batch")
    return r


def _pick(value, defaults, key, fallback):
    return value if value is not None else defaults.get(key, fallback)
