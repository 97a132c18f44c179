"""`python -m quorumlog`: the same command as the `quorumlog` script."""
from .cli import main

raise SystemExit(main())
