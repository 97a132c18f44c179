"""The run's settings (RunConfig: nodes, flush mode, how many of each nemesis, load, timing)
and the names every part of the harness shares."""
from __future__ import annotations

import dataclasses

from ...errors import InvalidArgumentError

TOPIC = "jepsen"
MAX_QUEUES_READ = 1024

# (RunConfig field, history event kind) of each nemesis counted in the summary
COUNTERS = (("kills", "kill"), ("partitions", "partition"), ("pauses", "pause"),
            ("power_cuts", "power-cut"), ("bit_flips", "bit-flip"),
            ("disk_fulls", "disk-full"), ("slow_networks", "slow-network"),
            ("resets", "reset"), ("lagging_power_losses", "lagging-power-loss"),
            ("disk_errors", "disk-error"), ("clock_skews", "clock-skew"))


@dataclasses.dataclass
class RunConfig:
    seed: int
    nodes: int = 3
    flush: str = "async"
    duration_s: float = 600.0          # hard cap on the nemesis phase
    kills: int = 20
    kill_target: str = "leader"        # leader | follower | any | mixed
    partitions: int = 5
    pauses: int = 0
    power_cuts: int = 0
    bit_flips: int = 0
    disk_fulls: int = 0
    slow_networks: int = 0
    resets: int = 0
    lagging_power_losses: int = 0      # nemesis.LaggingPowerLoss (3 nodes)
    disk_errors: int = 0               # syscall_faults.DiskError (EIO / ENOSPC, strace)
    clock_skews: int = 0               # clockskew.ClockSkew (LD_PRELOAD clock-rate shim)
    clock_skew_permille: int = 50      # the drift bound the replicas are configured with
    workers: int = 4
    rate_ops_s: float = 100.0          # produce batches per second, all workers together
    op_timeout_s: float = 10.0         # a batch retried this long, then indeterminate
    request_timeout_s: float = 2.0
    invalid_ratio: float = 0.02        # batches that must fail (oversize body, bad queue)
    large_ratio: float = 0.002         # batches over one APPEND's byte budget
    segment_size_bytes: int = 1 << 20
    quiet_s: tuple = (0.3, 1.5)        # load without faults between two nemeses
    hold_s: tuple = (0.5, 3.0)         # how long a fault stays
    converge_limit_s: float = 10.0
    recover_timeout_s: float = 30.0    # waits for recovery before the run goes on anyway
    disk_size_mb: int = 512
    power_model: str = "dirty-pages"   # or "checkpoint" (nemesis.lose_unflushed_tail)
    flip_repair: str = "wipe"          # or "undo" (nemesis.BitFlip)
    trace_msync: bool = False          # strace every replica's msync (checks power cuts)
    directory: str | None = None
    keep: bool = False
    log_level: str = "INFO"

    def validate(self) -> "RunConfig":
        if self.nodes < 3 or self.nodes > 9:
            raise InvalidArgumentError("nodes must be in [3, 9]")
        if self.flush not in ("sync", "async"):
            raise InvalidArgumentError("flush must be sync or async")
        if self.power_model not in ("dirty-pages", "checkpoint"):
            raise InvalidArgumentError("power_model must be dirty-pages or checkpoint")
        if self.flip_repair not in ("wipe", "undo"):
            raise InvalidArgumentError("flip_repair must be wipe or undo")
        if self.kill_target not in ("leader", "follower", "any", "mixed"):
            raise InvalidArgumentError("kill_target must be leader, follower, any or mixed")
        for name in ("kills", "partitions", "pauses", "power_cuts", "bit_flips", "disk_fulls",
                     "slow_networks", "resets", "lagging_power_losses",
                     "disk_errors", "clock_skews"):
            if not 0 <= getattr(self, name) <= 100_000:
                raise InvalidArgumentError(f"{name} must be in [0, 100000]")
        if not 0 <= self.clock_skew_permille <= 500:
            raise InvalidArgumentError("clock_skew_permille must be in [0, 500]")
        if not 1 <= self.workers <= 64 or not 0 < self.rate_ops_s <= 10_000:
            raise InvalidArgumentError("workers in [1, 64], rate_ops_s in (0, 10000]")
        return self
