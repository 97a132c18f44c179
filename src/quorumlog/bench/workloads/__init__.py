"""Workloads of `quorumlog bench`: the interface every workload implements and the registry the
command line is built from.

A workload is a class with:
  name      the subcommand (`quorumlog bench NAME`)
  summary   one line for --help
  defaults  values of the options the user did not give (count or duration_s, batch, ...)
  uses      the options it reads; given explicitly to a workload that does not use them, an
            option is an error (in the default suite it is simply not passed to that step)
  unavailable() -> None, or why it cannot run here (pyspark missing, no replicated node)
  check(resolved)  raise BenchOptionError for values it cannot honour
  run(resolved, ctx) -> list[Result]   measure; read back and verify what was acknowledged

To add one: write the class, decorate it with @register, and it becomes a subcommand and may
join the default suite (suite.py). A workload that starts processes records each one's CPU in
Result.cpu_seconds under its own label (the replicated workloads: one per replica).
"""
from __future__ import annotations

import dataclasses
import os
import shutil

from ..options import BenchOptionError, Resolved
from ..progress import ProgressLine
from ..references import touch_memory

# Option names as BenchOptions spells them; the CLI shows them as --size, --count, ...
ALL_OPTIONS = ("size", "count", "duration_s", "producers", "batch", "window", "flush",
               "replicas", "connect", "secret_file", "kills", "kill_every_s", "rate",
               "groups")
OPTION_FLAGS = {"duration_s": "--duration", "kill_every_s": "--kill-every"}


def flag(name: str) -> str:
    return OPTION_FLAGS.get(name, "--" + name.replace("_", "-"))


class WorkloadUnavailable(Exception):
    """The workload cannot run in this build or environment (the CLI exits with code 2)."""


@dataclasses.dataclass
class RunContext:
    """What a workload gets besides its options: a directory of its own, the progress line,
    and how much memory to touch before a write phase."""
    directory: str
    progress: ProgressLine
    warm_bytes: int
    quick: bool
    keep: bool
    secret_file: str | None = None     # with --connect: the running replicas' secret

    def new_dir(self, name: str) -> str:
        path = os.path.join(self.directory, name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def remove(self, path: str) -> None:
        if not self.keep:
            shutil.rmtree(path, ignore_errors=True)

    def warm(self, expected_bytes: int | None) -> None:
        """Fault in and free memory right before a write phase (see references.py)."""
        if self.warm_bytes <= 0:
            return
        n = self.warm_bytes if expected_bytes is None else min(self.warm_bytes,
                                                               expected_bytes * 5 // 4)
        touch_memory(n)


class Workload:
    name = ""
    summary = ""
    defaults: dict = {}
    uses: frozenset = frozenset()
    # For the disk check before a run (suite.step_disk_bytes): the bytes per second per
    # replica a duration-bound run may write at most (2.5x the fastest measured,
    # docs/benchmarks.md), and the size of the segment files it preallocates.
    write_rate_bound: int = 256 << 20
    segment_bytes: int = 1 << 30

    def unavailable(self) -> str | None:
        return None

    def check(self, r: Resolved) -> None:
        pass

    def run(self, r: Resolved, ctx: RunContext) -> list:
        raise NotImplementedError

    def describe(self, r: Resolved) -> str:
        """One line naming the run (the progress line's label)."""
        amount = f"{r.count:,} msgs" if r.count is not None else f"{r.duration_s:g} s"
        return f"{self.name} {r.flush} size={r.size} batch={r.batch} {amount}"


REGISTRY: dict[str, Workload] = {}


def register(cls):
    REGISTRY[cls.name] = cls()
    return cls


def get(name: str) -> Workload:
    try:
        return REGISTRY[name]
    except KeyError:
        raise BenchOptionError(f"no workload {name!r} (have: {', '.join(REGISTRY)})") from None


def not_used(workload: Workload, given: dict) -> list[str]:
    """Names of options in `given` (not None) that `workload` does not read."""
    return [k for k in ALL_OPTIONS if given.get(k) is not None and k not in workload.uses]


# Registration order is the order of `quorumlog bench --help` and of the default suite.
from . import log, store, e2e, scan, replicated  # noqa: E402,F401
