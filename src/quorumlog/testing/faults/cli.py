"""The command line of the runner: `python -m quorumlog.testing.faults` (or the older
`python -m quorumlog.testing.jepsen`); exit status 0 valid, 1 findings, 2 harness failure."""
from __future__ import annotations

import argparse
import logging
import random
import sys

from ...errors import QuorumlogError
from .config import RunConfig
from .run import run


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m quorumlog.testing.jepsen",
                                description="Jepsen-style fault testing of a local replica "
                                            "group (real processes, fault proxy, checker).")
    p.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--flush", choices=("sync", "async"), default="async")
    p.add_argument("--duration", type=float, default=600.0,
                   help="cap on the nemesis phase, seconds")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--kill-target", choices=("leader", "follower", "any", "mixed"),
                   default="leader")
    p.add_argument("--partitions", type=int, default=5)
    p.add_argument("--pauses", type=int, default=0)
    p.add_argument("--power-cuts", type=int, default=0)
    p.add_argument("--bit-flips", type=int, default=0)
    p.add_argument("--disk-fulls", type=int, default=0)
    p.add_argument("--slow-networks", type=int, default=0)
    p.add_argument("--resets", type=int, default=0)
    p.add_argument("--lagging-power-losses", type=int, default=0,
                   help="compound fault: a follower lags, the other crashes, the leader "
                        "loses power (nemesis.LaggingPowerLoss)")
    p.add_argument("--disk-errors", type=int, default=0,
                   help="one replica's msync/fsync/fallocate fail with EIO or ENOSPC for a "
                        "while (strace --inject; syscall_faults.DiskError)")
    p.add_argument("--clock-skews", type=int, default=0,
                   help="the leader's clock slow, the followers' fast (within "
                        "--clock-skew-permille), the leader isolated (clockskew.ClockSkew)")
    p.add_argument("--clock-skew-permille", type=int, default=50,
                   help="the largest clock-rate skew applied (the replicas' drift bound)")
    p.add_argument("--all-nemeses", action="store_true",
                   help="add, per 10 kills: 1 partition, 1 power cut, and every 20 kills: 1 "
                        "pause, 1 slow network, 1 reset, 1 lagging power loss, 1 clock "
                        "skew; per 50 kills: 1 bit flip, 1 full disk, 1 disk error (at "
                        "least one of each)")
    p.add_argument("--power-model", choices=("dirty-pages", "checkpoint"),
                   default="dirty-pages",
                   help="what a power cut loses: the page cache's dirty pages (needs root), "
                        "or everything after the checkpoint's flushed position")
    p.add_argument("--flip-repair", choices=("wipe", "undo"), default="wipe",
                   help="how a replica refusing to start on a flipped bit is repaired")
    p.add_argument("--trace-msync", action="store_true",
                   help="strace every replica's msync calls and report a power cut that "
                        "zeroed bytes a replica had made durable (checks the model)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--rate", type=float, default=100.0, help="batches per second in all")
    p.add_argument("--large-ratio", type=float, default=0.002,
                   help="share of batches larger than one APPEND (1 MiB)")
    p.add_argument("--disk-size-mb", type=int, default=512,
                   help="size of the full-disk victim's own file system")
    p.add_argument("--dir", default=None, help="run directory (default: a new temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the run directory when valid")
    p.add_argument("--log-level", default="WARNING", help="the replicas' log level")
    return p


def config_from_args(a) -> RunConfig:
    seed = a.seed if a.seed is not None else random.SystemRandom().getrandbits(31)
    cfg = RunConfig(seed=seed, nodes=a.nodes, flush=a.flush, duration_s=a.duration,
                    kills=a.kills, kill_target=a.kill_target, partitions=a.partitions,
                    pauses=a.pauses, power_cuts=a.power_cuts, bit_flips=a.bit_flips,
                    disk_fulls=a.disk_fulls, slow_networks=a.slow_networks, resets=a.resets,
                    lagging_power_losses=a.lagging_power_losses, disk_errors=a.disk_errors,
                    clock_skews=a.clock_skews, clock_skew_permille=a.clock_skew_permille,
                    workers=a.workers, rate_ops_s=a.rate, directory=a.dir, keep=a.keep,
                    power_model=a.power_model, flip_repair=a.flip_repair,
                    disk_size_mb=a.disk_size_mb, large_ratio=a.large_ratio,
                    trace_msync=a.trace_msync,
                    log_level=a.log_level.upper())
    if a.all_nemeses:
        k = a.kills
        for name, per in (("partitions", 10), ("power_cuts", 10), ("pauses", 20),
                          ("slow_networks", 20), ("resets", 20), ("bit_flips", 50),
                          ("disk_fulls", 50), ("lagging_power_losses", 20),
                          ("disk_errors", 50), ("clock_skews", 20)):
            setattr(cfg, name, max(getattr(cfg, name), k // per, 1))
    return cfg


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        cfg = config_from_args(a)
        cfg.validate()
    except QuorumlogError as e:
        print(f"jepsen: {e}", file=sys.stderr)
        return 2
    report = run(cfg)
    if report.notes_fatal:
        return 2
    return 0 if report.valid else 1


if __name__ == "__main__":
    sys.exit(main())
