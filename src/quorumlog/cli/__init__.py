"""The `quorumlog` command line: one click group (cli/main.py) with `bench`, `info`, `verify`,
`serve`, `cluster` (cli/node.py) and `repair` (cli/repair.py). `quorumlog` (the console
script) and `python -m quorumlog` run `main`."""
from .main import EXIT_DAMAGE, EXIT_OK, cli, main
from .stores import EXIT_USAGE

__all__ = ["cli", "main", "EXIT_OK", "EXIT_DAMAGE", "EXIT_USAGE"]
