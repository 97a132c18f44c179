"""The load generator behind `quorumlog bench`: workloads (workloads/), the measuring loop
(measure.py), latency histograms (latency.py), self-checking message bodies (payload.py), the
machine's reference limits (references.py), the default suite (suite.py) and the JSON / table
report (report.py). The command line is command.py; docs/benchmarks.md documents the output.

Runs from an installed package: no source checkout and no pytest needed.
"""
from .options import BenchOptionError, BenchOptions  # noqa: F401
from .suite import DEFAULT_SUITE, run  # noqa: F401
from .workloads import REGISTRY, WorkloadUnavailable  # noqa: F401
