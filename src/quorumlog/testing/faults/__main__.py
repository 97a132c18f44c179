"""`python -m quorumlog.testing.faults`: one Jepsen-style run (see the package's docstring)."""
import sys

from .cli import main

sys.exit(main())
