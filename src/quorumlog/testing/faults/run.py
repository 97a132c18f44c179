"""One run: start the replicas behind the proxy, load + the nemesis plan, heal, read every
replica, compare the logs, check the history; the summary and the run's artifacts."""
from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import random
import shutil
import subprocess
import tempfile
import time

from ...errors import QuorumlogError
from .. import nemesis as nem
from ..clockskew import build_shim
from ..faultproxy import FaultProxy
from ..history import CheckResult, History, check
from .cluster import IoThread, ProxiedCluster
from .config import COUNTERS, RunConfig
from .endstate import read_all, replica_logs
from .harness import Harness
from .volume import DiskVolume
from .workload import Workload

log = logging.getLogger(__name__)


def build_plan(cfg: RunConfig, rng: random.Random) -> list[str]:
    """The nemeses of the run in a seeded random order."""
    plan = []
    kill_kinds = {"leader": ["kill-leader"], "follower": ["kill-follower"],
                  "any": ["kill-any"], "mixed": ["kill-leader", "kill-leader", "kill-any"]}
    for _ in range(cfg.kills):
        plan.append(rng.choice(kill_kinds[cfg.kill_target]))
    plan += ["partition"] * cfg.partitions
    plan += [rng.choice(("pause-leader", "pause-follower")) for _ in range(cfg.pauses)]
    plan += [rng.choice(("power-cut", "power-cut-leader")) for _ in range(cfg.power_cuts)]
    plan += ["bit-flip"] * cfg.bit_flips
    plan += ["disk-full"] * cfg.disk_fulls
    plan += ["slow-network"] * cfg.slow_networks
    plan += ["reset"] * cfg.resets
    plan += ["lagging-power-loss"] * cfg.lagging_power_losses
    plan += ["disk-error"] * cfg.disk_errors
    plan += ["clock-skew"] * cfg.clock_skews
    rng.shuffle(plan)
    return plan


@dataclasses.dataclass
class Report:
    seed: int
    result: CheckResult
    summary: dict
    directory: str
    notes: list

    @property
    def valid(self) -> bool:
        return self.result.valid and not self.notes_fatal

    @property
    def notes_fatal(self) -> bool:
        return any(n.startswith("FATAL") for n in self.notes)


def _say(msg: str) -> None:
    print(msg, flush=True)


def _prepare(h: Harness, cfg: RunConfig, rng: random.Random, notes: list):
    """Choose the power-loss model and mount the full-disk victim's volume -> the volume
    (None without one)."""
    if (cfg.power_cuts or cfg.lagging_power_losses) and cfg.power_model == "dirty-pages":
        why = nem.dirty_page_model_available()
        if why is not None:
            notes.append(f"power cuts use the checkpoint model: dirty pages are not "
                         f"visible here ({why})")
            _say(notes[-1])
            cfg.power_model = h.power_model = "checkpoint"
    if not cfg.disk_fulls:
        return None
    victim = rng.choice(h.cluster.ids)
    volume = DiskVolume(h.cluster.data_dir(victim), cfg.disk_size_mb)
    if volume.mount():
        h.disk_victim = victim
        _say(f"disk-full victim {victim}: {volume.kind} of {cfg.disk_size_mb} MiB")
        return volume
    notes.append(f"disk-full nemesis skipped: could not mount a small file system "
                 f"({volume.reason})")
    _say(notes[-1])
    return None


def _apply(h: Harness, name: str) -> nem.Nemesis | None:
    """Start nemesis `name` (three tries, waiting for health between) -> it, or None."""
    n = nem.NEMESES[name]()
    for _attempt in range(3):
        if n.start(h):
            return n
        h.wait_healthy(f"{name} could not start")
    return None


def _nemesis_phase(h: Harness, cfg: RunConfig, rng: random.Random, workload: "Workload",
                   notes: list, t_start: float) -> None:
    """Every nemesis of the plan in turn: quiet load, inject, hold, heal, wait for health."""
    counts = collections.Counter()
    plan = build_plan(cfg, rng)
    plan = [p for p in plan if p != "disk-full" or h.disk_victim is not None]
    deadline = t_start + cfg.duration_s
    postponed: set = set()
    for k, name in enumerate(plan):
        if time.monotonic() > deadline:
            notes.append(f"duration cap {cfg.duration_s} s reached after {k} of "
                         f"{len(plan)} nemeses")
            _say(notes[-1])
            break
        time.sleep(rng.uniform(*cfg.quiet_s))
        n = _apply(h, name)
        if n is None:
            if k not in postponed:           # try once more at the end of the plan
                postponed.add(len(plan))
                plan.append(name)
            else:
                notes.append(f"{name} could not be applied (no leader, or nothing to act "
                             "on yet)")
            continue
        counts[n.counter] += 1
        time.sleep(rng.uniform(*cfg.hold_s))
        n.stop(h)
        after = h.wait_healthy(f"{name} healed")
        if (k + 1) % 10 == 0 or after is None:
            _say(f"[{time.monotonic() - t_start:6.1f}s] {k + 1}/{len(plan)} nemeses; "
                 f"{dict(counts)}; workload {dict(workload.counts)}; last heal -> "
                 f"{'not converged' if after is None else f'{after:.2f} s'}")


def _end_phase(h: Harness, cfg: RunConfig, workload: "Workload", notes: list):
    """Stop the load, heal everything, wait for convergence, read every replica, stop
    them, compare their logs, check -> (CheckResult, files to close)."""
    workload.stop(cfg.op_timeout_s + 30)
    up = h.heal_everything()
    after = h.wait_healthy("final heal", final=True)
    _say(f"final heal: replicas converged in "
         f"{'(not within limit)' if after is None else f'{after:.2f} s'}")
    if len(up) < cfg.nodes:
        notes.append(f"only {up} are running at the end: reads and log comparison "
                     "cover them alone")
    reads = read_all(h, up)
    h.close()
    codes = h.cluster.stop()
    bad_exit = {n: c for n, c in codes.items() if c != 0 and n in up}
    if bad_exit:
        notes.append(f"replicas exited with {bad_exit} on SIGTERM")
    logs, opened = replica_logs(h.cluster, up)
    return check(h.history.ops, h.history.events, reads, logs, nodes_total=cfg.nodes,
                 converge_limit_s=cfg.converge_limit_s), opened


def _summary(cfg: RunConfig, history: History, result: CheckResult, workload, notes,
             elapsed: float) -> dict:
    c = result.counts
    s = {"seed": cfg.seed, "flush": cfg.flush, "nodes": cfg.nodes,
         "elapsed_s": round(elapsed, 1), "ops": c.get("ops", 0),
         "acked_batches": c.get("acked_batches", 0),
         "acked_messages": c.get("acked_messages", 0),
         "failed_batches": c.get("failed_batches", 0),
         "indeterminate_batches": c.get("indeterminate_batches", 0)}
    for key, kind in COUNTERS:
        s[key] = history.count_events(kind)
    s.update({"acked_lost": c.get("acked_lost", 0),
              "acked_lost_by_short_acks": c.get("acked_lost_by_short_acks", 0),
              "short_acks": result.by_kind().get("short-ack", 0),
              "wrong_data": c.get("wrong_data", 0),
              "duplicates": c.get("duplicates", 0),
              "failed_appeared": c.get("failed_appeared", 0),
              "findings": c.get("findings", 0), "by_kind": result.by_kind(),
              "compared_bytes": c.get("compared_bytes", 0),
              "max_converge_s": round(c.get("max_converge_s", 0), 2),
              "damaged_unreadable": c.get("damaged_unreadable", 0),
              "restarts_after_disk_full": history.count_events("restart-after-disk-full"),
              "restarts_after_disk_error": history.count_events("restart-after-disk-error"),
              "acked_during_disk_errors": [e.detail.get("acked_during") for e in history.events
                                           if e.kind == "disk-error-healed"],
              "clock_skew_results": [dict(e.detail) for e in history.events
                                     if e.kind == "clock-skew-healed"],
              "refused_starts": history.count_events("refused-start"),
              "power_model_violations": history.count_events("power-model-violation"),
              "restart_failures": history.count_events("restart-failed"),
              "retried_batches": workload.counts["retried"] if workload else 0,
              "power_model": cfg.power_model
              if cfg.power_cuts or cfg.lagging_power_losses else None,
              "notes": notes})
    return s


def _clock_shim(cfg: RunConfig, directory: str, env: dict, notes: list) -> str | None:
    """With clock-skew nemeses: build the clock-rate shim and preload it into every
    replica -> the directory of the clocks' control files (None: skipped, noted)."""
    if not cfg.clock_skews:
        return None
    clock_dir = os.path.join(directory, "clock")
    os.makedirs(clock_dir, exist_ok=True)
    try:
        env["LD_PRELOAD"] = build_shim(directory)
    except (QuorumlogError, OSError, subprocess.SubprocessError) as e:
        notes.append(f"clock-skew nemesis skipped: {e}")
        _say(notes[-1])
        return None
    env["QUORUMLOG_CLOCK_DIR"] = clock_dir
    return clock_dir


def run(cfg: RunConfig) -> Report:
    """One run: start, load + nemeses, heal, read, check; prints the seed and a summary."""
    cfg.validate()
    rng = random.Random(cfg.seed)
    _say(f"quorumlog jepsen: seed {cfg.seed} (flush={cfg.flush}, nodes={cfg.nodes})")
    own_dir = cfg.directory is None
    directory = cfg.directory or tempfile.mkdtemp(prefix=f"jepsen-{cfg.seed}-")
    os.makedirs(directory, exist_ok=True)
    history = History()
    notes: list[str] = []
    proxy = FaultProxy(seed=rng.getrandbits(32))
    io = IoThread()
    # retention off (ratios 1.0): a replica must not delete acknowledged data under disk
    # pressure during the check; small index files so a small data volume holds them
    env = {"QUORUMLOG_DISK_CLEAN_RATIO": "1.0", "QUORUMLOG_DISK_FORCE_CLEAN_RATIO": "1.0",
           "QUORUMLOG_DISK_REJECT_RATIO": "1.0", "QUORUMLOG_INDEX_FILE_ENTRIES": "65536",
           "QUORUMLOG_CONSUME_QUEUE_FILE_ENTRIES": "65536"}
    clock_dir = _clock_shim(cfg, directory, env, notes)
    cluster = ProxiedCluster(directory, cfg.nodes, proxy, flush=cfg.flush,
                             segment_size_bytes=cfg.segment_size_bytes, env=env,
                             log_level=cfg.log_level)
    h = Harness(cfg, cluster, proxy, history, rng, io)
    h.clock_dir = clock_dir
    volume = workload = result = None
    t_start = time.monotonic()
    opened: list = []
    try:
        volume = _prepare(h, cfg, rng, notes)
        cluster.start()
        cluster.wait_started(timeout=60)
        for n in cluster.ids:
            h.trace(n)
        if h.leader(30) is None:
            raise QuorumlogError("no leader within 30 s of the start")
        _say(f"cluster up in {directory}; bit-flip victim {h.flip_victim}")
        workload = Workload(h, cfg, rng.getrandbits(32))
        workload.start()
        _nemesis_phase(h, cfg, rng, workload, notes, t_start)
        result, opened = _end_phase(h, cfg, workload, notes)
    except BaseException as e:
        notes.append(f"FATAL {type(e).__name__}: {e}")
        log.exception("jepsen run failed")
        if workload is not None and workload.stop_event is not None:
            try:
                workload.stop(cfg.op_timeout_s + 30)
            except Exception:
                pass
        if result is None:
            result = check(history.ops, history.events, (), (), nodes_total=cfg.nodes)
    finally:
        for o in opened:
            o.close()
        cluster.kill_all()
        h.stop_tracing()
        if volume is not None:
            volume.unmount()
        proxy.close()
        io.close()
    summary = _summary(cfg, history, result, workload, notes, time.monotonic() - t_start)
    report = Report(cfg.seed, result, summary, directory, notes)
    _write_artifacts(directory, history, result, summary)
    _print_summary(report)
    if own_dir and report.valid and not cfg.keep:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        _say(f"run directory kept: {directory}")
    return report


def _write_artifacts(directory, history: History, result: CheckResult, summary) -> None:
    try:
        with open(os.path.join(directory, "history.jsonl"), "w") as fh:
            for o in history.ops:
                fh.write(json.dumps(dataclasses.asdict(o)) + "\n")
            for e in history.events:
                fh.write(json.dumps({"event": e.kind, "time": e.time, "nodes": e.nodes,
                                     **dict(e.detail)}, default=str) + "\n")
        with open(os.path.join(directory, "summary.json"), "w") as fh:
            json.dump({**summary, "findings_text": [f"{f.kind}: {f.text}"
                                                   for f in result.findings]}, fh, indent=1)
    except OSError as e:
        log.warning("could not write the run's artifacts: %s", e)


def _print_summary(r: Report) -> None:
    s = r.summary
    _say("summary: " + ", ".join(f"{k}={v}" for k, v in s.items()
                                 if k not in ("notes", "by_kind")))
    for f in r.result.findings:
        _say(f"  FINDING {f.kind}: {f.text}")
    for n in r.notes:
        _say(f"  note: {n}")
    _say(f"seed {r.seed}: {'VALID' if r.valid else 'INVALID'} -- kills={s['kills']}, "
         f"partitions={s['partitions']}, power cuts={s['power_cuts']}, "
         f"bit flips={s['bit_flips']}, acked lost={s['acked_lost']}, "
         f"wrong data={s['wrong_data']}, duplicates={s['duplicates']}")
