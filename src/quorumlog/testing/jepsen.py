"""`python -m quorumlog.testing.jepsen`: the Jepsen-style fault-testing run, kept under its
first name; the harness itself is the package quorumlog.testing.faults (cut by concern)."""
import sys

from .faults import RunConfig, run
from .faults.cli import main

__all__ = ["RunConfig", "run", "main"]

if __name__ == "__main__":
    sys.exit(main())
